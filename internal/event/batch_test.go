package event_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

var batchMeta = event.Meta{ReceivedAt: time.Date(2026, 1, 2, 17, 4, 5, 123000000, time.FixedZone("UTC+2", 2*60*60)),
	IP: "192.0.2.7", UA: "curl/8.0 \"quoted\"", Client: "shop"}

// batchTail is batchMeta's enrichment as it ends every record value.
const batchTail = `"received_at":"2026-01-02T15:04:05.123000000Z","ip":"192.0.2.7","ua":"curl/8.0 \"quoted\"","client":"shop"`

// TestBatchRecord: the record value is the event as sent, compacted, with
// null fields (and an empty uid or anon_id) left out, then the enrichment;
// strings and numbers byte for byte as sent.
func TestBatchRecord(t *testing.T) {
	t.Parallel()
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	tests := []struct {
		name      string
		raw       string
		group     string
		code      int64
		value     string // with ID for a generated id
		key, evID string // "ID" for the generated id
		evName    string
	}{
		{
			name:  "client id",
			raw:   `{"event":"a","id":"e1"}`,
			value: `{"event":"a","id":"e1",` + batchTail + `}`,
			key:   "e1", evID: "e1", evName: "a",
		},
		{
			name:  "generated id",
			raw:   `{"event":"a"}`,
			value: `{"event":"a","id":"ID",` + batchTail + `}`,
			key:   "ID", evID: "ID", evName: "a",
		},
		{
			name: "a 30-digit number and others kept as sent",
			raw: `{"event":"a","id":"e1","ts":1767366245000,"props":{"n":123456789012345678901234567890,` +
				`"neg":-0.0,"e":1.50E+300,"big":1e400,"int":-12345678901234567890123}}`,
			value: `{"event":"a","id":"e1","ts":1767366245000,"props":{"n":123456789012345678901234567890,` +
				`"neg":-0.0,"e":1.50E+300,"big":1e400,"int":-12345678901234567890123},` + batchTail + `}`,
			key: "e1", evID: "e1", evName: "a",
		},
		{
			name:  "whitespace dropped, strings kept with their escapes",
			raw:   " {\n \"event\" : \"caf\\u00e9 \\\"x\\\"\" ,\r\n\t\"uid\" : \"u\\/1\", \"props\" : { \"html\" : \"<b>&amp;</b>\", \"a\" : [ 1 , { } , [ ] ] , \"u\" : \"\\u2028 \\ud83d\\ude00\" } } ",
			value: `{"event":"caf\u00e9 \"x\"","uid":"u\/1","props":{"html":"<b>&amp;</b>","a":[1,{},[]],"u":"\u2028 \ud83d\ude00"},"id":"ID",` + batchTail + `}`,
			key:   "u/1", evID: "ID", evName: `café "x"`,
		},
		{
			name:  "nulls and empty users left out",
			raw:   `{"event":"a","id":null,"ts":null,"uid":"","anon_id":"","props":null,"context":null}`,
			value: `{"event":"a","id":"ID",` + batchTail + `}`,
			key:   "ID", evID: "ID", evName: "a",
		},
		{
			name:  "anon_id is the key without uid",
			raw:   `{"anon_id":"n1","event":"a","uid":null,"context":{"group":"g"}}`,
			group: "g", code: 17,
			value: `{"anon_id":"n1","event":"a","context":{"group":"g"},"id":"ID",` + batchTail + `,"group":"g","code":17}`,
			key:   "n1", evID: "ID", evName: "a",
		},
		{
			name:  "group quoted",
			raw:   `{"event":"a","id":"e1"}`,
			group: "g\"\u2028<>", code: 1,
			value: `{"event":"a","id":"e1",` + batchTail + `,"group":"g\"` + "\u2028" + `<>","code":1}`,
			key:   "e1", evID: "e1", evName: "a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := event.NewBatch("events", batchMeta, 1024)
			raw := []byte(tt.raw)
			if bad := b.Add(raw); bad != nil {
				t.Fatalf("Add: %s", bad.Msg)
			}
			if tt.group != "" || tt.code != 0 {
				b.Set(0, tt.group, tt.code)
			}
			b.Build()
			r := b.Record(0)
			b.Release()
			for i := range raw {
				raw[i] = '#' // the record aliases nothing of what was sent
			}
			id := r.EventID
			if strings.Contains(tt.value, `"id":"ID"`) && !uuidRE.MatchString(id) {
				t.Fatalf("generated id %q is not a UUIDv7", id)
			}
			repl := func(s string) string { return strings.ReplaceAll(s, "ID", id) }
			if got, want := string(r.Value), repl(tt.value); got != want {
				t.Errorf("value\n%s, want\n%s", got, want)
			}
			if !json.Valid(r.Value) {
				t.Errorf("value is not JSON")
			}
			if r.Topic != "events" || string(r.Key) != repl(tt.key) || r.EventID != repl(tt.evID) {
				t.Errorf("topic %q key %q EventID %q; want events, %q, %q", r.Topic, r.Key, r.EventID, repl(tt.key), repl(tt.evID))
			}
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			want := map[string]string{event.HeaderEventID: r.EventID, event.HeaderEventName: tt.evName, event.HeaderContentType: "application/json"}
			if tt.code != 0 {
				want[event.HeaderEventCode] = itoa(tt.code)
			}
			if len(headers) != len(want) {
				t.Errorf("headers %q, want %q", headers, want)
			}
			for k, v := range want {
				if headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, headers[k], v)
				}
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestBatchRejects: a rejected event gets no record; the others keep
// their order and their own bytes, also once the Batch is reused.
func TestBatchRejects(t *testing.T) {
	t.Parallel()
	b := event.NewBatch("events", batchMeta, 0)
	items := []string{`{"event":"a","id":"1"}`, `{"EVENT":"b"}`, `{"event":"c","id":"3","props":{"k":1,"k":2}}`, `{"event":"d","id":"4"}`}
	reasons := []event.Reason{"", event.ReasonUnknownField, event.ReasonMalformed, ""}
	for i, raw := range items {
		bad := b.Add([]byte(raw))
		if (bad == nil) != (reasons[i] == "") || (bad != nil && bad.Reason != reasons[i]) {
			t.Fatalf("Add(%s) = %v, want %q", raw, bad, reasons[i])
		}
		if b.Invalid(i) != bad {
			t.Errorf("Invalid(%d) = %v, want Add's %v", i, b.Invalid(i), bad)
		}
	}
	b.Reject(3, &event.Invalid{Reason: event.ReasonForbiddenGroup, Msg: "no"})
	b.Build()
	r := b.Record(0)
	b.Release()
	if r.EventID != "1" || !strings.HasPrefix(string(r.Value), `{"event":"a","id":"1",`) {
		t.Fatalf("record 0 = %s %s", r.EventID, r.Value)
	}
	before := string(r.Value)
	again := event.NewBatch("events", batchMeta, 0) // likely the same Batch again
	if bad := again.Add([]byte(`{"event":"zzzzzzzzzzzzzzzzzzzzzzzzzz","id":"9"}`)); bad != nil {
		t.Fatal(bad)
	}
	again.Build()
	_ = again.Record(0)
	again.Release()
	if string(r.Value) != before {
		t.Errorf("record of a released Batch changed: %s, was %s", r.Value, before)
	}
}

// TestBatchIDsIncrease: generated ids are distinct and increasing, within
// one request (of one time) and across requests.
func TestBatchIDsIncrease(t *testing.T) {
	t.Parallel()
	prev := ""
	for range 3 {
		b := event.NewBatch("events", batchMeta, 0) // the same time each request
		for range 100 {
			if bad := b.Add([]byte(`{"event":"a"}`)); bad != nil {
				t.Fatal(bad)
			}
		}
		b.Build()
		for i := range 100 {
			id := b.Record(i).EventID
			checkUUIDv7(t, id)
			if id <= prev {
				t.Fatalf("id %q after %q; want increasing ids", id, prev)
			}
			prev = id
		}
		b.Release()
	}
}

// TestBatchAllocs: the budget of issue 12, at most 4 allocations per event
// from Frame to the records. Not parallel: it counts the process's
// allocations.
func TestBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random: allocations are not the program's")
	}
	for _, size := range []int{100, 1 << 10, 8 << 10} {
		body := []byte("[")
		for i := range 5 {
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, benchEvent(t, size, i)...)
		}
		body = append(body, ']')
		var items [][]byte
		var r event.Record
		batch := func(done func(*event.Batch)) float64 {
			return testing.AllocsPerRun(50, func() {
				var err error
				if items, err = event.Frame(items[:0], body, event.FormatJSON, 500); err != nil {
					t.Fatal(err)
				}
				b := event.NewBatch("events", batchMeta, 32<<10)
				for _, raw := range items {
					if bad := b.Add(raw); bad != nil {
						t.Fatal(bad)
					}
				}
				b.Build()
				recs := b.RecordSlice(len(items))
				for i := range items {
					recs[i] = b.Record(i)
				}
				r = recs[0]
				done(b)
			})
		}
		released := batch((*event.Batch).Release)
		if per := released / 5; per > 4 {
			t.Errorf("%d-byte events: %.1f allocations per event, want at most 4", size, per)
		}
		// Recycle gives the records' bytes, headers and slice to the next.
		if recycled := batch((*event.Batch).Recycle); recycled > released-3 {
			t.Errorf("%d-byte events: %.0f allocations per batch with Recycle, %.0f with Release: want 3 fewer (the records' bytes, headers and slice)", size, recycled, released)
		}
		_ = r
	}
}
