package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Errors that reject a whole request body. They are wrapped in a *BodyError
// that says where; match them with errors.Is.
var (
	// ErrMalformed: the body is not the JSON (or NDJSON) it claims to be.
	ErrMalformed = errors.New("event: malformed body")
	// ErrTooManyEvents: the batch holds more events than allowed.
	ErrTooManyEvents = errors.New("event: too many events")
	// ErrEmpty: the body holds no event at all.
	ErrEmpty = errors.New("event: no events")
)

// BodyError rejects a whole request body. Offset is the byte offset in the
// (decompressed) body where decoding failed, or -1 where no offset applies.
type BodyError struct {
	Err    error // one of ErrMalformed, ErrTooManyEvents, ErrEmpty
	Offset int64
	Msg    string
}

func (e *BodyError) Error() string { return e.Msg }
func (e *BodyError) Unwrap() error { return e.Err }

// Format is how a request body lays out its events.
type Format int

const (
	// FormatJSON is a JSON array of events, or an object {"batch": [...]}.
	FormatJSON Format = iota
	// FormatNDJSON is one JSON event per line.
	FormatNDJSON
	// FormatSingle is one JSON event object (POST /v1/track).
	FormatSingle
)

// Limits bound what one request may carry.
type Limits struct {
	MaxEvents     int // events in one batch
	MaxEventBytes int // bytes of one event as sent
}

// DefaultLimits are the limits documented in the README.
var DefaultLimits = Limits{MaxEvents: 500, MaxEventBytes: 32 << 10}

// Split cuts body into the raw bytes of each event, without validating the
// events themselves. It fails with a *BodyError when the body as a whole
// cannot be read, holds no event, or holds more than maxEvents.
//
// The returned slices alias body.
func Split(body []byte, f Format, maxEvents int) ([][]byte, error) {
	var items [][]byte
	switch f {
	case FormatNDJSON:
		items = splitLines(body, maxEvents)
	case FormatSingle:
		start := firstNonSpace(body)
		if start < 0 {
			return nil, &BodyError{Err: ErrEmpty, Offset: -1, Msg: "empty body: expected one JSON event object"}
		}
		if body[start] != '{' {
			return nil, &BodyError{Err: ErrMalformed, Offset: int64(start),
				Msg: fmt.Sprintf("expected one JSON event object at byte offset %d (send arrays to /v1/batch)", start)}
		}
		if err := checkSyntax(body); err != nil {
			return nil, err
		}
		items = [][]byte{body}
	default:
		var err error
		if items, err = splitJSON(body); err != nil {
			return nil, err
		}
	}
	if len(items) == 0 {
		return nil, &BodyError{Err: ErrEmpty, Offset: -1, Msg: "the batch holds no events"}
	}
	if maxEvents > 0 && len(items) > maxEvents {
		return nil, &BodyError{Err: ErrTooManyEvents, Offset: -1,
			Msg: fmt.Sprintf("the batch holds more than %d events, the limit per request", maxEvents)}
	}
	return items, nil
}

func splitJSON(body []byte) ([][]byte, error) {
	start := firstNonSpace(body)
	if start < 0 {
		return nil, &BodyError{Err: ErrEmpty, Offset: -1, Msg: "empty body: expected a JSON array of events or {\"batch\": [...]}"}
	}
	var raws []json.RawMessage
	switch body[start] {
	case '[':
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, jsonBodyError(err)
		}
	case '{':
		var wrapper struct {
			Batch *[]json.RawMessage `json:"batch"`
		}
		if err := json.Unmarshal(body, &wrapper); err != nil {
			return nil, jsonBodyError(err)
		}
		if wrapper.Batch == nil {
			return nil, &BodyError{Err: ErrMalformed, Offset: int64(start),
				Msg: "expected a JSON array of events or an object with a \"batch\" array; this object has no \"batch\" (send one event to /v1/track)"}
		}
		raws = *wrapper.Batch
	default:
		return nil, &BodyError{Err: ErrMalformed, Offset: int64(start),
			Msg: fmt.Sprintf("malformed JSON at byte offset %d: expected a JSON array of events or {\"batch\": [...]}", start)}
	}
	items := make([][]byte, len(raws))
	for i, r := range raws {
		items[i] = r
	}
	return items, nil
}

func checkSyntax(body []byte) error {
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return jsonBodyError(err)
	}
	return nil
}

func jsonBodyError(err error) *BodyError {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := syntaxOffset(se)
		return &BodyError{Err: ErrMalformed, Offset: off,
			Msg: fmt.Sprintf("malformed JSON at byte offset %d: %s", off, strings.TrimPrefix(se.Error(), "json: "))}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &BodyError{Err: ErrMalformed, Offset: te.Offset,
			Msg: fmt.Sprintf("at byte offset %d: %q must be an array of events, got %s", te.Offset, te.Field, te.Value)}
	}
	return &BodyError{Err: ErrMalformed, Offset: -1, Msg: "malformed JSON: " + err.Error()}
}

// syntaxOffset is the 0-based offset of the byte a syntax error is about,
// or the length of the input when it ended too early. (encoding/json counts
// the bytes read, one past the offending byte.)
func syntaxOffset(se *json.SyntaxError) int64 {
	if se.Offset > 0 && !strings.Contains(se.Error(), "unexpected end") {
		return se.Offset - 1
	}
	return se.Offset
}

// splitLines returns the non-blank lines of body. It stops early once it has
// more than maxEvents lines, since the request is rejected anyway.
func splitLines(body []byte, maxEvents int) [][]byte {
	var items [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		items = append(items, line)
		if maxEvents > 0 && len(items) > maxEvents {
			break
		}
	}
	return items
}

func firstNonSpace(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
		default:
			return i
		}
	}
	return -1
}

// Reason is a short, stable code for why an event was rejected; it labels
// metrics. The Invalid message says the details.
type Reason string

// Rejection reasons.
const (
	ReasonMalformed    Reason = "malformed_json"
	ReasonNotObject    Reason = "not_object"
	ReasonTooLarge     Reason = "too_large"
	ReasonMissingEvent Reason = "missing_event"
	ReasonBadField     Reason = "bad_field"
	ReasonUnknownField Reason = "unknown_field"
)

// Invalid says why one event was rejected.
type Invalid struct {
	Reason Reason
	Msg    string
}

func (e *Invalid) Error() string { return e.Msg }

func invalid(r Reason, format string, args ...any) *Invalid {
	return &Invalid{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// Field limits.
const (
	MaxNameChars = 128 // event name, in characters
	MaxIDBytes   = 128 // client-chosen id
	MaxUserBytes = 256 // uid, anon_id
	MaxUABytes   = 512 // user agent kept; longer ones are cut
)

// wire is the client's view of an event: only these fields are accepted.
type wire struct {
	Event   *string         `json:"event"`
	ID      *string         `json:"id"`
	TS      json.RawMessage `json:"ts"`
	UID     *string         `json:"uid"`
	AnonID  *string         `json:"anon_id"`
	Props   json.RawMessage `json:"props"`
	Context json.RawMessage `json:"context"`
}

// Parse validates the raw bytes of one event as the client sent them and
// returns the event, not yet enriched. It never panics on any input.
func Parse(raw []byte, maxEventBytes int) (Event, *Invalid) {
	if maxEventBytes > 0 && len(raw) > maxEventBytes {
		return Event{}, invalid(ReasonTooLarge, "event is %d bytes; the limit is %d", len(raw), maxEventBytes)
	}
	start := firstNonSpace(raw)
	if start < 0 {
		return Event{}, invalid(ReasonMalformed, "empty event")
	}
	if raw[start] != '{' {
		if !json.Valid(raw) {
			return Event{}, syntaxInvalid(raw)
		}
		return Event{}, invalid(ReasonNotObject, "event must be a JSON object, got %s", jsonKind(raw[start]))
	}
	var w wire
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Event{}, decodeInvalid(raw, err)
	}
	// Decoder.More reports false before ']' or '}', so look at the rest itself.
	if end := int(dec.InputOffset()); firstNonSpace(raw[end:]) >= 0 {
		return Event{}, invalid(ReasonMalformed, "malformed JSON at byte offset %d: data after the event object", end+firstNonSpace(raw[end:]))
	}
	var e Event
	if w.Event == nil || *w.Event == "" {
		return Event{}, invalid(ReasonMissingEvent, "\"event\" is required: a non-empty string naming the event")
	}
	e.Event = *w.Event
	if n := utf8.RuneCountInString(e.Event); n > MaxNameChars {
		return Event{}, invalid(ReasonBadField, "\"event\" is %d characters; the limit is %d", n, MaxNameChars)
	}
	if w.ID != nil {
		if *w.ID == "" || len(*w.ID) > MaxIDBytes {
			return Event{}, invalid(ReasonBadField, "\"id\" must be a non-empty string of at most %d bytes", MaxIDBytes)
		}
		e.ID = *w.ID
	}
	if w.UID != nil {
		if len(*w.UID) > MaxUserBytes {
			return Event{}, invalid(ReasonBadField, "\"uid\" is %d bytes; the limit is %d", len(*w.UID), MaxUserBytes)
		}
		e.UID = *w.UID
	}
	if w.AnonID != nil {
		if len(*w.AnonID) > MaxUserBytes {
			return Event{}, invalid(ReasonBadField, "\"anon_id\" is %d bytes; the limit is %d", len(*w.AnonID), MaxUserBytes)
		}
		e.AnonID = *w.AnonID
	}
	var bad *Invalid
	if e.Props, bad = object("props", w.Props); bad != nil {
		return Event{}, bad
	}
	if e.Context, bad = object("context", w.Context); bad != nil {
		return Event{}, bad
	}
	if ts := w.TS; len(ts) > 0 && !isNull(ts) {
		if c := ts[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
			return Event{}, invalid(ReasonBadField, "\"ts\" must be a number (milliseconds since the epoch) or an RFC 3339 string, got %s", jsonKind(c))
		}
		if ts[0] == '"' {
			var s string
			_ = json.Unmarshal(ts, &s)
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return Event{}, invalid(ReasonBadField, "\"ts\" %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", s)
			}
		}
		e.TS = ts
	}
	return e, nil
}

// object checks that an optional field is a JSON object; null counts as absent.
func object(name string, v json.RawMessage) (json.RawMessage, *Invalid) {
	if len(v) == 0 || isNull(v) {
		return nil, nil
	}
	if v[0] != '{' {
		return nil, invalid(ReasonBadField, "%q must be a JSON object, got %s", name, jsonKind(v[0]))
	}
	return v, nil
}

func isNull(v json.RawMessage) bool { return string(v) == "null" }

func decodeInvalid(raw []byte, err error) *Invalid {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		got := te.Value
		if got == "bool" {
			got = "boolean"
		}
		return invalid(ReasonBadField, "%q must be a %s, got %s", te.Field, kindOf(te.Type.String()), got)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid(ReasonMalformed, "malformed JSON at byte offset %d: %s", syntaxOffset(se), strings.TrimPrefix(se.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return syntaxInvalid(raw)
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return invalid(ReasonUnknownField, "unknown field %s: put custom data in \"props\" or \"context\"", strings.TrimPrefix(msg, "json: unknown field "))
	}
	return invalid(ReasonMalformed, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func syntaxInvalid(raw []byte) *Invalid {
	var v json.RawMessage
	err := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid(ReasonMalformed, "malformed JSON at byte offset %d: %s", syntaxOffset(se), strings.TrimPrefix(se.Error(), "json: "))
	}
	return invalid(ReasonMalformed, "malformed JSON")
}

func kindOf(goType string) string {
	switch goType {
	case "string", "*string":
		return "string"
	}
	return goType
}

func jsonKind(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == '[':
		return "array"
	case c == '{':
		return "object"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}

// Meta is what the server knows about the request an event came in.
type Meta struct {
	ReceivedAt time.Time
	IP         string
	UA         string
}

// Enrich adds the server's fields to e and gives it an id (a UUIDv7) when the
// client sent none.
func (e *Event) Enrich(m Meta) {
	if e.ID == "" {
		e.ID = NewID()
	}
	e.ReceivedAt = m.ReceivedAt.UTC()
	e.IP = m.IP
	ua := m.UA
	if len(ua) > MaxUABytes {
		cut := MaxUABytes
		for cut > 0 && !utf8.RuneStart(ua[cut]) {
			cut-- // do not split a character
		}
		ua = ua[:cut]
	}
	e.UA = ua
}

// NewID returns a new UUIDv7: unique, and ordered by creation time.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil { // only when the system's random source fails
		return uuid.NewString()
	}
	return id.String()
}
