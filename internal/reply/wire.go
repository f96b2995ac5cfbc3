// Package reply is inlet's request-reply over Kafka: POST /v1/rpc/{service}
// produces the request to the service's topic and waits for the worker's
// reply, which comes back to the waiting instance through Redis pub/sub or
// a Kafka reply topic of its own. wire.go and wire_kafka.go are the wire
// contract shared with the workers (package worker): each record and
// message is encoded and decoded there, and nowhere else.
package reply

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Headers of a request record (topic rpc.<service> by default; key: the
// correlation id; value: the HTTP request body; RequestRecord and
// ParseRequest). inlet-correlation-id, inlet-reply-to and inlet-deadline are
// always set; a worker drops a request without them. A header with several
// values is joined with ", ".
//
// The deadline is wall-clock time: keep the clocks of gateways and workers
// in sync (NTP); skew moves the moment a worker gives up on a request.
//
// A reply goes to the address's topic, to the partition inlet-reply-partition
// names when the request has it (else by the correlation id: inlet reads
// every partition of its reply topic), or is PUBLISHed to the channel.
// A reply carries a status, a content type and a body, no other headers;
// on Kafka it must fit the broker's record limit (1 MB by default).
const (
	HeaderCorrelationID = "inlet-correlation-id"
	// HeaderReplyTo is where the reply goes: an Address.
	HeaderReplyTo = "inlet-reply-to"
	// HeaderReplyPartition, on a request with a kafka: address, is the
	// partition of the reply topic the reply goes to, in decimal.
	HeaderReplyPartition = "inlet-reply-partition"
	// HeaderDeadline is when the caller stops waiting, in Unix milliseconds.
	HeaderDeadline = "inlet-deadline"
	HeaderService  = "inlet-service"
	// HeaderClient is the id of the client that made the call, when the
	// gateway authenticates callers (inlet serve --auth). It is set by the
	// gateway only: a caller's own Inlet-Client header arrives as
	// http-inlet-client.
	HeaderClient = "inlet-client"
	// HeaderQuery is the request's raw query string, if any.
	HeaderQuery = "inlet-query"
	// HeaderContentType is the request's (or the reply's) content type.
	HeaderContentType = "content-type"
	// HTTPHeaderPrefix prefixes the HTTP request headers forwarded as record
	// headers, lower-cased: X-Trace-Id → http-x-trace-id.
	HTTPHeaderPrefix = "http-"
)

// Headers of a reply record on a Kafka reply topic (key: the correlation id;
// value: the reply body; ReplyRecord and ParseReply).
const (
	// HeaderStatus is the HTTP status the caller gets, in decimal.
	HeaderStatus = "inlet-status"
	// HeaderError, when set, says the worker failed: the caller gets 502
	// with this message.
	HeaderError = "inlet-error"
)

// Address is where a reply goes: "kafka:<topic>" or "redis:<channel>".
type Address struct {
	Kind string // "kafka" or "redis"
	Name string // the topic or the channel
}

func (a Address) String() string { return a.Kind + ":" + a.Name }

// ParseAddress parses an inlet-reply-to header.
func ParseAddress(s string) (Address, error) {
	kind, name, ok := strings.Cut(s, ":")
	if !ok || name == "" || (kind != "kafka" && kind != "redis") {
		return Address{}, fmt.Errorf("reply: address %q: want kafka:<topic> or redis:<channel>", s)
	}
	return Address{Kind: kind, Name: name}, nil
}

// FormatDeadline and ParseDeadline convert the inlet-deadline header. A time
// past what Unix milliseconds hold saturates (to the greatest or least
// int64) instead of wrapping around into the past.
func FormatDeadline(t time.Time) string {
	switch {
	case t.After(maxDeadline):
		return strconv.FormatInt(math.MaxInt64, 10)
	case t.Before(minDeadline):
		return strconv.FormatInt(math.MinInt64, 10)
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// The times whose Unix milliseconds fit an int64.
var (
	maxDeadline = time.UnixMilli(math.MaxInt64)
	minDeadline = time.UnixMilli(math.MinInt64)
)

// ParseDeadline parses an inlet-deadline header.
func ParseDeadline(s string) (time.Time, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("reply: deadline %q: want Unix milliseconds", s)
	}
	return time.UnixMilli(ms), nil
}

// Reply is a worker's answer to one request.
type Reply struct {
	ID          string // the correlation id of the request
	Status      int    // HTTP status for the caller; 0 means 200
	ContentType string
	Err         string // non-empty: the worker failed (the caller gets 502)
	Body        []byte

	unsent error // set by Router.Fail: the request never reached Kafka
}

// Marshal encodes r for Redis pub/sub:
//
//	'R' 1 uvarint(len id) id uvarint(status) uvarint(len ct) ct
//	uvarint(len err) err body...
func (r Reply) Marshal() []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(r.ID)+len(r.ContentType)+len(r.Err)+len(r.Body)+binary.MaxVarintLen64)
	b = append(b, 'R', 1)
	b = appendString(b, r.ID)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendString(b, r.ContentType)
	b = appendString(b, r.Err)
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ErrMalformed is returned for a reply that cannot be decoded.
var ErrMalformed = errors.New("reply: malformed reply")

// ValidStatus reports whether a reply may carry status: 0 (meaning 200) or a
// final HTTP status, 200 to 599. An informational 1xx is not an answer (a
// 101 passed on would have a proxy in front switch protocols), and codes
// past 599 are not HTTP's.
func ValidStatus(status int) bool { return status == 0 || (status >= 200 && status <= 599) }

// Unmarshal decodes what Marshal encoded. Body aliases b. On an invalid
// status, the Reply returned with the error holds the correlation id, so
// that its caller can be told.
func Unmarshal(b []byte) (Reply, error) {
	if len(b) < 2 || b[0] != 'R' || b[1] != 1 {
		return Reply{}, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	b = b[2:]
	var r Reply
	var ok bool
	if r.ID, b, ok = readString(b); !ok {
		return Reply{}, fmt.Errorf("%w: id", ErrMalformed)
	}
	st, n := binary.Uvarint(b)
	if n <= 0 || st > 599 || !ValidStatus(int(st)) {
		return Reply{ID: r.ID}, fmt.Errorf("%w: status %d: want a final HTTP status, 200 to 599 (or 0, meaning 200)", ErrMalformed, st)
	}
	r.Status, b = int(st), b[n:]
	if r.ContentType, b, ok = readString(b); !ok {
		return Reply{}, fmt.Errorf("%w: content type", ErrMalformed)
	}
	if r.Err, b, ok = readString(b); !ok {
		return Reply{}, fmt.Errorf("%w: error", ErrMalformed)
	}
	r.Body = b
	return r, nil
}

func readString(b []byte) (string, []byte, bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return "", nil, false
	}
	return string(b[n : n+int(l)]), b[n+int(l):], true
}
