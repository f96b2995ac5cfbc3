// Package auth is inlet's client credentials: clients (id, hashed secret,
// groups, rate) from a file, short-lived HMAC-signed session tokens, per
// client rate limits, and the ways HTTP requests, gRPC and Thrift calls
// present them.
//
// The clients file (--clients) is JSON, made and changed by `inlet clients
// add|remove`, read strictly (exact field names, no unknown fields or
// duplicate keys, valid UTF-8) and reloaded when it changes:
//
//	{"clients":[{"id":"web","secret_sha256":"<64 hex>","groups":["web"],
//	  "default_group":"web","rate":100,"burst":200,"admin":false,
//	  "created":"2026-05-01T12:00:00Z"}]}
//
// A client presents its secret (43 base64url characters) and gets back a
// session token, "v1.<payload>.<mac>", valid for --auth-token-ttl, that it
// may present instead; both are accepted until then (the wire contract of
// inf.Data's AuthRq/AuthRp). Session tokens are checked without the file
// (an HMAC with a key shared through --auth-token-key-file), and refused
// once their client is removed or given a new secret. An admin client may
// change the catalog and watch the live events page.
//
// A client's rate is kept by each process, or, with Config.RateStore
// redis, in Redis, where it holds across every instance on it; when Redis
// fails or is slow each instance falls back to its own (shared.go).
//
// A refusal never tells an unknown client id from a wrong secret
// (ErrBadCredentials, one code path), and a source address that presents
// bad credentials too often is refused unchecked for a while
// (ErrThrottled; FromHTTP, AuthenticateFrom). WithoutCredentials is a
// query without its k=, for anything that keeps or shows a query.
package auth
