// The catalog's key-value lookup, wire-compatible with the known public
// design: (groupName, enName) -> (codeId, CnName), with client credentials on
// every call. Bad credentials and lookups that fail answer a
// TApplicationException whose message says why (the IDL declares no
// exception). inlet's fuller service is catalog/v1/catalog.thrift.
namespace go inf
namespace py inf
struct AuthRq { 1: string clientId; 2: string token; }
struct AuthRp { 1: required string token; }
struct DataTypeRq { 1: required AuthRq authrq; 2: required string groupName; 3: required string enName; }
struct DataTypeRp { 1: required AuthRp authrp; 2: required i64 codeId; 3: required string CnName; }
service Data { DataTypeRp DataType(1: DataTypeRq dataTypeRq); }
