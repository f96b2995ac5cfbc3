package event_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/event"
)

// fuzzLimits are small so that the fuzzer reaches the limits.
var fuzzLimits = event.Limits{MaxEvents: 8, MaxEventBytes: 512}

// FuzzSplitParse runs a body through the whole pipeline, as a batch (JSON or
// NDJSON) and as a single event, and checks what holds for any input. The seed
// corpus is in testdata/fuzz/FuzzSplitParse.
func FuzzSplitParse(f *testing.F) {
	f.Add([]byte(`[{"event":"a"},{"event":"b","id":"x","uid":"u","props":{"k":1}}]`), false)
	f.Add([]byte(`{"batch":[{"event":"a","ts":"2026-01-02T15:04:05Z","context":{"ip":"x"}}]}`), false)
	f.Add([]byte("{\"event\":\"a\"}\r\n\n{\"event\":\"b\",\"ts\":1767366245000}\n"), true)
	f.Add([]byte(`{"event":"a","anon_id":"n","props":null}`), false)
	f.Add([]byte(`[{"event":"a"},]`), false)
	f.Add([]byte(`{"event":"a","unknown":1}`), true)

	meta := event.Meta{ReceivedAt: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), IP: "192.0.2.7", UA: "fuzz"}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		format := event.FormatJSON
		if ndjson {
			format = event.FormatNDJSON
		}
		for _, layout := range []event.Format{format, event.FormatSingle} {
			items, err := event.Split(body, layout, fuzzLimits.MaxEvents)
			if err != nil {
				checkFuzzBodyError(t, body, err)
				continue
			}
			if n := len(items); n < 1 || n > fuzzLimits.MaxEvents {
				t.Fatalf("Split returned %d items; want 1 to %d", n, fuzzLimits.MaxEvents)
			}
			for _, raw := range items {
				checkFuzzEvent(t, raw, meta)
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

func checkFuzzEvent(tb testing.TB, raw []byte, meta event.Meta) {
	tb.Helper()
	e, bad := event.Parse(raw, fuzzLimits.MaxEventBytes)
	if bad != nil {
		switch bad.Reason {
		case event.ReasonMalformed, event.ReasonNotObject, event.ReasonTooLarge,
			event.ReasonMissingEvent, event.ReasonBadField, event.ReasonUnknownField:
		default:
			tb.Fatalf("Parse(%q): unknown reason %q", raw, bad.Reason)
		}
		if bad.Msg == "" {
			tb.Fatalf("Parse(%q): %s with no message", raw, bad.Reason)
		}
		return
	}
	if !json.Valid(raw) {
		tb.Fatalf("Parse(%q) accepted invalid JSON", raw)
	}
	if e.Event == "" || utf8.RuneCountInString(e.Event) > event.MaxNameChars {
		tb.Fatalf("Parse(%q) accepted event name %q", raw, e.Event)
	}
	if len(e.ID) > event.MaxIDBytes || len(e.UID) > event.MaxUserBytes || len(e.AnonID) > event.MaxUserBytes {
		tb.Fatalf("Parse(%q) accepted an id, uid or anon_id over the limit", raw)
	}
	for _, v := range []json.RawMessage{e.Props, e.Context} {
		if v != nil && (v[0] != '{' || !json.Valid(v)) {
			tb.Fatalf("Parse(%q) accepted props or context %q", raw, v)
		}
	}
	if e.TS != nil && !json.Valid(e.TS) {
		tb.Fatalf("Parse(%q) accepted ts %q", raw, e.TS)
	}

	e.Enrich(meta)
	if e.ID == "" {
		tb.Fatalf("Enrich left %q without an id", raw)
	}
	r, err := e.Record("events")
	if err != nil {
		tb.Fatalf("Record of %q: %v", raw, err)
	}
	if !json.Valid(r.Value) {
		tb.Fatalf("Record of %q: value is not JSON: %q", raw, r.Value)
	}
	var back event.Event
	if err := json.Unmarshal(r.Value, &back); err != nil {
		tb.Fatalf("Record of %q: unmarshaling value %q: %v", raw, r.Value, err)
	}
	if back.Event != e.Event || back.ID != e.ID {
		tb.Fatalf("Record of %q: value has event %q id %q, want %q %q", raw, back.Event, back.ID, e.Event, e.ID)
	}
	if string(r.Key) != e.Key() || r.EventID != e.ID {
		tb.Fatalf("Record of %q: key %q, EventID %q; want %q, %q", raw, r.Key, r.EventID, e.Key(), e.ID)
	}
}
