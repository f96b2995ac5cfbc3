// Package catalogrpc serves inlet's event catalog over gRPC and Apache
// Thrift, with client credentials on every call.
//
// Two services share one catalog (see api/inf and api/catalog/v1):
//
//   - inf.Data/DataType, wire-compatible with the known public design, so its
//     existing clients work unchanged: the request's AuthRq carries the client
//     id and its secret or a session token; the answer's AuthRp carries a
//     session token for later calls; in catalog mode open a first-seen
//     (group, name) is given the next code. Over Thrift it is served
//     unmultiplexed, as its clients expect; errors are TApplicationExceptions
//     whose message says why (the IDL declares none).
//   - inlet.catalog.v1.Catalog (Get, List, Upsert, Block): over Thrift
//     multiplexed under that name on the same port, with the declared
//     CatalogError.
//
// Both front ends map errors alike: bad credentials are Unauthenticated
// (the message says why, never the secret or token, and an unknown client
// and a wrong secret get one answer), a client over its rate
// ResourceExhausted, a group the client may not use or a write by a client
// that is not an admin PermissionDenied, catalog.ErrNotFound NotFound,
// catalog.ErrInvalid and a name ingest would refuse (event.CheckName)
// InvalidArgument, catalog.ErrUnavailable Unavailable. Credentials are
// checked before anything else of a call; an error quotes at most
// event.MaxQuoteBytes of any input (event.Quote). The gRPC server also
// serves the health and reflection services.
//
// Every resource is bounded: message size, connections per front end,
// concurrent gRPC streams per connection, the time a call may take, and the
// time a connection may sit idle (a Thrift client that connects and sends
// nothing is closed after --catalog-rpc-idle-timeout). Memory is bounded
// before credentials are checked: requests draw from an in-flight byte
// budget (Config.Budget, the gateway's HTTP one) before they are read —
// a gRPC call its fixed window plus a message, a Thrift frame over 4 KiB its
// length — holding together at most the budget's per-connection share, and
// half of it on connections that have made no authenticated call. Such a
// connection may have preAuthStreams gRPC calls at once and is closed
// after --catalog-rpc-auth-timeout (see conn). Shutdown stops accepting,
// closes idle connections, lets calls in flight finish until its context
// ends, then closes the rest.
package catalogrpc
