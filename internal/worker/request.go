package worker

import "github.com/inlet-dev/inlet/internal/reply"

// Request is one call read from the service's request topic, decoded by
// reply.ParseRequest (the wire contract is package reply's).
type Request = reply.Request
