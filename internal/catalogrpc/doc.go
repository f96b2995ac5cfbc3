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
// (the message says why, never the secret or token), a client over its rate
// ResourceExhausted, a group the client may not use or a write by a client
// that is not an admin PermissionDenied, catalog.ErrNotFound NotFound,
// catalog.ErrInvalid InvalidArgument, catalog.ErrUnavailable Unavailable.
// The gRPC server also serves the health and reflection services.
//
// Every resource is bounded: message size, connections per front end,
// concurrent gRPC streams per connection, the time a call may take, and the
// time a connection may sit idle (a Thrift client that connects and sends
// nothing is closed after --catalog-rpc-idle-timeout). Shutdown stops
// accepting, closes idle connections, lets calls in flight finish until its
// context ends, then closes the rest.
package catalogrpc
