package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// The reference the fuzz oracle holds the one-pass path to: Parse as it
// was, on encoding/json (field names matched case-insensitively, duplicate
// names taking the last value, invalid UTF-8 let through), and StrictJSON,
// the rules the one pass adds, checked apart with encoding/json. Split is
// the reading of a body Frame hands what it does not frame itself.
var (
	LegacyParseAt = legacyParseAt
	StrictJSON    = strictJSON
	Split         = splitBody
)

// Event is an event's fields as the client sent them (ts, props and
// context compacted), for the tests of the rules and the reference.
type Event struct {
	Event   string          `json:"event"`
	ID      string          `json:"id"`
	TS      json.RawMessage `json:"ts,omitempty"`
	UID     string          `json:"uid,omitempty"`
	AnonID  string          `json:"anon_id,omitempty"`
	Props   json.RawMessage `json:"props,omitempty"`
	Context json.RawMessage `json:"context,omitempty"`
}

// ParseAt reads raw, one event, as the server does (Batch.Add, with now its
// request's time), and returns its fields read back from its record value
// (the id as sent: "" when the client sent none), or why it was rejected.
func ParseAt(raw []byte, maxEventBytes int, now time.Time) (Event, *Invalid) {
	b := NewBatch("t", Meta{ReceivedAt: now}, maxEventBytes)
	defer b.Release()
	if bad := b.Add(raw); bad != nil {
		return Event{}, bad
	}
	b.Build()
	var e Event
	if err := json.Unmarshal(b.Record(0).Value, &e); err != nil {
		panic(err)
	}
	if !b.evs[0].f.id.ok() {
		e.ID = ""
	}
	return e, nil
}

// wire is the client's view of an event in legacyParseAt.
type wire struct {
	Event   *string         `json:"event"`
	ID      *string         `json:"id"`
	TS      json.RawMessage `json:"ts"`
	UID     *string         `json:"uid"`
	AnonID  *string         `json:"anon_id"`
	Props   json.RawMessage `json:"props"`
	Context json.RawMessage `json:"context"`
}

// legacyParseAt is ParseAt before the one pass (commit 45b7100).
func legacyParseAt(raw []byte, maxEventBytes int, now time.Time) (Event, *Invalid) {
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
		return Event{}, legacyDecodeInvalid(raw, err)
	}
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
	if e.Props, bad = legacyObject("props", w.Props); bad != nil {
		return Event{}, bad
	}
	if e.Context, bad = legacyObject("context", w.Context); bad != nil {
		return Event{}, bad
	}
	if ts := w.TS; len(ts) > 0 && !isNull(ts) {
		if bad := checkTS(ts, now); bad != nil {
			return Event{}, bad
		}
		e.TS = ts
	}
	return e, nil
}

func legacyObject(name string, v json.RawMessage) (json.RawMessage, *Invalid) {
	if len(v) == 0 || isNull(v) {
		return nil, nil
	}
	if v[0] != '{' {
		return nil, invalid(ReasonBadField, "%q must be a JSON object, got %s", name, jsonKind(v[0]))
	}
	return v, nil
}

func legacyDecodeInvalid(raw []byte, err error) *Invalid {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return invalid(ReasonBadField, "%q must be a string, got %s", te.Field, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalid(ReasonMalformed, "malformed JSON")
	}
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		return invalid(ReasonUnknownField, "%s", err)
	}
	return invalid(ReasonMalformed, "malformed JSON: %v", err)
}

// strictJSON reports whether raw is one JSON value as encoding/json reads
// it that is also valid UTF-8, has no \u escape of a lone surrogate, no
// object with a name twice, and nests at most maxDepth deep.
func strictJSON(raw []byte, maxDepth int) bool {
	if !json.Valid(raw) || !utf8.Valid(raw) || !surrogatesPaired(raw) {
		return false
	}
	type level struct {
		names    map[string]bool // nil for an array
		nextName bool
	}
	var stack []*level
	done := func() { // a value ended at the top level
		if n := len(stack); n > 0 && stack[n-1].names != nil {
			stack[n-1].nextName = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) == maxDepth {
					return false
				}
				l := &level{}
				if t == '{' {
					l.names, l.nextName = map[string]bool{}, true
				}
				if n := len(stack); n > 0 && stack[n-1].names != nil {
					stack[n-1].nextName = false
				}
				stack = append(stack, l)
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].names != nil && stack[n-1].nextName {
				if stack[n-1].names[t] {
					return false
				}
				stack[n-1].names[t], stack[n-1].nextName = true, false
				continue
			}
			done()
		default:
			done()
		}
	}
}

// surrogatesPaired reports whether every \u escape of a UTF-16 surrogate in
// raw, valid JSON, is a high one followed by a low one.
func surrogatesPaired(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r := hex4(raw[i+2 : i+6])
			switch {
			case r >= 0xd800 && r < 0xdc00:
				if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return false
				}
				if lo := hex4(raw[i+8 : i+12]); lo < 0xdc00 || lo > 0xdfff {
					return false
				}
				i += 11
			case r >= 0xdc00 && r <= 0xdfff:
				return false
			default:
				i += 5
			}
		}
	}
	return true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
