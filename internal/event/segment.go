package event

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// The Segment tracking API (https://segment.com/docs/connections/spec/):
// its messages are read by Batch.AddSegment, with the same strict JSON as
// inlet's own events, but open: every top-level field is kept as sent.

// Segment limits, as the spec's HTTP API states them.
const (
	SegmentMaxMessageBytes = 32 << 10  // one message
	SegmentMaxBatchBytes   = 500 << 10 // one batch request, decompressed
)

// SegmentField is the top-level object a Segment message's record carries
// inlet's enrichment in: received_at, ip, ua, client, group, code,
// timestamp (the sentAt-corrected time), batch_context and
// batch_integrations. A message that sends a field of this name itself is
// rejected: the record must not hold the name twice.
const SegmentField = "inlet"

// ReasonMissingField: a Segment message lacks a field its type requires
// (userId or anonymousId, groupId, previousId).
const ReasonMissingField Reason = "missing_field"

// SegmentTypes are the calls of the spec, the values of "type".
var SegmentTypes = []string{"track", "identify", "page", "screen", "group", "alias"}

// SegmentBatch is what a batch's wrapper says of all its messages.
type SegmentBatch struct {
	SentAt   time.Time // the wrapper's sentAt; zero: none
	WriteKey string    // the wrapper's writeKey; "" when none
	// Extra is appended to each message's inlet object: the wrapper's
	// context and integrations, as sent (`,"batch_context":{...}`).
	Extra []byte
}

// IsSegment reports whether raw, one message as sent, is a Segment
// message: a JSON object with a top-level "type" (the name as decoded, as
// Batch.AddSegment reads it). It reads only the framing of raw
// (Batch.AddSegment validates it); inlet's own events never carry "type".
func IsSegment(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`"type"`)) && bytes.IndexByte(raw, '\\') < 0 { // no name with an escape either
		return false
	}
	found := false
	topLevel(raw, func(name, _ []byte) bool {
		found = string(unquote(name)) == "type"
		return !found
	})
	return found
}

// SegmentWriteKey is the top-level "writeKey" string of raw, a message or
// a batch wrapper, or "" (the analytics.js convention: the key in the body).
func SegmentWriteKey(raw []byte) string {
	key := ""
	topLevel(raw, func(name, v []byte) bool {
		if string(unquote(name)) != "writeKey" {
			return true
		}
		if len(v) >= 2 && v[0] == '"' {
			if k, err := jsontext.AppendUnquote(nil, v); err == nil {
				key = string(k)
			}
		}
		return false
	})
	return key
}

// topLevel calls f with each top-level name (quoted, as sent) and value
// of the object raw, by its framing only (strings and brackets, the
// colons and commas between them), until f returns false or the framing
// breaks. It reports whether raw is framed as one object, nothing but
// space after it, up to where f stopped.
func topLevel(raw []byte, f func(name, value []byte) bool) bool {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return skipSpace(raw, i+1) == len(raw)
	}
	for i < len(raw) && raw[i] == '"' {
		ne, ok := stringEnd(raw, i)
		if !ok {
			return false
		}
		name := raw[i:ne]
		i = skipSpace(raw, ne)
		if i == len(raw) || raw[i] != ':' {
			return false
		}
		i = skipSpace(raw, i+1)
		if i == len(raw) {
			return false
		}
		ve, ok := valueEnd(raw, i)
		if !ok {
			return false
		}
		if !f(name, raw[i:ve]) {
			return true
		}
		i = skipSpace(raw, ve)
		if i == len(raw) {
			return false
		}
		switch raw[i] {
		case '}':
			return skipSpace(raw, i+1) == len(raw)
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return false
		}
	}
	return false
}

// FrameSegment cuts a Segment batch body, an object with a "batch" array
// in any order with the wrapper's fields (sentAt, writeKey, context,
// integrations, timestamp, messageId and any other, ignored), into its
// messages, appended to dst, and reads the wrapper. ok is false when body
// is not such an object (or holds more than maxEvents messages): the
// caller frames it as inlet's own body (Frame), which says what is wrong.
// err rejects a body that is not JSON (where and why), and a well-framed
// wrapper whose fields are wrong: the wrapper is
// strict JSON as a message is (names matched as decoded), its context and
// integrations nested so that the records, which hold them two levels
// deeper, are too.
//
// The returned slices alias body; the messages' insides are unchecked, as
// Frame leaves them.
func FrameSegment(dst [][]byte, body []byte, maxEvents int) (items [][]byte, w SegmentBatch, ok bool, err error) {
	b := body
	if bytes.HasPrefix(b, []byte(bom)) {
		b = b[len(bom):]
	}
	n := len(dst)
	seen := map[string]bool{}
	var extra []byte
	good := topLevel(b, func(name, v []byte) bool {
		if !jsontext.Value(name).IsValid() {
			err = wrapperFault(body, name, "a name of the batch")
			return false
		}
		key := string(unquote(name))
		if seen[key] {
			err = &BodyError{Err: ErrMalformed, Offset: -1, Msg: fmt.Sprintf("the batch's field %s appears twice", Quote(key))}
			return false
		}
		seen[key] = true
		if key != "batch" {
			limit := MaxDepth - 1
			if key == "context" || key == "integrations" {
				limit = MaxDepth - 2 // in each record's inlet object
			}
			if !jsontext.Value(v).IsValid() {
				err = wrapperFault(body, v, "the batch's "+Quote(key))
				return false
			}
			if d := depthOf(v); d > limit {
				err = &BodyError{Err: ErrMalformed, Offset: -1, Msg: fmt.Sprintf("the batch's %s nests objects and arrays %d deep; the limit is %d", Quote(key), d, limit)}
				return false
			}
		}
		switch key {
		case "batch":
			var fine bool
			if dst, fine = frameArray(dst, v, maxEvents); !fine {
				ok = false
				seen["batch"] = false
				return false
			}
		case "sentAt":
			if v[0] == 'n' {
				break
			}
			t, bad := segmentTime("sentAt", v)
			if bad != nil {
				err = &BodyError{Err: ErrMalformed, Offset: -1, Msg: "the batch's " + bad.Msg}
				return false
			}
			w.SentAt = t
		case "writeKey":
			if v[0] != '"' {
				err = &BodyError{Err: ErrMalformed, Offset: -1, Msg: "the batch's \"writeKey\" must be a string"}
				return false
			}
			w.WriteKey = string(unquote(v))
		case "context", "integrations":
			if v[0] == 'n' {
				break
			}
			if v[0] != '{' {
				err = &BodyError{Err: ErrMalformed, Offset: -1, Msg: fmt.Sprintf("the batch's %q must be a JSON object", key)}
				return false
			}
			val := jsontext.Value(bytes.Clone(v))
			_ = val.Compact() // valid: it cannot fail
			extra = append(extra, `,"batch_`...)
			extra = append(extra, key...)
			extra = append(extra, `":`...)
			extra = append(extra, val...)
		default:
			// timestamp, messageId and others: the messages carry their own.
		}
		return true
	})
	if err == nil && !good {
		// A syntax error between the wrapper's fields (a missing comma):
		// said as such, rather than as inlet's framing would read the body.
		if be := checkSyntax(b); be != nil {
			be.shift(len(body) - len(b))
			err = be
		}
	}
	if err != nil {
		return dst[:n], SegmentBatch{}, false, err
	}
	if !good || !seen["batch"] || len(dst) == n {
		return dst[:n], SegmentBatch{}, false, nil
	}
	w.Extra = extra
	return dst, w, true, nil
}

// wrapperFault is the error of body, a Segment batch, whose part v (a
// name or a value of the wrapper, aliasing body), what, is not strict
// JSON: where and why.
func wrapperFault(body, v []byte, what string) *BodyError {
	_, err := jsontext.NewDecoder(bytes.NewReader(v)).ReadValue()
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &BodyError{Err: ErrMalformed, Offset: -1, Msg: "malformed JSON in " + what}
	}
	off := int64(cap(body)-cap(v)) + se.ByteOffset
	return &BodyError{Err: ErrMalformed, Offset: off,
		Msg: fmt.Sprintf("malformed JSON at byte offset %d, in %s: %s", off, what, strings.TrimPrefix(se.Err.Error(), "jsontext: "))}
}

// depthOf is how deeply v, valid JSON, nests objects and arrays: 0 for a
// scalar.
func depthOf(v []byte) int {
	d, deepest := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			e, _ := stringEnd(v, i)
			i = e - 1
		case '{', '[':
			d++
			deepest = max(deepest, d)
		case '}', ']':
			d--
		}
	}
	return deepest
}

// frameArray cuts the JSON array v into its elements, as frameJSON does.
func frameArray(dst [][]byte, v []byte, maxEvents int) ([][]byte, bool) {
	if v[0] != '[' {
		return dst, false
	}
	n := len(dst)
	i := skipSpace(v, 1)
	if i == len(v) || v[i] == ']' {
		return dst, false
	}
	for {
		if maxEvents > 0 && len(dst)-n == maxEvents {
			return dst, false
		}
		end, ok := valueEnd(v, i)
		if !ok {
			return dst, false
		}
		dst = append(dst, v[i:end])
		i = skipSpace(v, end)
		if i == len(v) {
			return dst, false
		}
		if v[i] == ']' {
			return dst, i == len(v)-1
		}
		if v[i] != ',' {
			return dst, false
		}
		i = skipSpace(v, i+1)
	}
}

// segmentTime reads a spec date (ISO 8601: RFC 3339, or without a zone,
// read as UTC) of field, as sent (a JSON string).
func segmentTime(field string, v []byte) (time.Time, *Invalid) {
	if v[0] != '"' {
		return time.Time{}, invalid(ReasonBadField, "%q must be an ISO 8601 date string, got %s", field, jsonKind(v[0]))
	}
	var buf [64]byte
	s, _ := jsontext.AppendUnquote(buf[:0], v)
	for _, layout := range [...]string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.Parse(layout, string(s)); err == nil {
			return t, nil
		}
	}
	return time.Time{}, invalid(ReasonBadField, "%q %s is not an ISO 8601 date (e.g. 2026-01-02T15:04:05.000Z)", field, Quote(string(s)))
}

// Which top-level field of a Segment message a name is.
type segField int

const (
	sOther segField = iota
	sType
	sEvent
	sName
	sUserID
	sAnonID
	sMessageID
	sGroupID
	sPreviousID
	sTimestamp
	sSentAt
	sContext
	sProperties
	sTraits
	sIntegrations
	sInlet
	sWriteKey
	numSegFields
)

var segFieldNames = [numSegFields]string{sType: "type", sEvent: "event", sName: "name", sUserID: "userId",
	sAnonID: "anonymousId", sMessageID: "messageId", sGroupID: "groupId", sPreviousID: "previousId",
	sTimestamp: "timestamp", sSentAt: "sentAt", sContext: "context", sProperties: "properties",
	sTraits: "traits", sIntegrations: "integrations", sInlet: SegmentField, sWriteKey: "writeKey"}

func segFieldOf(name []byte) segField {
	for f := sType; f < numSegFields; f++ {
		if segFieldNames[f] == string(name) {
			return f
		}
	}
	return sOther
}

// AddSegment is Add for a Segment message: raw must be strict JSON as Add
// reads it, but every top-level field is kept as sent (nulls too), and the
// rules are the spec's: "type" one of SegmentTypes (when absent, typ, the
// type a path like /v1/identify implies, is added to the record; "" for
// none), a userId or anonymousId on every call ("A userId or an
// anonymousId is required", the spec's HTTP API says of each; the
// examples of its call pages leave the common fields out), an alias'
// userId and previousId, a track's "event", a group's groupId; ids
// strings; timestamp and sentAt ISO 8601 dates; context, properties,
// traits and integrations objects.
// A "writeKey" (analytics.js sends its key in the body) is left out of the
// record: it is a secret. A null "type" or "messageId" is as none: the
// record has the path's type and inlet's id in its place.
// Its name is "event" for a track, "type:name" for a page or screen with
// a name, else the type. sb is the batch wrapper's (nil: none). The
// record gets the enrichment in its SegmentField object, and a messageId
// when it has none.
func (b *Batch) AddSegment(raw []byte, typ string, sb *SegmentBatch) *Invalid {
	start := len(b.heads)
	var (
		f   fields
		bad *Invalid
	)
	b.heads, f, bad = b.sc.scanSegment(b.heads, raw, b.limit, b.now, typ, sb)
	if bad != nil {
		b.evs = append(b.evs, pending{bad: bad})
		return bad
	}
	if sb != nil {
		b.segExtra = sb.Extra
	}
	b.evs = append(b.evs, pending{f: f, head: spanOf(start, len(b.heads))})
	return nil
}

func (s *scanner) scanSegment(dst, raw []byte, maxBytes int, now time.Time, typ string, sb *SegmentBatch) ([]byte, fields, *Invalid) {
	var f fields
	if maxBytes > 0 && len(raw) > maxBytes {
		return dst, f, invalid(ReasonTooLarge, "message is %d bytes; the limit is %d", len(raw), maxBytes)
	}
	start := firstNonSpace(raw)
	if start < 0 {
		return dst, f, invalid(ReasonMalformed, "empty message")
	}
	if raw[start] != '{' {
		return dst, f, s.notObject(raw, start)
	}
	head := len(dst)
	out, f, bad := s.walkSegment(dst, raw, now, typ, sb)
	if bad != nil {
		return dst[:head], fields{}, bad
	}
	return out, f, nil
}

func (s *scanner) walkSegment(dst, raw []byte, now time.Time, typ string, sb *SegmentBatch) ([]byte, fields, *Invalid) {
	f := fields{name: none, id: none, uid: none, anonID: none, props: none, group: none, seg: true}
	head := len(dst)
	s.rd = *bytes.NewBuffer(raw)
	s.dec.Reset(&s.rd)
	d := &s.dec
	if _, err := d.ReadToken(); err != nil { // '{'
		return dst, f, s.syntaxInvalid(raw, err)
	}
	dst = append(dst, '{')
	var (
		sem   *Invalid
		vals  [numSegFields]seen
		props = none // properties, or traits of an identify or group: the catalog checks it
		trait = none
	)
	first := true
	for {
		k := d.PeekKind()
		if k == '}' {
			break
		}
		if k != '"' {
			_, err := d.ReadToken()
			return dst, f, s.syntaxInvalid(raw, err)
		}
		name, err := d.ReadValue()
		if err != nil {
			return dst, f, s.syntaxInvalid(raw, err)
		}
		fl := sOther
		if n := quoted(name); !hasEscape(n) {
			fl = segFieldOf(n)
		} else {
			s.scratch, _ = jsontext.AppendUnquote(s.scratch[:0], name)
			fl = segFieldOf(s.scratch)
		}
		k = d.PeekKind()
		if k == 0 || k == '}' || k == ']' {
			_, err := d.ReadToken()
			return dst, f, s.syntaxInvalid(raw, err)
		}
		// writeKey is a secret: never in a record. A null type or
		// messageId is none: the record gets the path's type, inlet's id
		// (it must not hold the name twice).
		if fl == sWriteKey || (k == 'n' && (fl == sType || fl == sMessageID)) {
			if err := s.skip(); err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, name...)
		dst = append(dst, ':')
		vals[fl].kind = k
		switch fl {
		case sOther:
			if dst, err = s.copyValue(dst, nil); err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
		case sInlet:
			if sem == nil {
				sem = invalid(ReasonBadField, "field %q is the one inlet records its enrichment in; send it in \"properties\" or \"context\"", SegmentField)
			}
			if dst, err = s.copyValue(dst, nil); err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
		case sContext, sProperties, sTraits, sIntegrations:
			if k != '{' && k != 'n' && sem == nil {
				sem = invalid(ReasonBadField, "%q must be a JSON object, got %s", segFieldNames[fl], kindName(k))
			}
			off := len(dst)
			if fl == sContext && k == '{' {
				g := groupRef{at: none}
				dst, err = s.copyValue(dst, &g)
				f.group, f.groupKind = g.at.shift(-head), g.kind
			} else {
				dst, err = s.copyValue(dst, nil)
			}
			if err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			if k == '{' && fl == sProperties {
				props = spanOf(off-head, len(dst)-head)
			}
			if k == '{' && fl == sTraits {
				trait = spanOf(off-head, len(dst)-head)
			}
		default: // strings: type, ids, names, dates
			if k == '{' || k == '[' {
				if sem == nil {
					sem = invalid(ReasonBadField, "%q must be a string, got %s", segFieldNames[fl], kindName(k))
				}
				if err := s.skip(); err != nil { // its depth too: ReadValue checks only its syntax
					return dst, f, s.syntaxInvalid(raw, err)
				}
				continue
			}
			v, err := d.ReadValue()
			if err != nil {
				return dst, f, s.syntaxInvalid(raw, err)
			}
			vals[fl].raw = v
			if k != '"' && k != 'n' && sem == nil {
				sem = invalid(ReasonBadField, "%q must be a string, got %s", segFieldNames[fl], kindName(k))
			}
			off := len(dst) + 1 - head
			dst = append(dst, v...)
			if k != '"' {
				continue
			}
			sp := span{off, len(v) - 2}
			var esc []byte
			if hasEscape(v) {
				esc, _ = jsontext.AppendUnquote(nil, v)
			}
			switch fl {
			case sEvent:
				f.name, f.nameEsc = sp, esc
			case sMessageID:
				f.id, f.idEsc = sp, esc
			case sUserID:
				if len(v) > 2 {
					f.uid, f.uidEsc = sp, esc
				}
			case sAnonID:
				if len(v) > 2 {
					f.anonID, f.anonIDEsc = sp, esc
				}
			}
		}
	}
	if _, err := d.ReadToken(); err != nil { // '}'
		return dst, f, s.syntaxInvalid(raw, err)
	}
	if end := int(d.InputOffset()); firstNonSpace(raw[end:]) >= 0 {
		return dst, f, invalid(ReasonMalformed, "malformed JSON at byte offset %d: data after the message object", end+firstNonSpace(raw[end:]))
	}
	if sem != nil {
		return dst, f, sem
	}
	// The type: as sent, else the path's.
	t := typ
	if tv := vals[sType]; tv.kind == '"' {
		t = segmentType(unquote(tv.raw))
		if typ != "" && t != typ {
			return dst, f, invalid(ReasonBadField, "\"type\" %s sent to the %s call; send it to /v1/%s or /v1/batch", Quote(t), typ, t)
		}
	} else if typ == "" {
		return dst, f, invalid(ReasonBadField, "\"type\" is required: one of track, identify, page, screen, group, alias")
	} else {
		dst = append(dst, `,"type":`...)
		dst, _ = jsontext.AppendQuote(dst, typ)
	}
	str := func(fl segField) string {
		if v := vals[fl]; v.kind == '"' {
			return string(unquote(v.raw))
		}
		return ""
	}
	// empty reports whether fl is absent, not a string, or "": str without
	// its copy.
	empty := func(fl segField) bool {
		v := vals[fl]
		return v.kind != '"' || len(v.raw) <= 2
	}
	switch t {
	case "track":
		if empty(sEvent) {
			return dst, f, invalid(ReasonMissingEvent, "a track needs \"event\": a non-empty string naming the event")
		}
		if e := checkNameChars("event", stringChars(vals[sEvent].raw)); e != nil {
			return dst, f, e
		}
	case "identify", "page", "screen", "group", "alias":
		name := t
		if (t == "page" || t == "screen") && !empty(sName) {
			name = t + ":" + str(sName)
		}
		if e := checkNameChars("name", len([]rune(name))-len(t)-1); len(name) > len(t) && e != nil {
			return dst, f, e
		}
		f.name, f.nameEsc = span{0, len(name)}, []byte(name)
	default:
		return dst, f, invalid(ReasonBadField, "\"type\" %s is not a call of the Segment spec: want track, identify, page, screen, group or alias", Quote(t))
	}
	switch {
	case t == "alias":
		if empty(sUserID) || empty(sPreviousID) {
			return dst, f, invalid(ReasonMissingField, "an alias needs \"userId\" and \"previousId\", non-empty strings")
		}
	case empty(sUserID) && empty(sAnonID):
		return dst, f, invalid(ReasonMissingField, "%s needs \"userId\" or \"anonymousId\", a non-empty string: the spec requires one on every call", segmentCall(t))
	case t == "group" && empty(sGroupID):
		return dst, f, invalid(ReasonMissingField, "a group needs \"groupId\", a non-empty string")
	}
	if id := vals[sMessageID]; id.kind == '"' {
		if n := stringBytes(id.raw); n == 0 || n > MaxIDBytes {
			return dst, f, invalid(ReasonBadField, "\"messageId\" must be a non-empty string of at most %d bytes", MaxIDBytes)
		}
	} else {
		f.id = none
	}
	for _, fl := range [...]segField{sUserID, sAnonID} {
		if v := vals[fl]; v.kind == '"' {
			if n := stringBytes(v.raw); n > MaxUserBytes {
				return dst, f, invalid(ReasonBadField, "%q is %d bytes; the limit is %d", segFieldNames[fl], n, MaxUserBytes)
			}
		}
	}
	// The time: timestamp corrected by the client's clock skew (the spec:
	// receivedAt - (sentAt - timestamp)), else the receive time.
	ts := now
	if v := vals[sTimestamp]; v.kind == '"' {
		t, bad := segmentTime("timestamp", v.raw)
		if bad != nil {
			return dst, f, bad
		}
		ts = t
		var sent time.Time
		if sv := vals[sSentAt]; sv.kind == '"' {
			if sent, bad = segmentTime("sentAt", sv.raw); bad != nil {
				return dst, f, bad
			}
		} else if sb != nil {
			sent = sb.SentAt
		}
		if !sent.IsZero() {
			ts = skewed(now, t, sent)
		}
	} else if sv := vals[sSentAt]; sv.kind == '"' {
		if _, bad := segmentTime("sentAt", sv.raw); bad != nil {
			return dst, f, bad
		}
	}
	f.segTS = ts
	if t == "identify" || t == "group" {
		props = trait
	}
	f.props = props
	return dst, f, nil
}

// skewed is now - (sent - t), the spec's correction of t, a device's
// time, by how far its clock, which said sent, is off. It is exact: a
// time.Duration would saturate past 292 years between two dates.
func skewed(now, t, sent time.Time) time.Time {
	return time.Unix(now.Unix()+t.Unix()-sent.Unix(), int64(now.Nanosecond()+t.Nanosecond()-sent.Nanosecond()))
}

// segmentCall is t, one of SegmentTypes, with its article, for messages.
func segmentCall(t string) string {
	if t == "identify" || t == "alias" {
		return "an " + t
	}
	return "a " + t
}

// segmentType is the type t names: one of the spec's as a constant (no
// copy per message), else t copied.
func segmentType(t []byte) string {
	switch string(t) {
	case "track":
		return "track"
	case "identify":
		return "identify"
	case "page":
		return "page"
	case "screen":
		return "screen"
	case "group":
		return "group"
	case "alias":
		return "alias"
	}
	return string(t)
}

// unquote is a valid JSON string's value.
func unquote(q []byte) []byte {
	if c := quoted(q); !hasEscape(c) {
		return c
	}
	v, _ := jsontext.AppendUnquote(nil, q)
	return v
}

// appendSegmentTail closes a Segment message's record: its SegmentField
// object from tail (appendMeta's, which starts with a comma), the
// corrected timestamp ts, extra (the batch's), the group and code.
func appendSegmentTail(out, tail []byte, ts time.Time, extra []byte, group string, code int64) []byte {
	out = append(out, `,"`+SegmentField+`":{`...)
	out = append(out, tail[1:]...)
	out = append(out, `,"timestamp":"`...)
	out = AppendTime(out, ts)
	out = append(out, '"')
	out = append(out, extra...)
	out = appendGroupCode(out, group, code)
	return append(out, '}')
}
