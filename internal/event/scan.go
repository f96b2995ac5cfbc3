package event

import (
	"bytes"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxDepth is how deeply an event may nest objects and arrays, the event
// object itself counting as 1: {"props":{"a":[1]}} is 3 deep. Deeper
// events are rejected as malformed_json.
const MaxDepth = 64

// span is a part [off, off+n) of a buffer; n < 0 means absent.
type span struct{ off, n int }

var none = span{n: -1}

func (s span) ok() bool           { return s.n >= 0 }
func (s span) of(b []byte) []byte { return b[s.off : s.off+s.n : s.off+s.n] }
func (s span) shift(d int) span   { return span{s.off + d, s.n} }
func at(off int, b []byte) span   { return span{off, len(b)} }
func spanOf(start, end int) span  { return span{start, end - start} }

// quoted is the contents of a JSON string as sent, between its quotes.
func quoted(b []byte) []byte  { return b[1 : len(b)-1] }
func hasEscape(b []byte) bool { return bytes.IndexByte(b, '\\') >= 0 }

func kindName(k jsontext.Kind) string { return jsonKind(byte(k)) }

// fields is what a scan found of one event. The spans of the head are
// relative to its start in the output buffer; strings of escaped values
// (rare) are kept decoded apart, in esc*.
type fields struct {
	// The string contents (between the quotes) in the head, as sent.
	name, id, uid, anonID span
	// Decoded values of strings sent with escapes; nil when the contents
	// in the head are the value.
	nameEsc, idEsc, uidEsc, anonIDEsc []byte
	props                             span // the compacted props object in the head
	// group is context.group's value as sent (a JSON value, quoted when
	// a string) in the head; groupKind its kind, 0 when absent.
	group     span
	groupKind jsontext.Kind
	// seg: a Segment message (Batch.AddSegment); segTS its corrected
	// timestamp (a time.Time: a device's clock may say any year of 0 to
	// 9999, past what ns since the epoch hold).
	seg   bool
	segTS time.Time
}

// scanner validates an event and re-emits it in one pass of a
// jsontext.Decoder. It is reused from event to event; it is not safe for
// concurrent use.
type scanner struct {
	dec     jsontext.Decoder
	rd      bytes.Buffer
	scratch []byte // decoded names
}

// Which top-level field a name is.
type field int

const (
	fUnknown field = iota
	fEvent
	fID
	fTS
	fUID
	fAnonID
	fProps
	fContext
)

func fieldOf(name []byte) field {
	switch string(name) {
	case "event":
		return fEvent
	case "id":
		return fID
	case "ts":
		return fTS
	case "uid":
		return fUID
	case "anon_id":
		return fAnonID
	case "props":
		return fProps
	case "context":
		return fContext
	}
	return fUnknown
}

// what the scan saw of one top-level field, for the checks after it.
type seen struct {
	kind jsontext.Kind // 0: absent
	raw  []byte        // the value as sent, for scalars
}

// errDepth is the error of a value nested past MaxDepth.
var errDepth = errors.New("event: nested too deeply")

// depthError says where an event nests too deeply.
type depthError struct{ offset int64 }

func (e *depthError) Error() string { return errDepth.Error() }
func (e *depthError) Unwrap() error { return errDepth }

// scan validates raw, one event, and appends its record value's head to dst:
// '{' and the client's fields, compacted and byte-exact otherwise, without
// the fields that are null (or an empty uid, anon_id), and without the
// closing brace. On a rejection dst is returned as it came.
//
// The rules and the order in which they are checked are Batch.Add's; see there.
func (s *scanner) scan(dst, raw []byte, maxEventBytes int, now time.Time) ([]byte, fields, *Invalid) {
	var f fields
	if maxEventBytes > 0 && len(raw) > maxEventBytes {
		return dst, f, invalid(ReasonTooLarge, "event is %d bytes; the limit is %d", len(raw), maxEventBytes)
	}
	start := firstNonSpace(raw)
	if start < 0 {
		return dst, f, invalid(ReasonMalformed, "empty event")
	}
	if raw[start] != '{' {
		return dst, f, s.notObject(raw, start)
	}
	head := len(dst)
	out, f, bad := s.walk(dst, raw, now)
	if bad != nil {
		return dst[:head], fields{}, bad
	}
	return out, f, nil
}

// notObject rejects an event that does not start with '{'.
func (s *scanner) notObject(raw []byte, start int) *Invalid {
	s.rd = *bytes.NewBuffer(raw)
	s.dec.Reset(&s.rd)
	if err := s.skip(); err != nil {
		return s.syntaxInvalid(raw, err)
	}
	if firstNonSpace(raw[s.dec.InputOffset():]) >= 0 {
		return syntaxInvalid(raw) // data after the value
	}
	return invalid(ReasonNotObject, "event must be a JSON object, got %s", jsonKind(raw[start]))
}

func (s *scanner) walk(dst, raw []byte, now time.Time) ([]byte, fields, *Invalid) {
	f := fields{name: none, id: none, uid: none, anonID: none, props: none, group: none}
	head := len(dst)
	s.rd = *bytes.NewBuffer(raw)
	s.dec.Reset(&s.rd)
	d := &s.dec
	if _, err := d.ReadToken(); err != nil { // '{'
		return dst, f, s.syntaxInvalid(raw, err)
	}
	dst = append(dst, '{')
	var (
		sem  *Invalid // the first semantic error, reported once the syntax holds
		vals [fContext + 1]seen
	)
	first := true
	for {
		k := d.PeekKind()
		if k == '}' {
			break
		}
		if k != '"' { // an error, or not a name: ReadToken says which
			_, err := d.ReadToken()
			return dst, f, s.syntaxInvalid(raw, err)
		}
		name, err := d.ReadValue()
		if err != nil {
			return dst, f, s.syntaxInvalid(raw, err)
		}
		fl := fUnknown
		if n := quoted(name); !hasEscape(n) {
			fl = fieldOf(n)
		} else {
			s.scratch, _ = jsontext.AppendUnquote(s.scratch[:0], name)
			fl = fieldOf(s.scratch)
		}
		k = d.PeekKind()
		if k == 0 || k == '}' || k == ']' {
			_, err := d.ReadToken()
			return dst, f, s.syntaxInvalid(raw, err)
		}
		if fl == fUnknown {
			if sem == nil {
				sem = invalid(ReasonUnknownField, "unknown field %s: put custom data in \"props\" or \"context\"", unknownName(name))
			}
			if err := s.skip(); err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			continue
		}
		vals[fl].kind = k
		switch fl {
		case fEvent, fID, fUID, fAnonID:
			if k != '"' && k != 'n' {
				if sem == nil {
					sem = invalid(ReasonBadField, "%q must be a string, got %s", fieldNames[fl], kindName(k))
				}
				if err := s.skip(); err != nil {
					return dst, f, s.syntaxInvalid(raw, err)
				}
				continue
			}
			v, err := d.ReadValue()
			if err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			vals[fl].raw = v
			if k == 'n' || (len(v) == 2 && (fl == fUID || fl == fAnonID)) {
				continue // null is absent; so is an empty uid or anon_id
			}
			if sem != nil {
				continue
			}
			dst = appendName(dst, &first, fl)
			off := len(dst) + 1 - head
			dst = append(dst, v...)
			sp := span{off, len(v) - 2}
			var esc []byte
			if hasEscape(v) {
				esc, _ = jsontext.AppendUnquote(nil, v)
			}
			switch fl {
			case fEvent:
				f.name, f.nameEsc = sp, esc
			case fID:
				f.id, f.idEsc = sp, esc
			case fUID:
				f.uid, f.uidEsc = sp, esc
			case fAnonID:
				f.anonID, f.anonIDEsc = sp, esc
			}
		case fTS:
			if k == '{' || k == '[' {
				if err := s.skip(); err != nil {
					return dst, f, s.syntaxInvalid(raw, err)
				}
				continue
			}
			v, err := d.ReadValue()
			if err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			vals[fl].raw = v
			if k == 'n' || sem != nil {
				continue
			}
			dst = appendName(dst, &first, fl)
			dst = append(dst, v...)
		case fProps, fContext:
			if k != '{' || sem != nil {
				if k == 'n' {
					vals[fl].kind = 0 // null is absent
				}
				if err := s.skip(); err != nil {
					return dst, f, s.syntaxInvalid(raw, err)
				}
				continue
			}
			dst = appendName(dst, &first, fl)
			off := len(dst)
			var err error
			if fl == fProps {
				dst, err = s.copyValue(dst, nil)
				f.props = spanOf(off-head, len(dst)-head)
			} else {
				g := groupRef{at: none}
				dst, err = s.copyValue(dst, &g)
				f.group, f.groupKind = g.at.shift(-head), g.kind
			}
			if err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
		}
	}
	if _, err := d.ReadToken(); err != nil { // '}'
		return dst, f, s.syntaxInvalid(raw, err)
	}
	if sem != nil {
		return dst, f, sem
	}
	if end := int(d.InputOffset()); firstNonSpace(raw[end:]) >= 0 {
		return dst, f, invalid(ReasonMalformed, "malformed JSON at byte offset %d: data after the event object", end+firstNonSpace(raw[end:]))
	}
	if bad := check(&vals, now); bad != nil {
		return dst, f, bad
	}
	return dst, f, nil
}

var fieldNames = [...]string{fUnknown: "", fEvent: "event", fID: "id", fTS: "ts", fUID: "uid",
	fAnonID: "anon_id", fProps: "props", fContext: "context"}

// fieldKeys are the names as emitted, with their colon.
var fieldKeys = [...]string{fEvent: `"event":`, fID: `"id":`, fTS: `"ts":`, fUID: `"uid":`,
	fAnonID: `"anon_id":`, fProps: `"props":`, fContext: `"context":`}

func appendName(dst []byte, first *bool, fl field) []byte {
	if !*first {
		dst = append(dst, ',')
	}
	*first = false
	return append(dst, fieldKeys[fl]...)
}

// unknownName quotes an unknown field's name as encoding/json did.
func unknownName(raw []byte) string {
	s, err := jsontext.AppendUnquote(nil, raw)
	if err != nil {
		return Quote(string(bytes.Trim(raw, `"`)))
	}
	return Quote(string(s))
}

// check applies the rules on the fields' values, in Batch.Add's order.
func check(vals *[fContext + 1]seen, now time.Time) *Invalid {
	ev := vals[fEvent]
	if ev.kind != '"' || len(ev.raw) == 2 {
		return invalid(ReasonMissingEvent, "\"event\" is required: a non-empty string naming the event")
	}
	if e := checkNameChars("event", stringChars(ev.raw)); e != nil {
		return e
	}
	if id := vals[fID]; id.kind == '"' {
		if n := stringBytes(id.raw); n == 0 || n > MaxIDBytes {
			return invalid(ReasonBadField, "\"id\" must be a non-empty string of at most %d bytes", MaxIDBytes)
		}
	}
	for _, fl := range [...]field{fUID, fAnonID} {
		if v := vals[fl]; v.kind == '"' {
			if n := stringBytes(v.raw); n > MaxUserBytes {
				return invalid(ReasonBadField, "%q is %d bytes; the limit is %d", fieldNames[fl], n, MaxUserBytes)
			}
		}
	}
	for _, fl := range [...]field{fProps, fContext} {
		if k := vals[fl].kind; k != 0 && k != '{' {
			return invalid(ReasonBadField, "%q must be a JSON object, got %s", fieldNames[fl], kindName(k))
		}
	}
	if ts := vals[fTS]; ts.kind != 0 && ts.kind != 'n' {
		if ts.raw == nil { // an object or an array
			return invalid(ReasonBadField, "\"ts\" must be a number (milliseconds since the epoch) or an RFC 3339 string, got %s", kindName(ts.kind))
		}
		if bad := checkTS(ts.raw, now); bad != nil {
			return bad
		}
	}
	return nil
}

// stringBytes is the length of a valid JSON string's value, decoded.
func stringBytes(q []byte) int {
	if c := quoted(q); !hasEscape(c) {
		return len(c)
	}
	var buf [256]byte
	v, _ := jsontext.AppendUnquote(buf[:0], q)
	return len(v)
}

// stringChars is the number of characters of a valid JSON string's value.
func stringChars(q []byte) int {
	if c := quoted(q); !hasEscape(c) {
		return utf8.RuneCount(c)
	}
	var buf [512]byte
	v, _ := jsontext.AppendUnquote(buf[:0], q)
	return utf8.RuneCount(v)
}

// groupRef is where copyValue found context.group.
type groupRef struct {
	at   span // in dst: the value as sent, when a scalar
	kind jsontext.Kind
}

// skip reads the next value and drops it, with copyValue's checks.
func (s *scanner) skip() error {
	_, err := s.copyValue(nil, nil)
	return err
}

// copyValue reads the next value, an object or anything else, and appends
// it to dst (nil: drops it) without whitespace, every string and number as
// sent. It rejects nesting past MaxDepth. When g is not nil, the value is
// an object and g gets where its "group" member's value is in dst.
func (s *scanner) copyValue(dst []byte, g *groupRef) ([]byte, error) {
	d := &s.dec
	k := d.PeekKind()
	if k != '{' && k != '[' {
		v, err := d.ReadValue()
		if dst != nil {
			dst = append(dst, v...)
		}
		return dst, err
	}
	base := d.StackDepth()
	groupNext := false
	for {
		k := d.PeekKind()
		depth := d.StackDepth()
		isName := false
		if depth > base && k != '}' && k != ']' && k != 0 {
			kind, n := d.StackIndex(depth)
			switch {
			case kind == '{' && n%2 == 1:
				dst = appendIf(dst, ':')
			case kind == '{':
				isName = true
				if n > 0 {
					dst = appendIf(dst, ',')
				}
			case n > 0:
				dst = appendIf(dst, ',')
			}
		}
		switch k {
		case '{', '[':
			if depth >= MaxDepth {
				return dst, &depthError{offset: d.InputOffset() + int64(skipSeparators(d.UnreadBuffer(), 0))}
			}
			if _, err := d.ReadToken(); err != nil {
				return dst, err
			}
			dst = appendIf(dst, byte(k))
			if groupNext {
				g.kind, groupNext = k, false
			}
		case '}', ']':
			if _, err := d.ReadToken(); err != nil {
				return dst, err
			}
			dst = appendIf(dst, byte(k))
			if d.StackDepth() == base {
				return dst, nil
			}
		case 0:
			_, err := d.ReadToken()
			return dst, err
		default:
			v, err := d.ReadValue()
			if err != nil {
				return dst, err
			}
			if groupNext {
				g.kind, g.at, groupNext = k, at(len(dst), v), false
			}
			if dst != nil {
				dst = append(dst, v...)
			}
			if isName && g != nil && depth == base+1 {
				groupNext = isGroup(v)
			}
		}
	}
}

func appendIf(dst []byte, c byte) []byte {
	if dst == nil {
		return nil
	}
	return append(dst, c)
}

func isGroup(name []byte) bool {
	if q := quoted(name); !hasEscape(q) {
		return string(q) == "group"
	}
	v, _ := jsontext.AppendUnquote(nil, name)
	return string(v) == "group"
}

// syntaxInvalid is the rejection of raw for err, an error of the decoder:
// the message encoding/json gives for plain syntax errors (clients know
// them), and one that says what and where for what only a strict reading
// rejects: duplicate names, invalid UTF-8 and lone surrogates, nesting past
// MaxDepth.
func (s *scanner) syntaxInvalid(raw []byte, err error) *Invalid {
	var de *depthError
	if errors.As(err, &de) {
		return invalid(ReasonMalformed, "malformed JSON at byte offset %d: objects and arrays nest more than %d deep, the limit", de.offset, MaxDepth)
	}
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return syntaxInvalid(raw)
	}
	if se.Err == jsontext.ErrDuplicateName {
		return invalid(ReasonMalformed, "malformed JSON at byte offset %d: duplicate field %s in %s; each name may appear once in an object",
			se.ByteOffset, Quote(se.JSONPointer.LastToken()), where(se.JSONPointer.Parent()))
	}
	if bad := syntaxInvalid(raw); bad.Msg != "malformed JSON" {
		return bad // encoding/json rejects it too
	}
	msg := strings.TrimPrefix(se.Err.Error(), "jsontext: ")
	switch {
	case strings.Contains(msg, "invalid UTF-8"):
		msg = "invalid UTF-8 in a string; send text as UTF-8"
	case strings.Contains(msg, "surrogate"), strings.Contains(msg, "escape sequence"):
		msg += " (a lone UTF-16 surrogate is no character: escape a character outside the BMP as a surrogate pair)"
	}
	return invalid(ReasonMalformed, "malformed JSON at byte offset %d: %s", se.ByteOffset, msg)
}

// where names the object a JSON pointer points to, for messages.
func where(p jsontext.Pointer) string {
	if p == "" {
		return "the event"
	}
	return Quote(string(p))
}
