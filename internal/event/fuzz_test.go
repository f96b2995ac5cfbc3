package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/inlet-dev/inlet/internal/event"
)

// fuzzLimits are small so that the fuzzer reaches the limits.
var fuzzLimits = event.Limits{MaxEvents: 8, MaxEventBytes: 512}

// FuzzSplitParse runs a body through the whole pipeline, as a batch (JSON or
// NDJSON) and as a single event, and checks what holds for any input: Frame
// and BodyFault answer what Split, a reading of the whole body with
// encoding/json, answers, and each event goes through the one pass
// (Batch), which checkOnePass holds to a reference on encoding/json.
// The seed corpus is in testdata/fuzz/FuzzSplitParse.
func FuzzSplitParse(f *testing.F) {
	f.Add([]byte(`[{"event":"a"},{"event":"b","id":"x","uid":"u","props":{"k":1}}]`), false)
	f.Add([]byte(`{"batch":[{"event":"a","ts":"2026-01-02T15:04:05Z","context":{"ip":"x"}}]}`), false)
	f.Add([]byte("{\"event\":\"a\"}\r\n\n{\"event\":\"b\",\"ts\":1767366245000}\n"), true)
	f.Add([]byte(`{"event":"a","anon_id":"n","props":null}`), false)
	f.Add([]byte(`[{"event":"a"},]`), false)
	f.Add([]byte(`{"event":"a","unknown":1}`), true)
	f.Add([]byte(`{"EVENT":"a"}`), true)
	f.Add([]byte(`[{"event":"a","event":"b"},{"event":"a","props":{"k":1,"k":2}}]`), false)
	f.Add([]byte("{\"event\":\"a\xff\"}\n{\"event\":\"\\ud800\"}\n{\"event\":\"\\ud83d\\ude00\"}"), true)
	f.Add([]byte(`{"event":"a","props":{"n":123456789012345678901234567890,"f":-1.50e+300,"s":"\u00e9\n"}}`), false)
	f.Add([]byte(`{"event":"a","context":{"group":"g","GROUP":1,"x":{"group":2}}}`), true)
	f.Add([]byte(`{"event":"a","props":{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`), false)
	f.Add([]byte(` { "batch" : [ {"event":"a", "uid":"", "anon_id":null, "ts":null} ] } `), false)
	// Faults inside an event, which BodyFault finds: a literal and a number
	// cut by their delimiter, an object's, a string's, the end of a single
	// event.
	f.Add([]byte(`[{"event":"a"},tru, 1x]`), false)
	f.Add([]byte("\xef\xbb\xbf{\"batch\":[{\"event\":\"a\",\"props\":{\"k\":}},{\"event\":\"\x01\"}]}"), false)
	f.Add([]byte(`{"event":"a","props":{"k":1}`), false)

	meta := event.Meta{ReceivedAt: fuzzNow, IP: "192.0.2.7", UA: "fuzz", Client: "c"}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		format := event.FormatJSON
		if ndjson {
			format = event.FormatNDJSON
		}
		for _, layout := range []event.Format{format, event.FormatSingle} {
			items, err := event.Split(body, layout, fuzzLimits.MaxEvents)
			framed, ferr := event.Frame(nil, body, layout, fuzzLimits.MaxEvents)
			checkFrame(t, body, layout, items, err, framed, ferr)
			for _, raw := range framed {
				checkOnePass(t, raw, meta, ndjson)
			}
			if err != nil {
				checkFuzzBodyError(t, body, err)
				continue
			}
			if n := len(items); n < 1 || n > fuzzLimits.MaxEvents {
				t.Fatalf("Split returned %d items; want 1 to %d", n, fuzzLimits.MaxEvents)
			}
		}
	})
}

func checkFuzzBodyError(tb testing.TB, body []byte, err error) {
	tb.Helper()
	var be *event.BodyError
	if !errors.As(err, &be) {
		tb.Fatalf("Split error %T %v is not a *BodyError", err, err)
	}
	if !errors.Is(err, event.ErrMalformed) && !errors.Is(err, event.ErrEmpty) && !errors.Is(err, event.ErrTooManyEvents) {
		tb.Fatalf("Split error %v wraps none of the sentinels", err)
	}
	if be.Offset < -1 || be.Offset > int64(len(body)) {
		tb.Fatalf("Split error offset %d is outside the %d-byte body", be.Offset, len(body))
	}
	if be.Msg == "" {
		tb.Fatal("Split error has no message")
	}
}

// checkFrame: Frame cuts every body Split cuts into the same events, and
// fails as Split fails, but for a body whose faults are inside an event,
// which the one pass rejects (as malformed_json or too_large; any rejection
// of the single event of /v1/track): there the first event whose rejection
// BodyFault finds the fault in gives Split's error, to the byte.
func checkFrame(tb testing.TB, body []byte, layout event.Format, items [][]byte, err error, framed [][]byte, ferr error) {
	tb.Helper()
	if err == nil && ferr == nil {
		if len(framed) != len(items) {
			tb.Fatalf("Frame(%q) cut %d events, Split %d", body, len(framed), len(items))
		}
		for i := range items {
			if !bytes.Equal(framed[i], items[i]) {
				tb.Fatalf("Frame(%q) event %d is %q, Split's %q", body, i, framed[i], items[i])
			}
		}
	}
	if ferr != nil {
		if err == nil || ferr.Error() != err.Error() {
			tb.Fatalf("Frame(%q): %v; Split: %v", body, ferr, err)
		}
		return
	}
	// With the limits the server has: an event too large to be read hides
	// its insides as well as a malformed one does.
	b := event.NewBatch("events", event.Meta{}, fuzzLimits.MaxEventBytes)
	defer b.Release()
	var fault error
	for _, raw := range framed {
		if fault = event.BodyFault(body, raw, layout, b.Add(raw)); fault != nil {
			break
		}
	}
	switch {
	case (fault == nil) != (err == nil):
		tb.Fatalf("Frame(%q) cut %q, BodyFault found %v; Split: %v", body, framed, fault, err)
	case err == nil:
	case fault.Error() != err.Error() || !reflect.DeepEqual(fault, err):
		tb.Fatalf("Frame(%q): BodyFault %#v; Split: %#v", body, fault, err)
	}
}

// fuzzNow is the fuzz meta's time, which bounds ts.
var fuzzNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// checkOnePass is the oracle of the one pass: Batch accepts raw exactly when
// the reference does (legacy Parse on encoding/json, with names matched
// exactly, no duplicate names, valid UTF-8, no lone surrogates, MaxDepth),
// for the same reason; and the record value of an accepted event re-parses
// to the values sent, numbers as sent, plus the enrichment.
func checkOnePass(tb testing.TB, raw []byte, meta event.Meta, planned bool) {
	tb.Helper()
	b := event.NewBatch("events", meta, fuzzLimits.MaxEventBytes)
	defer b.Release()
	bad := b.Add(raw)
	legacy, lbad := event.LegacyParseAt(raw, fuzzLimits.MaxEventBytes, meta.ReceivedAt)
	strict := event.StrictJSON(firstValue(raw), event.MaxDepth)
	switch {
	case lbad != nil && lbad.Reason == event.ReasonTooLarge:
		if bad == nil || bad.Reason != event.ReasonTooLarge {
			tb.Fatalf("Add(%q) = %v, want too_large", raw, bad)
		}
		return
	case !strict:
		if bad == nil || bad.Reason != event.ReasonMalformed {
			tb.Fatalf("Add(%q) = %v, want malformed_json: not strict JSON", raw, bad)
		}
		return
	case !exactNames(firstValue(raw)):
		// The reference took the name for a field; the one pass finds it
		// unknown, which it reports before data after the event.
		if bad == nil {
			tb.Fatalf("Add(%q) accepted a field name in another case", raw)
		}
		return
	case lbad != nil && lbad.Reason == event.ReasonMalformed:
		if bad == nil || bad.Reason != event.ReasonMalformed {
			tb.Fatalf("Add(%q) = %v, want malformed_json as the reference: %v", raw, bad, lbad)
		}
		return
	case (bad == nil) != (lbad == nil) || (bad != nil && bad.Reason != lbad.Reason):
		tb.Fatalf("Add(%q) = %v, the reference %v", raw, bad, lbad)
	case bad != nil:
		return
	}

	group, code := "", int64(0)
	if planned {
		group, code = "g\"\u2028<é>", 42
		b.Set(0, group, code)
	}
	b.Build()
	r := b.Record(0)
	if !event.StrictJSON(r.Value, event.MaxDepth) || r.Value[0] != '{' {
		tb.Fatalf("record value of %q is no strict JSON object: %q", raw, r.Value)
	}
	got := decodeNumbers(tb, r.Value)
	want := decodeNumbers(tb, raw)
	for _, k := range []string{"ts", "props", "context", "id", "uid", "anon_id"} {
		if v, ok := want[k]; ok && (v == nil || ((k == "uid" || k == "anon_id") && v == "")) {
			delete(want, k) // null is absent, and so are an empty uid and anon_id
		}
	}
	id, _ := got["id"].(string)
	if _, ok := want["id"]; !ok {
		if u, err := uuid.Parse(id); err != nil || u.Version() != 7 {
			tb.Fatalf("record value of %q: id %q is not a UUIDv7", raw, id)
		}
		want["id"] = id
	}
	want["received_at"] = meta.ReceivedAt.UTC().Format(event.TimeLayout)
	want["ip"], want["ua"], want["client"] = meta.IP, meta.UA, meta.Client
	if planned {
		want["group"], want["code"] = group, json.Number("42")
	}
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("record value of %q is\n%q, re-parsed\n%v, want\n%v", raw, r.Value, got, want)
	}
	headers := map[string]string{}
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	key := legacy.UID
	if key == "" {
		key = legacy.AnonID
	}
	if key == "" {
		key = id
	}
	if r.EventID != id || string(r.Key) != key || headers[event.HeaderEventID] != id ||
		headers[event.HeaderEventName] != legacy.Event || headers[event.HeaderContentType] != "application/json" {
		tb.Fatalf("record of %q: EventID %q, key %q, headers %q; want id %q, key %q, name %q", raw, r.EventID, r.Key, headers, id, key, legacy.Event)
	}
	if planned != (headers[event.HeaderEventCode] == "42") {
		tb.Fatalf("record of %q: headers %q, code %d", raw, headers, code)
	}
}

// exactNames reports whether every top-level name of raw, an object (or
// not), is one of an event's fields as spelled.
func exactNames(raw []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return true // not an object
	}
	for k := range m {
		switch k {
		case "event", "id", "ts", "uid", "anon_id", "props", "context":
		default:
			if legacyKnown(k) {
				return false
			}
		}
	}
	return true
}

// legacyKnown reports whether encoding/json matched k to a field.
func legacyKnown(k string) bool {
	for _, f := range []string{"event", "id", "ts", "uid", "anon_id", "props", "context"} {
		if strings.EqualFold(k, f) {
			return true
		}
	}
	return false
}

// decodeNumbers decodes a JSON object with numbers as their text.
func decodeNumbers(tb testing.TB, b []byte) map[string]any {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("decoding %q: %v", b, err)
	}
	return m
}

// firstValue is raw up to the end of its first JSON value (all of raw when
// it has none): where the strict rules apply; what follows is the
// reference's.
func firstValue(raw []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return raw
	}
	return raw[:dec.InputOffset()]
}
