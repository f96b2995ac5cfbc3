// Package event is inlet's event model: it decodes the request bodies clients
// send, validates each event, enriches it with what the server knows, and
// encodes it as the Kafka record that is delivered.
//
// The hot path reads each event once: Frame cuts a body into its events,
// and a Batch validates each event and re-emits it, compacted, strings and
// numbers as sent, with the enrichment appended, in one pass of a jsontext
// decoder (Batch.Add, Batch.Build). Events are strict JSON: field names
// match exactly, no object has a name twice, strings are valid UTF-8, and
// nesting stops at MaxDepth. Parse and Event.Record are the same rules on
// an Event, for callers that need one.
//
// Nothing here does I/O or keeps state; every function is safe for concurrent use.
package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Event is one tracking event as delivered to Kafka: the fields the client
// sent, plus the enrichment added by the server (ReceivedAt, IP, UA, and,
// with credentials or the catalog on, Client, Group and Code).
//
// Props, Context and TS are kept as the client sent them (compacted JSON).
type Event struct {
	Event   string          `json:"event"`
	ID      string          `json:"id"`
	TS      json.RawMessage `json:"ts,omitempty"`
	UID     string          `json:"uid,omitempty"`
	AnonID  string          `json:"anon_id,omitempty"`
	Props   json.RawMessage `json:"props,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`

	ReceivedAt time.Time `json:"received_at"`
	IP         string    `json:"ip,omitempty"`
	UA         string    `json:"ua,omitempty"`
	// Client is the authenticated client id (--auth); "" without.
	Client string `json:"client,omitempty"`
	// Group is the event's group (context.group, else the client's
	// default group, else the catalog's), set with --auth or --catalog.
	Group string `json:"group,omitempty"`
	// Code is the catalog code of (Group, Event); 0 when it has none (no
	// catalog, an unplanned event in mode warn, the store unreachable).
	// The catalog's codes start at 1.
	Code int64 `json:"code,omitempty"`
}

// Key returns the record key: uid, else anon_id, else id, so that all events
// of one user land in one partition, in order.
func (e *Event) Key() string {
	switch {
	case e.UID != "":
		return e.UID
	case e.AnonID != "":
		return e.AnonID
	default:
		return e.ID
	}
}

// Header keys set on every record inlet writes.
const (
	HeaderEventID     = "inlet-event-id"
	HeaderEventName   = "inlet-event-name"
	HeaderContentType = "content-type"
	// HeaderError carries the rejection reason on dead-letter records.
	HeaderError = "inlet-error"
	// HeaderReason carries the rejection's Reason code on dead-letter records.
	HeaderReason = "inlet-reason"
	// HeaderReceivedAt carries the server time on dead-letter records.
	HeaderReceivedAt = "inlet-received-at"

	// TimeLayout is how received_at and inlet-received-at are written:
	// RFC 3339 in UTC with all nine digits of the fraction, so that every
	// value has the same width and they sort as text in time order
	// (time.RFC3339Nano drops trailing zeros).
	TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

	// HeaderTruncated is "true" on a dead-letter record whose value was cut to
	// the maximum event size.
	HeaderTruncated = "inlet-truncated"
	// HeaderEventCode carries the event's catalog code, in decimal, when it
	// has one (Event.Code).
	HeaderEventCode = "inlet-event-code"
	// HeaderViolations lists how an event breaks the tracking plan: on
	// records let through in mode warn, and on dead-letter records of
	// events rejected for it. Its value is a compact JSON array of objects
	// {"type","path"}: type a catalog violation type (unplanned_event,
	// blocked_event, required_missing, datatype_mismatch,
	// additional_properties, invalid_value), path the JSON pointer of the
	// property within props ("" for the event itself), e.g.
	// [{"type":"required_missing","path":"/price"}].
	HeaderViolations = "inlet-violations"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is what a Sink delivers to Kafka: a topic, a key, a value and headers.
// It carries no Kafka client types so that sinks (the producer, the spool)
// can store and forward it as they see fit.
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	// EventID is the event's id, kept apart for logs and checks.
	EventID string
}

// Size is the number of bytes the record occupies in memory and on the wire,
// roughly: key, value and headers.
func (r *Record) Size() int {
	n := len(r.Key) + len(r.Value) + len(r.Topic)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Record encodes e as the record delivered to topic: the JSON value, the key
// and the id/name/content-type headers, and inlet-event-code when e has a
// Code.
func (e *Event) Record(topic string) (Record, error) {
	// No HTML escaping: the value keeps props as the client sent them
	// (compacted), not with <, > and & rewritten as \u003c...
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return Record{}, err
	}
	v := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	var headers []Header
	if e.Code == 0 {
		headers = []Header{
			{Key: HeaderEventID, Value: []byte(e.ID)},
			{Key: HeaderEventName, Value: []byte(e.Event)},
			{Key: HeaderContentType, Value: []byte("application/json")},
		}
	} else {
		headers = make([]Header, 4)
		headers[0] = Header{Key: HeaderEventID, Value: []byte(e.ID)}
		headers[1] = Header{Key: HeaderEventName, Value: []byte(e.Event)}
		headers[2] = Header{Key: HeaderContentType, Value: []byte("application/json")}
		headers[3] = Header{Key: HeaderEventCode, Value: strconv.AppendInt(nil, e.Code, 10)}
	}
	return Record{
		Topic:   topic,
		Key:     []byte(e.Key()),
		Value:   v,
		Headers: headers,
		EventID: e.ID,
	}, nil
}

// DeadLetter builds the dead-letter record for a rejected event: the bytes
// the client sent (cut to maxValue bytes), the reason in a header.
func DeadLetter(topic string, raw []byte, reason string, receivedAt time.Time, maxValue int) Record {
	r := Record{
		Topic: topic,
		Value: raw,
		Headers: []Header{
			{Key: HeaderError, Value: []byte(reason)},
			{Key: HeaderReceivedAt, Value: []byte(receivedAt.UTC().Format(TimeLayout))},
		},
	}
	if maxValue > 0 && len(raw) > maxValue {
		r.Value = raw[:maxValue]
		r.Headers = append(r.Headers, Header{Key: HeaderTruncated, Value: []byte("true")})
	}
	return r
}
