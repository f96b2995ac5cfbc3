// Package auth is inlet's client credentials: clients (id, hashed secret,
// groups, rate) from a file, short-lived HMAC-signed session tokens, per
// client rate limits, and the ways HTTP requests, gRPC and Thrift calls
// present them.
package auth
