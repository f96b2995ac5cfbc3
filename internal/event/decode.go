package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
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

// DefaultLimits are the limits documented in docs/ingest.md.
var DefaultLimits = Limits{MaxEvents: 500, MaxEventBytes: 32 << 10}

// bom is the UTF-8 byte order mark some clients (Windows tools, .NET's
// default encoder) put before JSON; Frame skips it.
const bom = "\xef\xbb\xbf"

// splitBody cuts body into the raw bytes of each event, without validating
// the events themselves: Frame's answer for every body it does not frame
// itself. It fails with a *BodyError when the body as a whole cannot be
// read, holds no event, or holds more than maxEvents. A leading UTF-8 byte
// order mark is skipped (offsets still count it).
//
// It stops at the event past maxEvents: the memory it takes is bounded by
// maxEvents and the body, not by how many items the body holds.
//
// The returned slices alias body.
func splitBody(body []byte, f Format, maxEvents int) ([][]byte, error) {
	if !bytes.HasPrefix(body, []byte(bom)) {
		return split(body, f, maxEvents)
	}
	items, err := split(body[len(bom):], f, maxEvents)
	var be *BodyError
	if errors.As(err, &be) {
		be.shift(len(bom))
	}
	return items, err
}

// shift moves e, about the part of a body that starts n bytes in, to the
// whole body.
func (e *BodyError) shift(n int) {
	if e.Offset < 0 {
		return
	}
	e.Offset += int64(n)
	e.Msg = offsetRE.ReplaceAllStringFunc(e.Msg, func(m string) string {
		k, _ := strconv.ParseInt(m[len("byte offset "):], 10, 64)
		return "byte offset " + strconv.FormatInt(k+int64(n), 10)
	})
}

// offsetRE finds the offsets a BodyError's message states.
var offsetRE = regexp.MustCompile(`byte offset [0-9]+`)

func split(body []byte, f Format, maxEvents int) ([][]byte, error) {
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
		if items, err = splitJSON(body, maxEvents); err != nil {
			return nil, err
		}
	}
	if len(items) == 0 {
		return nil, &BodyError{Err: ErrEmpty, Offset: -1, Msg: "the batch holds no events"}
	}
	if maxEvents > 0 && len(items) > maxEvents {
		return nil, tooMany(maxEvents)
	}
	return items, nil
}

func tooMany(maxEvents int) *BodyError {
	return &BodyError{Err: ErrTooManyEvents, Offset: -1,
		Msg: fmt.Sprintf("the batch holds more than %d events, the limit per request", maxEvents)}
}

// splitJSON walks a JSON array of events, or an object whose only key is
// "batch", token by token, and stops at the event past maxEvents. Syntax
// errors are reported as json.Unmarshal reports them, for the whole body.
func splitJSON(body []byte, maxEvents int) ([][]byte, error) {
	start := firstNonSpace(body)
	if start < 0 {
		return nil, &BodyError{Err: ErrEmpty, Offset: -1, Msg: "empty body: expected a JSON array of events or {\"batch\": [...]}"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var items [][]byte
	switch body[start] {
	case '[':
		var err error
		if items, err = walkArray(dec, body, maxEvents); err != nil {
			return nil, err
		}
	case '{':
		if _, err := dec.Token(); err != nil {
			return nil, syntaxError(body)
		}
		seen := false
		for dec.More() {
			keyAt := skipSeparators(body, int(dec.InputOffset()))
			tok, err := dec.Token()
			if err != nil {
				return nil, syntaxError(body)
			}
			key, _ := tok.(string)
			switch {
			case key != "batch":
				return nil, &BodyError{Err: ErrMalformed, Offset: int64(keyAt),
					Msg: fmt.Sprintf("unknown key %s at byte offset %d: expected a JSON array of events or an object with only a \"batch\" array (send one event to /v1/track)", Quote(key), keyAt)}
			case seen:
				return nil, &BodyError{Err: ErrMalformed, Offset: int64(keyAt),
					Msg: fmt.Sprintf("\"batch\" appears twice, again at byte offset %d", keyAt)}
			}
			seen = true
			valueAt := skipSeparators(body, int(dec.InputOffset()))
			if valueAt < len(body) && body[valueAt] == '[' {
				if items, err = walkArray(dec, body, maxEvents); err != nil {
					return nil, err
				}
				continue
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, syntaxError(body)
			}
			if !isNull(v) {
				return nil, &BodyError{Err: ErrMalformed, Offset: int64(valueAt),
					Msg: fmt.Sprintf("at byte offset %d: \"batch\" must be an array of events, got %s", valueAt, jsonKind(v[0]))}
			}
			seen = false // "batch": null is no batch
		}
		if _, err := dec.Token(); err != nil {
			return nil, syntaxError(body)
		}
		if !seen {
			return nil, &BodyError{Err: ErrMalformed, Offset: int64(start),
				Msg: "expected a JSON array of events or an object with a \"batch\" array; this object has no \"batch\" (send one event to /v1/track)"}
		}
	default:
		return nil, &BodyError{Err: ErrMalformed, Offset: int64(start),
			Msg: fmt.Sprintf("malformed JSON at byte offset %d: expected a JSON array of events or {\"batch\": [...]}", start)}
	}
	if firstNonSpace(body[dec.InputOffset():]) >= 0 {
		return nil, syntaxError(body) // data after the top-level value
	}
	return items, nil
}

// walkArray reads the array that starts at dec's next token into slices of
// body; past maxEvents items it fails with ErrTooManyEvents at once.
func walkArray(dec *json.Decoder, body []byte, maxEvents int) ([][]byte, error) {
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(body)
	}
	var items [][]byte
	var raw json.RawMessage // reused: it holds one item at a time
	for dec.More() {
		if maxEvents > 0 && len(items) == maxEvents {
			return nil, tooMany(maxEvents)
		}
		raw = raw[:0]
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(body)
		}
		// raw is the item without the space around it, and the decoder
		// stops right after it, so it is body[end-len(raw):end].
		end := int(dec.InputOffset())
		items = append(items, body[end-len(raw):end]) // body's capacity: BodyFault finds it by it
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(body)
	}
	return items, nil
}

// skipSeparators is the offset of the first byte at or after off that is
// neither space nor ':' nor ','.
func skipSeparators(b []byte, off int) int {
	for off < len(b) {
		switch b[off] {
		case ' ', '\t', '\r', '\n', ':', ',':
			off++
		default:
			return off
		}
	}
	return off
}

// syntaxError is the error json.Unmarshal finds in body, which the decoder
// found malformed.
func syntaxError(body []byte) *BodyError {
	if err := checkSyntax(body); err != nil {
		return err
	}
	return &BodyError{Err: ErrMalformed, Offset: -1, Msg: "malformed JSON"}
}

func checkSyntax(body []byte) *BodyError {
	var v json.RawMessage
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return nil // into a RawMessage, Unmarshal fails on syntax only
	}
	return malformedAt(syntaxOffset(body, se), se)
}

// malformedAt is the error of a body with the syntax error se at offset off.
func malformedAt(off int64, se *json.SyntaxError) *BodyError {
	return &BodyError{Err: ErrMalformed, Offset: off,
		Msg: fmt.Sprintf("malformed JSON at byte offset %d: %s", off, strings.TrimPrefix(se.Error(), "json: "))}
}

// syntaxOffset is the 0-based offset of the byte a syntax error of data is
// about, or len(data) when data ended too early. encoding/json counts the
// bytes read: one past the offending byte, or all of them at the end, the
// same count as a fault of the last byte. It exports nothing that tells
// the two apart, so data is read once more with a byte after it that is
// wrong in every state (NUL): a fault of the last byte is found again
// where it was, an end too early becomes a fault of the NUL.
func syntaxOffset(data []byte, se *json.SyntaxError) int64 {
	if se.Offset < int64(len(data)) {
		return se.Offset - 1
	}
	var v json.RawMessage
	var again *json.SyntaxError
	if errors.As(json.Unmarshal(append(data[:len(data):len(data)], 0), &v), &again) && again.Offset == se.Offset {
		return se.Offset - 1
	}
	return se.Offset
}

// splitLines returns the non-blank lines of body. It stops early once it has
// more than maxEvents lines, since the request is rejected anyway.
func splitLines(body []byte, maxEvents int) [][]byte { return appendLines(nil, body, maxEvents) }

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
	// ReasonPlanViolation: the event breaks the tracking plan (a blocked
	// event type in any mode; any violation in mode block). Ingest sets it;
	// the violations are in the inlet-violations header.
	ReasonPlanViolation Reason = "plan_violation"
	// ReasonForbiddenGroup: the event's group is not one its client may
	// send (--auth). Ingest sets it.
	ReasonForbiddenGroup Reason = "forbidden_group"
	// ReasonForbiddenTopic: the event's route sends it to a topic its
	// client may not write (--clients topics). Ingest sets it.
	ReasonForbiddenTopic Reason = "forbidden_topic"
	// ReasonBadTopic: the event's route made a topic name Kafka refuses
	// (--routes). Ingest sets it.
	ReasonBadTopic Reason = "bad_topic"
	// ReasonRouteRule: a dead_letter rule of the routes file matched the
	// event (--routes). Ingest sets it.
	ReasonRouteRule Reason = "route_rule"
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

// CheckName applies the rule on an event's name ("event") or group
// ("context.group") to s, as decoded, and says which field broke it: valid
// UTF-8 of at most MaxNameChars characters. (Whether it may be empty is the
// caller's rule.) Every front end that takes names applies this one.
func CheckName(field, s string) error {
	if !utf8.ValidString(s) {
		return invalid(ReasonBadField, "%q is not valid UTF-8", field)
	}
	if e := checkNameChars(field, utf8.RuneCountInString(s)); e != nil {
		return e
	}
	return nil
}

// checkNameChars is CheckName's limit on a name of n characters.
func checkNameChars(field string, n int) *Invalid {
	if n > MaxNameChars {
		return invalid(ReasonBadField, "%q is %d characters; the limit is %d", field, n, MaxNameChars)
	}
	return nil
}

// The range of "ts": from MinTS to MaxTSAhead past the server's clock.
// Consumers decode ts as an int64 of milliseconds (or a time); a value
// outside the range is a client bug (seconds sent as milliseconds, an
// unset clock), not an event time.
var MinTS = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxTSAhead is how far past the server's clock a "ts" may lie (clients'
// clocks drift; a year is a bug, not drift).
const MaxTSAhead = 365 * 24 * time.Hour

// rangeMsg says the range of "ts", up to max.
func rangeMsg(max time.Time) string {
	return fmt.Sprintf("between %s and %s (a year from now)", MinTS.Format(time.RFC3339), max.UTC().Format(time.RFC3339))
}

// checkTS checks a "ts" as sent: an integer of milliseconds since the epoch
// or an RFC 3339 string, between MinTS and now+MaxTSAhead.
func checkTS(ts []byte, now time.Time) *Invalid {
	max := now.Add(MaxTSAhead)
	switch c := ts[0]; {
	case c == '"':
		var buf [64]byte
		b, _ := jsontext.AppendUnquote(buf[:0], ts)
		s := string(b)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return invalid(ReasonBadField, "\"ts\" %s is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", Quote(s))
		}
		if t.Before(MinTS) || t.After(max) {
			return invalid(ReasonBadField, "\"ts\" %s must be %s", Quote(s), rangeMsg(max))
		}
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		ms, err := strconv.ParseInt(string(ts), 10, 64)
		if err != nil {
			if bytes.ContainsAny(ts, ".eE") {
				return invalid(ReasonBadField, "\"ts\" %s must be an integer number of milliseconds since the epoch (no fraction or exponent), or an RFC 3339 string", ts)
			}
			return invalid(ReasonBadField, "\"ts\" %s must be milliseconds since the epoch %s", ts, rangeMsg(max))
		}
		if ms < MinTS.UnixMilli() || ms > max.UnixMilli() {
			hint := ""
			if s := ms * 1000; ms > 0 && s >= MinTS.UnixMilli() && s <= max.UnixMilli() {
				hint = " (it looks like seconds; send milliseconds)"
			}
			return invalid(ReasonBadField, "\"ts\" %d must be milliseconds since the epoch %s%s", ms, rangeMsg(max), hint)
		}
		return nil
	default:
		return invalid(ReasonBadField, "\"ts\" must be a number (milliseconds since the epoch) or an RFC 3339 string, got %s", jsonKind(c))
	}
}

func isNull(v json.RawMessage) bool { return string(v) == "null" }

func syntaxInvalid(raw []byte) *Invalid {
	if be := checkSyntax(raw); be != nil {
		return invalid(ReasonMalformed, "%s", be.Msg)
	}
	return invalid(ReasonMalformed, "malformed JSON")
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
	Client     string // the authenticated client id; "" without credentials
	// Enriched are JSON members every record of the request gets after
	// the others, each with its leading comma (package enrich: "ua_parsed",
	// "geo", "bot"); nil: none.
	Enriched []byte
}

// NewID returns a new UUIDv7: unique, and ordered by creation time.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil { // only when the system's random source fails
		return uuid.NewString()
	}
	return id.String()
}
