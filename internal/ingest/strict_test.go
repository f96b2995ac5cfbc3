package ingest

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// TestStrictEvents: what strict JSON rejects (a field name in another
// case, a name twice, invalid UTF-8, a lone surrogate, nesting past
// event.MaxDepth) is a rejected event, dead-lettered, not a refused body;
// the events beside it are stored, a number beyond float64 exactly as sent.
func TestStrictEvents(t *testing.T) {
	t.Parallel()
	items := []string{
		`{"event":"ok","props":{"n":123456789012345678901234567890,"f":-1.50E+300}}`,
		`{"EVENT":"a"}`,
		`{"event":"a","event":"b"}`,
		`{"event":"a","props":{"k":1,"k":2}}`,
		"{\"event\":\"a\xff\"}",
		`{"event":"\ud800"}`,
		`{"event":"a","props":` + strings.Repeat(`{"a":`, event.MaxDepth) + `1` + strings.Repeat("}", event.MaxDepth) + `}`,
		`{"event":"ok2","uid":"u\u00e9"}`,
	}
	want := []struct {
		index  int
		reason event.Reason
		msg    string
	}{
		{1, event.ReasonUnknownField, `unknown field "EVENT"`},
		{2, event.ReasonMalformed, `duplicate field "event" in the event`},
		{3, event.ReasonMalformed, `duplicate field "k" in "/props"`},
		{4, event.ReasonMalformed, "invalid UTF-8"},
		{5, event.ReasonMalformed, "lone UTF-16 surrogate"},
		{6, event.ReasonMalformed, "nest more than 64 deep"},
	}
	for _, layout := range []struct{ name, ct, body string }{
		{"json", "application/json", "[" + strings.Join(items, ",") + "]"},
		{"ndjson", "application/x-ndjson", strings.Join(items, "\n")},
	} {
		t.Run(layout.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			r := h.do(t, "POST", "/v1/batch", []byte(layout.body), "Content-Type", layout.ct)
			if r.status != 200 {
				t.Fatalf("answer %s, want 200", r)
			}
			a := decodeAnswer(t, r)
			if a.Accepted != 2 || len(a.Rejected) != len(want) {
				t.Fatalf("answer %s: want 2 accepted, %d rejected", r, len(want))
			}
			recs := h.sink.records()
			for i, w := range want {
				got := a.Rejected[i]
				if got.Index != w.index || !strings.Contains(got.Error, w.msg) {
					t.Errorf("rejection %d: %+v, want index %d saying %q", i, got, w.index, w.msg)
				}
				if reason, _ := header(recs[w.index], event.HeaderReason); reason != string(w.reason) || recs[w.index].Topic != "events.invalid" {
					t.Errorf("event %d: to %s with reason %q, want events.invalid, %s", w.index, recs[w.index].Topic, reason, w.reason)
				}
			}
			v := string(recs[0].Value)
			if recs[0].Topic != "events" || !strings.Contains(v, `"props":{"n":123456789012345678901234567890,"f":-1.50E+300}`) {
				t.Errorf("record value %s does not keep the numbers as sent", v)
			}
			if f := fields(t, recs[7]); f["uid"] != "u\u00e9" || string(recs[7].Key) != "u\u00e9" {
				t.Errorf("record %s, key %q: want uid and key %q", recs[7].Value, recs[7].Key, "u\u00e9")
			}
		})
	}
}
