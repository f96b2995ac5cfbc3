// inlet's event catalog over Thrift: the same service as catalog.proto
// (read that file for what each call does), with declared exceptions.
// Served multiplexed as "inlet.catalog.v1.Catalog" on inlet's Thrift port,
// beside the unmultiplexed inf.Data service.
namespace go catalogv1
namespace py inlet.catalog.v1

struct Credentials {
  1: string clientId
  // The client's secret, or a session token an earlier answer returned.
  2: string token
}

struct Session {
  1: required string token
  2: required i64 expiresUnixMs
}

enum Status {
  PLANNED = 1
  OBSERVED = 2
  BLOCKED = 3
}

struct Entry {
  1: required string group
  2: required string name
  3: required i64 code
  4: string displayName
  5: string schema
  6: Status status
  7: i64 createdUnixMs
  8: i64 updatedUnixMs
}

// The gRPC status code numbers, so that both front ends say the same.
enum ErrorCode {
  INVALID_ARGUMENT = 3
  NOT_FOUND = 5
  PERMISSION_DENIED = 7
  RESOURCE_EXHAUSTED = 8
  UNAVAILABLE = 14
  UNAUTHENTICATED = 16
}

exception CatalogError {
  1: required ErrorCode code
  2: required string message
}

struct EntryResult {
  1: required Session session
  2: required Entry entry
}

struct ListResult {
  1: required Session session
  2: required list<Entry> entries
  // "" on the last page.
  3: required string nextPageToken
}

struct UpsertRequest {
  1: required string group
  2: required string name
  // Unset fields keep their value.
  3: optional string displayName
  4: optional string schema
  5: optional Status status
}

service Catalog {
  EntryResult Get(1: Credentials auth, 2: string group, 3: string name) throws (1: CatalogError err)
  ListResult List(1: Credentials auth, 2: string group, 3: i32 pageSize, 4: string pageToken) throws (1: CatalogError err)
  EntryResult Upsert(1: Credentials auth, 2: UpsertRequest req) throws (1: CatalogError err)
  EntryResult Block(1: Credentials auth, 2: string group, 3: string name) throws (1: CatalogError err)
}
