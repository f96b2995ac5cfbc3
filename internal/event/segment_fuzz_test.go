package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/inlet-dev/inlet/internal/event"
)

// segNow is the time of the fuzz requests: nanoseconds, so that the
// clock-skew arithmetic shows them.
var segNow = time.Date(2026, 12, 5, 12, 0, 0, 123456789, time.UTC)

// segMeta is the meta of the fuzz requests.
var segMeta = event.Meta{ReceivedAt: segNow, IP: "192.0.2.7", UA: "fuzz/1.0", Client: "web"}

// segFuzzTypes are the types a path implies, picked by the fuzz mode.
var segFuzzTypes = [8]string{"", "track", "identify", "page", "screen", "group", "alias", ""}

// segMode is how one fuzz input is run: the type its path implies, the
// message size limit (a small one the fuzzer reaches, or the spec's), and
// whether the planned path sets a group and code.
type segMode struct {
	typ     string
	limit   int
	planned bool
}

func segModeOf(m uint8) segMode {
	sm := segMode{typ: segFuzzTypes[m%8], limit: event.SegmentMaxMessageBytes, planned: m&0x10 != 0}
	if m&0x08 != 0 {
		sm.limit = 512
	}
	return sm
}

// FuzzSegment runs a body through the Segment path: as a batch
// (FrameSegment, then AddSegment on each message with the wrapper) and as
// one message of a call (AddSegment with the type the path implies). It
// checks what holds for any input against a reference on encoding/json
// (refFrame, checkSegment): FrameSegment frames exactly the batches the
// reference reads, or refuses them with a *BodyError; AddSegment accepts
// exactly the messages the rules of docs/segment.md accept, and an
// accepted message's record is the message as sent plus the enrichment.
// The seed corpus is below and in testdata/fuzz/FuzzSegment.
func FuzzSegment(f *testing.F) {
	const (
		small   = 0x08
		planned = 0x10
	)
	add := func(body string, mode uint8) { f.Add([]byte(body), mode) }
	// Each call, with its required fields, as a message and in a batch.
	add(`{"type":"track","event":"Order Completed","userId":"u1","properties":{"total":30,"items":[{"sku":"a"}]}}`, 0)
	add(`{"type":"identify","anonymousId":"a1","traits":{"plan":"pro"},"messageId":"m-1"}`, planned)
	add(`{"type":"page","name":"Home","anonymousId":"a1","properties":{"path":"/"}}`, 0)
	add(`{"type":"screen","userId":"u1","properties":{}}`, 0)
	add(`{"type":"group","groupId":"g1","userId":"u1","traits":{"employees":420}}`, 0)
	add(`{"type":"alias","previousId":"old","userId":"u1"}`, 0)
	add(`{"userId":"u1","traits":{"a":1}}`, 2)
	add(`{"userId":"u","anonymousId":"a"}`, 2)                                          // the key: userId before anonymousId                                          // /v1/identify: the type from the path
	add(`{"type":"track","event":"x","userId":"u1"}`, 3)                                // a track sent to /v1/page
	add(`{"type":"purchase","userId":"u1"}`, 0)                                         // no call of the spec
	add(`{"event":"x","userId":"u1"}`, 0)                                               // no type
	add(`{"type":"track","userId":"u1"}`, 0)                                            // a track without event
	add(`{"type":"identify","userId":"","anonymousId":null}`, 0)                        // no id
	add(`{"type":"group","userId":"u"}`, 0)                                             // no groupId
	add(`{"type":"alias","userId":"u","anonymousId":"a"}`, 0)                           // no previousId
	add(`{"type":"track","event":"x","anonymousId":"a","timestamp":5}`, 0)              // not a date
	add(`{"type":"track","event":"x","userId":7}`, 0)                                   // an id not a string
	add(`{"type":"track","event":"x","userId":"u","properties":[1]}`, 0)                // not an object
	add(`{"type":"track","event":"x","userId":"u","inlet":{"ip":"x"}}`, 0)              // inlet's own field
	add(`{"type":"track","event":"x","userId":"u","in\u006cet":1}`, 0)                  // the same, escaped
	add(`{"t\u0079pe":"track","event":"a","userId":"u","wr\u0069teKey":"k\u0065y"}`, 0) // a type and writeKey named with escapes
	// Batches: the wrapper's fields in any order, with the clock skew of
	// sentAt, context and integrations, writeKey.
	add(`{"batch":[{"type":"identify","userId":"u1","traits":{"plan":"pro"},"messageId":"m-1"},{"type":"track","event":"Order Completed","userId":"u1","properties":{"total":30},"timestamp":"2026-12-05T10:00:00Z","messageId":"m-2"},{"type":"track","userId":"u1","messageId":"m-3"}],"sentAt":"2026-12-05T10:00:02Z"}`, 0)
	add(`{"writeKey":"k\u00e9y","messageId":"x","sentAt":"2026-12-05T12:00:10.5+01:00","batch":[{"type":"track","event":"a","anonymousId":"a","timestamp":"2026-12-05T11:00:00"}] , "context":{"library":{"name":"analytics-go"}},"integrations":{"All":false,"Mixpanel":true},"timestamp":"now"}`, planned)
	add("\xef\xbb\xbf { \"batch\" : [ {\"type\":\"page\",\"userId\":\"u\",\"sentAt\":\"2026-12-05T12:00:00+0000\",\"timestamp\":\"2026-12-05T11:59:59.999999999-0000\"} ] , \"context\" : null , \"sentAt\" : null } ", 0)
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"batch":[{}]}`, 0)                                                                                                   // batch twice
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"b\u0061tch":[{}]}`, 0)                                                                                              // batch twice, escaped
	add(`{"b\u0061tch":[{"type":"track","event":"a","userId":"u"}],"c\u006fntext":{"a":1}}`, 0)                                                                                    // names as decoded
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"context":{"a":1,"a":2}}`, 0)                                                                                        // a name twice in the context
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}] "sentAt":null}`, 0)                                                                                                  // no comma
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],}`, 0)                                                                                                               // a comma too many
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}]} {}`, 0)                                                                                                             // data after the batch
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"x":tru}`, 0)                                                                                                        // a broken literal beside the batch
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"x":"\q"}`, 0)                                                                                                       // a broken escape beside the batch
	add("{\"batch\":[{\"type\":\"track\",\"event\":\"a\",\"userId\":\"u\"}],\"x\xff\":1,\"writeKey\":\"\\udc00\"}", 0)                                                             // bad UTF-8, a lone surrogate
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"sentAt":"yesterday"}`, 0)                                                                                           // not a date
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"context":[1],"writeKey":1}`, 0)                                                                                     // not an object, not a string
	add(`{"batch":[{"type":"track","event":"a","userId":"u"},tru,{"type":"page",}]}`, 0)                                                                                           // broken messages
	add(`{"batch":[{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"},{"type":"track"}]}`, 0) // past maxEvents
	add(`{"batch":[],"sentAt":null}`, 0)
	add(`[{"type":"track","event":"a","userId":"u"}]`, 0) // inlet's own array
	// Strict JSON: escapes, a name twice (escaped too), bad UTF-8, lone
	// surrogates, huge numbers, explicit nulls, deep nesting.
	add(`{"type":"track","event":"\u00e9v\"\n\ud83d\ude00","userId":"\u0075","messageId":"m\/1","properties":{"s":"\u2028<>&"}}`, 0)
	add(`{"type":"track","event":"a","userId":"u","event":"b"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","ev\u0065nt":"b"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"k":1,"k":2}}`, 0)
	add("{\"type\":\"track\",\"event\":\"a\xff\",\"userId\":\"u\"}", 0)
	add(`{"type":"track","event":"a","userId":"\ud800"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"lo":"\udc00x"}}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"n":123456789012345678901234567890,"f":-1.50e+300,"z":-0,"e":1E-400}}`, 0)
	add(`{"type":"track","event":"a","userId":"u","anonymousId":null,"messageId":null,"context":null,"properties":null,"traits":null,"integrations":null,"timestamp":null,"sentAt":null,"name":null,"x":null}`, 0)
	add(`{"type":null,"userId":"u"}`, 2)
	add(`{"type":null,"userId":"u"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"a":`+strings.Repeat("[", 62)+strings.Repeat("]", 62)+`}}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"a":`+strings.Repeat("[", 63)+strings.Repeat("]", 63)+`}}`, 0)
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"context":{"a":`+strings.Repeat("[", 61)+strings.Repeat("]", 61)+`}}`, 0)
	add(`{"type":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`,"event":"a","userId":"u"}`, 0)
	add(`{"batch":[{"type":"track","event":"a","userId":"u"}],"context":{"a":`+strings.Repeat("[", 62)+strings.Repeat("]", 62)+`}}`, 0)
	add(`{"type":"track","event":"a","userId":"u"} {}`, 0) // data after the message
	add(` [1] `, 0)
	add(``, 0)
	// writeKey is a secret: never in a record; the key and id.
	add(`{"type":"track","event":"a","anonymousId":"a1","writeKey":"secret","wr\u0069teKey":1}`, 0)
	add(`{"type":"track","event":"a","userId":"","anonymousId":"","messageId":"m"}`, 0) // no id: the spec requires one on every call
	add(`{"type":"page","name":"Home","anonymousId":"\u0061"}`, 3)
	add(`{"type":"alias","previousId":"p","anonymousId":"a"}`, 6)
	// Dates: zones, no zone, far off, the batch's sentAt against the
	// message's.
	add(`{"type":"track","event":"a","userId":"u","timestamp":"2026-12-05T11:59:00Z","sentAt":"2026-12-05T11:59:30.25Z"}`, 0)
	add(`{"batch":[{"type":"track","event":"a","userId":"u","timestamp":"2300-01-01T00:00:00Z"},{"type":"track","event":"a","userId":"u","timestamp":"1600-01-01T00:00:00+01:00","sentAt":"2026-12-05T12:00:00Z"}]}`, 0)
	add(`{"batch":[{"type":"track","event":"a","userId":"u","timestamp":"9999-12-31T23:59:59.999999999Z"},{"type":"track","event":"a","userId":"u","timestamp":"0001-01-01T00:00:00Z","sentAt":"9999-01-01T00:00:00Z"}],"sentAt":"0001-01-01T00:00:00Z"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","timestamp":"2026-13-05T11:59:00Z"}`, 0)
	// Limits: names, ids, the message's size.
	add(`{"type":"track","event":"`+strings.Repeat("é", 128)+`","userId":"u"}`, 0)
	add(`{"type":"page","name":"`+strings.Repeat("x", 129)+`","userId":"u"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","messageId":"`+strings.Repeat("m", 129)+`"}`, 0)
	add(`{"type":"track","event":"a","userId":"`+strings.Repeat("\\u0075", 257)+`"}`, 0)
	add(`{"type":"track","event":"a","userId":"u","properties":{"p":"`+strings.Repeat("x", 480)+`"}}`, small)
	add(`{"type":"track","event":"a","userId":"u","properties":{"p":"`+strings.Repeat("x", event.SegmentMaxMessageBytes)+`"}}`, 0)

	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		m := segModeOf(mode)
		checkSegment(t, body, m.typ, nil, nil, m)
		items, w, ok, err := event.FrameSegment(nil, body, fuzzLimits.MaxEvents)
		wrapper := checkFrameSegment(t, body, items, w, ok, err)
		for _, raw := range items {
			checkSegment(t, raw, "", &w, wrapper, m)
		}
	})
}

// refBatch is the reference's reading of a Segment batch body.
type refBatch struct {
	ok       bool              // a batch FrameSegment must frame
	fault    bool              // a batch whose wrapper is wrong: FrameSegment may refuse it
	items    []json.RawMessage // the messages
	sentAt   time.Time         // zero: none
	writeKey string
	extra    map[string]any // batch_context and batch_integrations, as the record has them
}

// refFrame reads body as FrameSegment's contract has it, with
// encoding/json: a strict JSON object (as a message is, but for the
// messages, which AddSegment reads) with a "batch" array of 1 to maxEvents
// elements and the wrapper's fields right: sentAt a date or null,
// writeKey a string, context and integrations objects or null, nested so
// that the record, which holds them two levels deeper, is strict JSON too.
func refFrame(body []byte, maxEvents int) refBatch {
	var r refBatch
	b := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if !json.Valid(b) {
		return r
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return r
	}
	names := map[string]bool{}
	batch := false
	r.extra = map[string]any{}
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			panic(err) // json.Valid said otherwise
		}
		name := tok.(string)
		if !event.StrictJSON(bytes.TrimLeft(b[before:dec.InputOffset()], " \t\r\n,"), 1) {
			r.fault = true // invalid UTF-8 or a lone surrogate in a name
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		if names[name] {
			r.fault = true
			continue
		}
		names[name] = true
		null := string(v) == "null"
		switch name {
		case "batch":
			if v[0] != '[' {
				continue
			}
			if err := json.Unmarshal(v, &r.items); err != nil {
				panic(err)
			}
			batch = len(r.items) > 0 && len(r.items) <= maxEvents
		case "sentAt":
			if null {
				continue
			}
			var s string
			if json.Unmarshal(v, &s) != nil || !event.StrictJSON(v, 1) {
				r.fault = true
				continue
			}
			var ok bool
			if r.sentAt, ok = refSegmentTime(s); !ok {
				r.fault = true
			}
		case "writeKey":
			if json.Unmarshal(v, &r.writeKey) != nil || !event.StrictJSON(v, 1) {
				r.fault = true
			}
		case "context", "integrations":
			if null {
				continue
			}
			if v[0] != '{' || !event.StrictJSON(v, event.MaxDepth-2) {
				r.fault = true
				continue
			}
			r.extra["batch_"+name] = decodeAny(v)
		default:
			if !event.StrictJSON(v, event.MaxDepth-1) {
				r.fault = true
			}
		}
	}
	r.ok = batch && !r.fault
	return r
}

// checkFrameSegment holds FrameSegment's answer for body to refFrame's:
// it frames every batch the reference reads, and nothing else; what it
// frames aliases body; what it refuses it refuses with a *BodyError. It
// returns what the records of the messages must carry of the wrapper.
func checkFrameSegment(tb testing.TB, body []byte, items [][]byte, w event.SegmentBatch, ok bool, err error) map[string]any {
	tb.Helper()
	ref := refFrame(body, fuzzLimits.MaxEvents)
	switch {
	case err != nil:
		var be *event.BodyError
		if !errors.As(err, &be) || !errors.Is(err, event.ErrMalformed) || be.Msg == "" || be.Offset < -1 || be.Offset > int64(len(body)) {
			tb.Fatalf("FrameSegment(%q) error %T %#v: want a *BodyError wrapping ErrMalformed, with a message", body, err, err)
		}
		if ok || len(items) != 0 {
			tb.Fatalf("FrameSegment(%q) failed with %v, yet ok %v, %d items", body, err, ok, len(items))
		}
		if ref.ok {
			tb.Fatalf("FrameSegment(%q) refused a batch the reference reads: %v", body, err)
		}
		return nil
	case !ok:
		if len(items) != 0 {
			tb.Fatalf("FrameSegment(%q) did not frame it, yet returned %d items", body, len(items))
		}
		if ref.ok {
			tb.Fatalf("FrameSegment(%q) did not frame a batch the reference reads (%d messages)", body, len(ref.items))
		}
		return nil
	}
	if n := len(items); n < 1 || n > fuzzLimits.MaxEvents {
		tb.Fatalf("FrameSegment(%q) framed %d messages; want 1 to %d", body, n, fuzzLimits.MaxEvents)
	}
	// The items alias body in order; with each replaced by a 0, body is a
	// batch the reference reads: nothing outside them is wrong.
	var skel []byte
	prev := 0
	valid := true
	for i, it := range items {
		at := cap(body) - cap(it)
		if len(it) == 0 || at < prev || at+len(it) > len(body) || &body[at] != &it[0] {
			tb.Fatalf("FrameSegment(%q): message %d %q is not a part of the body after the one before", body, i, it)
		}
		skel = append(append(skel, body[prev:at]...), '0')
		prev = at + len(it)
		valid = valid && json.Valid(it)
	}
	skel = append(skel, body[prev:]...)
	sref := refFrame(skel, fuzzLimits.MaxEvents)
	if !sref.ok || len(sref.items) != len(items) {
		tb.Fatalf("FrameSegment(%q) framed %d messages %q; but the body is no batch the reference reads (as %q: ok %v, %d messages, wrapper fault %v)",
			body, len(items), items, skel, sref.ok, len(sref.items), sref.fault)
	}
	if valid { // then so is body, and its messages are the reference's
		if !ref.ok {
			tb.Fatalf("FrameSegment(%q) framed a body the reference does not read", body)
		}
		for i := range items {
			if !bytes.Equal(items[i], ref.items[i]) {
				tb.Fatalf("FrameSegment(%q) message %d is %q; the reference's %q", body, i, items[i], ref.items[i])
			}
		}
	}
	if !w.SentAt.Equal(sref.sentAt) || w.WriteKey != sref.writeKey {
		tb.Fatalf("FrameSegment(%q): sentAt %v, writeKey %q; want %v, %q", body, w.SentAt, w.WriteKey, sref.sentAt, sref.writeKey)
	}
	extra := decodeAny(append(append([]byte("{"), bytes.TrimPrefix(w.Extra, []byte(","))...), '}'))
	if !reflect.DeepEqual(extra, sref.extra) {
		tb.Fatalf("FrameSegment(%q): Extra %q; want %v", body, w.Extra, sref.extra)
	}
	return sref.extra
}

// checkSegment is the oracle of AddSegment: it accepts raw, one message
// sent to a call that implies typ ("" for none), with sb its batch's
// wrapper (nil: none) and extra what the records get of it, exactly when
// the rules of docs/segment.md, read with encoding/json, accept it; and
// the record of an accepted message is the message as sent, less its
// writeKey, plus the messageId and type when absent and the inlet object.
func checkSegment(tb testing.TB, raw []byte, typ string, sb *event.SegmentBatch, extra map[string]any, m segMode) {
	tb.Helper()
	isSeg, key := event.IsSegment(raw), event.SegmentWriteKey(raw)
	b := event.NewBatch("events", segMeta, m.limit)
	defer b.Release()
	bad := b.AddSegment(raw, typ, sb)
	if bad != nil && (bad.Reason == "" || bad.Msg == "") {
		tb.Fatalf("AddSegment(%q, %q) rejected it without a reason or message: %#v", raw, typ, bad)
	}
	wantReason := func(r event.Reason, why string) {
		tb.Helper()
		if bad == nil || bad.Reason != r {
			tb.Fatalf("AddSegment(%q, %q) = %v; want %s: %s", raw, typ, bad, r, why)
		}
	}
	switch {
	case len(raw) > m.limit:
		wantReason(event.ReasonTooLarge, "past the limit")
		return
	case !event.StrictJSON(raw, event.MaxDepth):
		wantReason(event.ReasonMalformed, "not strict JSON")
		return
	}
	msg, isObject := decodeAny(raw).(map[string]any)
	if !isObject {
		wantReason(event.ReasonNotObject, "not an object")
		return
	}
	_, hasType := msg["type"]
	if wk, _ := msg["writeKey"].(string); isSeg != hasType || key != wk {
		tb.Fatalf("IsSegment(%q) = %v, SegmentWriteKey %q; want %v, %q", raw, isSeg, key, hasType, wk)
	}
	ref := refSegment(msg, typ, sb)
	if ref.why != "" {
		if bad == nil {
			tb.Fatalf("AddSegment(%q, %q) accepted it; want it rejected: %s", raw, typ, ref.why)
		}
		return
	}
	if bad != nil {
		tb.Fatalf("AddSegment(%q, %q) = %v; want it accepted", raw, typ, bad)
	}

	// What the catalog and tracking plan read, before Build.
	if got := b.Name(0); got != ref.name {
		tb.Fatalf("AddSegment(%q, %q): name %q; want %q", raw, typ, got, ref.name)
	}
	if props := b.Props(0); (props == nil) != (ref.props == nil) || (props != nil && !reflect.DeepEqual(decodeAny(props), ref.props)) {
		tb.Fatalf("AddSegment(%q, %q): props %q; want %v", raw, typ, props, ref.props)
	}
	group, code := "", int64(0)
	if m.planned {
		group, code = "g\"\u2028<é>", 42
		b.Set(0, group, code)
	}
	b.Build()
	r := b.Record(0)
	if !event.StrictJSON(r.Value, event.MaxDepth) || r.Value[0] != '{' {
		tb.Fatalf("record value of %q is no strict JSON object: %q", raw, r.Value)
	}
	got := decodeAny(r.Value).(map[string]any)
	want := ref.value
	id, _ := got["messageId"].(string)
	if ref.id == "" {
		if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
			tb.Fatalf("record value of %q: messageId %q is not a UUIDv7", raw, id)
		}
		want["messageId"] = id
	}
	in := map[string]any{
		"received_at": segNow.Format(event.TimeLayout),
		"ip":          segMeta.IP,
		"ua":          segMeta.UA,
		"client":      segMeta.Client,
		"timestamp":   ref.ts.UTC().Format(event.TimeLayout),
	}
	for k, v := range extra {
		in[k] = v
	}
	if m.planned {
		in["group"], in["code"] = group, json.Number("42")
	}
	want[event.SegmentField] = in
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("record value of %q (type %q) is\n%s, re-parsed\n%v; want\n%v", raw, typ, r.Value, got, want)
	}
	headers := map[string]string{}
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	key = ref.key
	if key == "" {
		key = id
	}
	if r.EventID != id || string(r.Key) != key || headers[event.HeaderEventID] != id || headers[event.HeaderEventName] != ref.name ||
		headers[event.HeaderContentType] != "application/json" || (headers[event.HeaderEventCode] == "42") != m.planned {
		tb.Fatalf("record of %q: EventID %q, key %q, headers %q; want id %q, key %q, name %q", raw, r.EventID, r.Key, headers, id, key, ref.name)
	}
}

// refMessage is what the reference makes of a Segment message.
type refMessage struct {
	why   string         // why it is rejected; "" accepted
	value map[string]any // its record's value, but the inlet object (and the messageId, when id is "")
	id    string         // its messageId, "" when the record gets one
	key   string         // its record's key, "" for the messageId
	name  string         // its name
	props any            // the object the tracking plan checks, nil for none
	ts    time.Time      // inlet.timestamp
}

// refSegment applies the rules of docs/segment.md to msg, a message sent
// to a call implying typ, as encoding/json decodes it.
func refSegment(msg map[string]any, typ string, sb *event.SegmentBatch) refMessage {
	var r refMessage
	str := func(k string) string { s, _ := msg[k].(string); return s }
	if _, ok := msg[event.SegmentField]; ok {
		r.why = "it sends the inlet field"
		return r
	}
	for _, k := range []string{"type", "event", "name", "userId", "anonymousId", "messageId", "groupId", "previousId", "timestamp", "sentAt"} {
		switch msg[k].(type) {
		case nil, string:
		default:
			r.why = k + " is not a string"
			return r
		}
	}
	for _, k := range []string{"context", "properties", "traits", "integrations"} {
		switch msg[k].(type) {
		case nil, map[string]any:
		default:
			r.why = k + " is not an object"
			return r
		}
	}
	r.value = map[string]any{}
	for k, v := range msg {
		r.value[k] = v
	}
	delete(r.value, "writeKey")
	t, sent := msg["type"].(string)
	switch {
	case sent && typ != "" && t != typ:
		r.why = "type against the path"
		return r
	case !sent && typ == "":
		r.why = "no type"
		return r
	case !sent:
		t = typ
		r.value["type"] = typ // an explicit null type is none: the path's replaces it
	}
	r.name = t
	switch t {
	case "track":
		if str("event") == "" {
			r.why = "a track without event"
			return r
		}
		r.name = str("event")
	case "page", "screen":
		if n := str("name"); n != "" {
			r.name = t + ":" + n
		}
	case "identify", "group", "alias":
	default:
		r.why = "type not a call of the spec"
		return r
	}
	if utf8.RuneCountInString(str("event")) > event.MaxNameChars && t == "track" ||
		utf8.RuneCountInString(str("name")) > event.MaxNameChars && (t == "page" || t == "screen") {
		r.why = "name too long"
		return r
	}
	uid, aid := str("userId"), str("anonymousId")
	switch {
	case t == "alias" && (uid == "" || str("previousId") == ""):
		r.why = "an alias without userId and previousId"
		return r
	case uid == "" && aid == "":
		r.why = "no userId or anonymousId"
		return r
	case t == "group" && str("groupId") == "":
		r.why = "a group without groupId"
		return r
	case len(uid) > event.MaxUserBytes || len(aid) > event.MaxUserBytes:
		r.why = "an id too long"
		return r
	}
	if id, ok := msg["messageId"].(string); ok {
		if id == "" || len(id) > event.MaxIDBytes {
			r.why = "messageId empty or too long"
			return r
		}
		r.id = id
	} else {
		delete(r.value, "messageId") // an explicit null messageId is none: inlet's replaces it
	}
	r.key = uid
	if r.key == "" {
		r.key = aid
	}
	r.props = msg["properties"]
	if t == "identify" || t == "group" {
		r.props = msg["traits"]
	}
	if p, _ := r.props.(map[string]any); p == nil {
		r.props = nil
	}

	// The time: timestamp corrected by sentAt (the message's, else the
	// batch's), else the receive time.
	r.ts = segNow
	var (
		ts, sentAt time.Time
		hasTS, ok  bool
	)
	if s, isStr := msg["timestamp"].(string); isStr {
		if ts, hasTS = refSegmentTime(s); !hasTS {
			r.why = "timestamp not a date"
			return r
		}
	}
	if s, isStr := msg["sentAt"].(string); isStr {
		if sentAt, ok = refSegmentTime(s); !ok {
			r.why = "sentAt not a date"
			return r
		}
		ok = !sentAt.IsZero() // the zero instant is none, as SegmentBatch.SentAt has it
	} else if sb != nil && !sb.SentAt.IsZero() {
		sentAt, ok = sb.SentAt, true
	}
	switch {
	case hasTS && ok:
		// receivedAt - (sentAt - timestamp), exact: no Duration to saturate.
		r.ts = time.Unix(segNow.Unix()+ts.Unix()-sentAt.Unix(), int64(segNow.Nanosecond()+ts.Nanosecond()-sentAt.Nanosecond()))
	case hasTS:
		r.ts = ts
	}
	return r
}

// refSegmentTime reads s as the spec's dates: RFC 3339, or ISO 8601
// without a zone (UTC) or with one without a colon.
func refSegmentTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// decodeAny decodes one JSON value, numbers as their text.
func decodeAny(b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic("decoding " + string(b) + ": " + err.Error())
	}
	return v
}
