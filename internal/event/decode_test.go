package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/inlet-dev/inlet/internal/event"
)

// batchOf returns n small events laid out as f lays out a batch.
func batchOf(tb testing.TB, n int, f event.Format) []byte {
	tb.Helper()
	var b bytes.Buffer
	if f == event.FormatJSON {
		b.WriteByte('[')
	}
	for i := range n {
		if i > 0 && f == event.FormatJSON {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"event":"e%d"}`, i)
		if f == event.FormatNDJSON {
			b.WriteByte('\n')
		}
	}
	if f == event.FormatJSON {
		b.WriteByte(']')
	}
	return b.Bytes()
}

func TestSplit(t *testing.T) {
	t.Parallel()
	limit := event.DefaultLimits.MaxEvents
	// Offsets are the 0-based index of the offending byte (of a syntax error,
	// or of a wrong top-level value), or the body's length when it ended early.
	tests := []struct {
		name   string
		body   string
		format event.Format
		max    int
		want   []string // items, when Split succeeds
		wantN  int      // or only their number

		wantErr    error // sentinel, when Split fails
		wantOffset int64
		wantMsg    string // a substring of the message, when Split fails
		// offsetNotInMsg: the message does not repeat the offset.
		offsetNotInMsg bool
	}{
		{
			name: "json array",
			body: `[{"event":"a"},{"event":"b","props":{"k":[1,2]}}]`,
			max:  limit,
			want: []string{`{"event":"a"}`, `{"event":"b","props":{"k":[1,2]}}`},
		},
		{
			name: "json array with whitespace",
			body: " \r\n[ {\"event\":\"a\"} ,\n\t{\"event\":\"b\"} ]\n",
			max:  limit,
			want: []string{`{"event":"a"}`, `{"event":"b"}`},
		},
		{
			name: "json array items are not checked",
			body: `[1,"x",null,[]]`,
			max:  limit,
			want: []string{`1`, `"x"`, `null`, `[]`},
		},
		{
			name: "batch object",
			body: `{"batch":[{"event":"a"},{"event":"b"}]}`,
			max:  limit,
			want: []string{`{"event":"a"}`, `{"event":"b"}`},
		},
		{
			name:   "ndjson with blank lines and crlf",
			body:   "\n{\"event\":\"a\"}\r\n\r\n   \n{\"event\":\"b\"}\n\t\n{\"event\":\"c\"}\r\n",
			format: event.FormatNDJSON,
			max:    limit,
			want:   []string{`{"event":"a"}`, `{"event":"b"}`, `{"event":"c"}`},
		},
		{
			name:   "ndjson without final newline",
			body:   "{\"event\":\"a\"}\n{\"event\":\"b\"}",
			format: event.FormatNDJSON,
			max:    limit,
			want:   []string{`{"event":"a"}`, `{"event":"b"}`},
		},
		{
			name:   "ndjson lines are not checked",
			body:   "{\"event\":\n[1]\n",
			format: event.FormatNDJSON,
			max:    limit,
			want:   []string{`{"event":`, `[1]`},
		},
		{
			name:   "single",
			body:   ` {"event":"a","props":{}}` + "\n",
			format: event.FormatSingle,
			max:    limit,
			want:   []string{` {"event":"a","props":{}}` + "\n"},
		},
		{
			name:  "no limit",
			body:  string(batchOf(t, limit+1, event.FormatJSON)),
			max:   0,
			wantN: limit + 1,
		},
		{
			name: "exactly the limit",
			body: string(batchOf(t, 3, event.FormatJSON)),
			max:  3,
			want: []string{`{"event":"e0"}`, `{"event":"e1"}`, `{"event":"e2"}`},
		},

		// Empty bodies.
		{name: "json empty body", body: "", max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "empty body"},
		{name: "json blank body", body: " \r\n\t", max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "empty body"},
		{name: "json empty array", body: `[]`, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "no events"},
		{name: "json empty batch", body: `{"batch":[]}`, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "no events"},
		{name: "ndjson empty body", body: "", format: event.FormatNDJSON, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "no events"},
		{name: "ndjson blank lines", body: "\n\r\n  \n", format: event.FormatNDJSON, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "no events"},
		{name: "single empty body", body: "", format: event.FormatSingle, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "empty body"},
		{name: "single blank body", body: "\n ", format: event.FormatSingle, max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "empty body"},

		// Too many events.
		{
			name: "json array over the limit",
			body: string(batchOf(t, limit+1, event.FormatJSON)),
			max:  limit, wantErr: event.ErrTooManyEvents, wantOffset: -1, wantMsg: fmt.Sprintf("more than %d events", limit),
		},
		{
			name: "batch object over the limit",
			body: `{"batch":` + string(batchOf(t, 4, event.FormatJSON)) + `}`,
			max:  3, wantErr: event.ErrTooManyEvents, wantOffset: -1, wantMsg: "more than 3 events",
		},
		{
			name:   "ndjson over the limit",
			body:   string(batchOf(t, limit+1, event.FormatNDJSON)),
			format: event.FormatNDJSON,
			max:    limit, wantErr: event.ErrTooManyEvents, wantOffset: -1, wantMsg: fmt.Sprintf("more than %d events", limit),
		},
		{
			name:   "ndjson far over the limit",
			body:   string(batchOf(t, 10*3, event.FormatNDJSON)),
			format: event.FormatNDJSON,
			max:    3, wantErr: event.ErrTooManyEvents, wantOffset: -1, wantMsg: "more than 3 events",
		},

		// Malformed JSON: the offset is in the error and in its message.
		{
			name: "json trailing comma",
			body: `[{"event":"a"},]`, // ']' is byte 15
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 15, wantMsg: "invalid character ']'",
		},
		{
			name: "json truncated array",
			body: `[{"event":"a"}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 14, wantMsg: "unexpected end of JSON input",
		},
		{
			name: "json bad token inside event",
			body: "[\n{\"event\":x}]", // 'x' is byte 11
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 11, wantMsg: "invalid character 'x'",
		},
		{
			name: "json data after array",
			body: `[{"event":"a"}] x`, // 'x' is byte 16
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 16, wantMsg: "after top-level value",
		},
		{
			name: "batch object malformed",
			body: `{"batch":[{"event":"a"}}`, // the second '}' is byte 23
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 23, wantMsg: "after array element",
		},
		{
			name:   "single malformed",
			body:   `{"event":"a",}`, // '}' is byte 13
			format: event.FormatSingle,
			max:    limit, wantErr: event.ErrMalformed, wantOffset: 13, wantMsg: "invalid character '}'",
		},
		{
			name:   "single two objects",
			body:   `{"event":"a"}{"event":"b"}`, // the second '{' is byte 13
			format: event.FormatSingle,
			max:    limit, wantErr: event.ErrMalformed, wantOffset: 13, wantMsg: "after top-level value",
		},

		// Wrong top-level types.
		{name: "json string", body: `"x"`, max: limit, wantErr: event.ErrMalformed, wantOffset: 0, wantMsg: "expected a JSON array"},
		{name: "json number after blanks", body: "  \n42", max: limit, wantErr: event.ErrMalformed, wantOffset: 3, wantMsg: "expected a JSON array"},
		{name: "json true", body: `true`, max: limit, wantErr: event.ErrMalformed, wantOffset: 0, wantMsg: "expected a JSON array"},
		{name: "json null", body: `null`, max: limit, wantErr: event.ErrMalformed, wantOffset: 0, wantMsg: "expected a JSON array"},
		{name: "json object without batch", body: ` {"event":"a"}`, max: limit, wantErr: event.ErrMalformed, wantOffset: 2, wantMsg: `unknown key "event" at byte offset 2: expected a JSON array of events or an object with only a "batch" array (send one event to /v1/track)`},
		{name: "json empty object", body: ` {}`, max: limit, wantErr: event.ErrMalformed, wantOffset: 1, wantMsg: `no "batch"`, offsetNotInMsg: true},
		{name: "json batch null", body: `{"batch":null}`, max: limit, wantErr: event.ErrMalformed, wantOffset: 0, wantMsg: `no "batch"`, offsetNotInMsg: true},
		{
			name: "json batch object",
			body: `{"batch":{}}`, // the offset is where the value starts
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 9, wantMsg: `"batch" must be an array of events, got object`,
		},
		{
			name: "json batch string",
			body: `{"batch":"x"}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 9, wantMsg: `"batch" must be an array of events, got string`,
		},
		// The wrapper object takes "batch" and nothing else (it used to drop
		// other keys silently, and to take the last of two "batch").
		{
			name: "batch with another key after",
			body: `{"batch":[{"event":"a"}], "foo":1}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 26, wantMsg: `unknown key "foo" at byte offset 26`,
		},
		{
			name: "batch with another key before",
			body: `{"sent_at":1,"batch":[{"event":"a"}]}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 1, wantMsg: `unknown key "sent_at" at byte offset 1`,
		},
		{
			name: "batch key in another case",
			body: `{"Batch":[{"event":"a"}]}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 1, wantMsg: `unknown key "Batch"`,
		},
		{
			name: "batch twice",
			body: `{"batch":[{"event":"a"}],"batch":[{"event":"b"}]}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 25, wantMsg: `"batch" appears twice, again at byte offset 25`,
		},
		{
			name: "batch then malformed",
			body: `{"batch":[{"event":"a"}],}`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 25, wantMsg: "malformed JSON at byte offset 25",
		},
		{
			name: "data after the array",
			body: `[{"event":"a"}] x`,
			max:  limit, wantErr: event.ErrMalformed, wantOffset: 16, wantMsg: "malformed JSON at byte offset 16",
		},

		// A leading UTF-8 byte order mark is skipped; offsets count it.
		{name: "bom json array", body: "\xef\xbb\xbf" + `[{"event":"a"}]`, max: limit, want: []string{`{"event":"a"}`}},
		{name: "bom batch object", body: "\xef\xbb\xbf" + `{"batch":[{"event":"a"}]}`, max: limit, want: []string{`{"event":"a"}`}},
		{name: "bom ndjson", body: "\xef\xbb\xbf" + "{\"event\":\"a\"}\n{\"event\":\"b\"}", format: event.FormatNDJSON, max: limit, want: []string{`{"event":"a"}`, `{"event":"b"}`}},
		{name: "bom single", body: "\xef\xbb\xbf" + `{"event":"a"}`, format: event.FormatSingle, max: limit, want: []string{`{"event":"a"}`}},
		{name: "bom offset", body: "\xef\xbb\xbf" + `[{"event":"a"}}`, max: limit, wantErr: event.ErrMalformed, wantOffset: 17, wantMsg: "malformed JSON at byte offset 17"},
		{name: "bom only", body: "\xef\xbb\xbf", max: limit, wantErr: event.ErrEmpty, wantOffset: -1, wantMsg: "empty body"},

		{
			name:   "single array",
			body:   ` [{"event":"a"}]`,
			format: event.FormatSingle,
			max:    limit, wantErr: event.ErrMalformed, wantOffset: 1, wantMsg: "send arrays to /v1/batch",
		},
		{
			name:   "single string",
			body:   `"a"`,
			format: event.FormatSingle,
			max:    limit, wantErr: event.ErrMalformed, wantOffset: 0, wantMsg: "expected one JSON event object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items, err := event.Split([]byte(tt.body), tt.format, tt.max)
			if tt.wantErr != nil {
				checkBodyError(t, err, tt.wantErr, tt.wantOffset, tt.wantMsg, !tt.offsetNotInMsg)
				if items != nil {
					t.Errorf("items = %q, want nil", items)
				}
				return
			}
			if err != nil {
				t.Fatalf("Split: %v", err)
			}
			if tt.wantN > 0 {
				if len(items) != tt.wantN {
					t.Errorf("got %d items, want %d", len(items), tt.wantN)
				}
				return
			}
			got := make([]string, len(items))
			for i, it := range items {
				got[i] = string(it)
			}
			if !equalStrings(got, tt.want) {
				t.Errorf("items = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSplitStopsPastMaxEvents: a JSON array of millions of tiny items (8 MiB
// of [0,0,0,...], what 8 KB of gzip inflates to) is refused at the item past
// the limit, allocating a small multiple of maxEvents, not one value per
// item (it took 480 MB per request). Not parallel: it reads the
// process's allocation counter.
func TestSplitStopsPastMaxEvents(t *testing.T) {
	zeros := make([]byte, 0, 8<<20)
	zeros = append(zeros, '[')
	for len(zeros) < 8<<20-2 {
		zeros = append(zeros, '0', ',')
	}
	zeros = append(zeros, '0', ']')
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"array", zeros},
		{"batch object", append(append([]byte(`{"batch":`), zeros...), '}')},
		{"malformed after the limit", append(zeros[:len(zeros)-1:len(zeros)-1], '}')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			items, err := event.Split(tc.body, event.FormatJSON, 500)
			runtime.ReadMemStats(&after)
			checkBodyError(t, err, event.ErrTooManyEvents, -1, "more than 500 events", false)
			if items != nil {
				t.Errorf("got %d items with the error", len(items))
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<10 {
				t.Errorf("Split allocated %d bytes for a refused %d-byte body, want under 256 KiB", alloc, len(tc.body))
			}
		})
	}
}

// checkBodyError checks that err is a *BodyError wrapping want, at offset,
// whose message contains msg and, when offsetInMsg, the offset.
func checkBodyError(tb testing.TB, err, want error, offset int64, msg string, offsetInMsg bool) {
	tb.Helper()
	if !errors.Is(err, want) {
		tb.Fatalf("err = %v, want errors.Is %v", err, want)
	}
	var be *event.BodyError
	if !errors.As(err, &be) {
		tb.Fatalf("err = %T, want *event.BodyError", err)
	}
	if be.Offset != offset {
		tb.Errorf("Offset = %d, want %d (%s)", be.Offset, offset, be.Msg)
	}
	if offset >= 0 && offsetInMsg {
		if at := fmt.Sprintf("byte offset %d", offset); !strings.Contains(be.Error(), at) {
			tb.Errorf("message %q does not say %q", be.Error(), at)
		}
	}
	if !strings.Contains(be.Error(), msg) {
		tb.Errorf("message %q does not contain %q", be.Error(), msg)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSplitAliasesBody(t *testing.T) {
	t.Parallel()
	body := []byte("{\"event\":\"a\"}\n")
	items, err := event.Split(body, event.FormatNDJSON, 10)
	if err != nil {
		t.Fatal(err)
	}
	body[1] = 'X'
	if items[0][1] != 'X' {
		t.Errorf("item %q does not alias the body", items[0])
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	const limit = 1024
	name128 := strings.Repeat("é", event.MaxNameChars) // 256 bytes, 128 characters
	tests := []struct {
		name string
		raw  string

		want       event.Event              // when Parse succeeds
		wantReason event.Reason             // when Parse fails
		wantMsg    []string                 // substrings of the message, when Parse fails
		bug        string                   // a known bug: the case is skipped until it is fixed
		check      func(*event.Event) error // more checks on success
	}{
		{
			name: "minimal",
			raw:  `{"event":"signup"}`,
			want: event.Event{Event: "signup"},
		},
		{
			name: "every field",
			raw: `{"event":"purchase","id":"evt-1","ts":1767366245000,"uid":"u1","anon_id":"a1",` +
				`"props":{"sku":"x","qty":2},"context":{"page":{"path":"/"}}}`,
			want: event.Event{
				Event: "purchase", ID: "evt-1", TS: json.RawMessage(`1767366245000`), UID: "u1", AnonID: "a1",
				Props: json.RawMessage(`{"sku":"x","qty":2}`), Context: json.RawMessage(`{"page":{"path":"/"}}`),
			},
		},
		{
			name: "whitespace around and inside",
			raw:  " \n{ \"event\" : \"a\" , \"props\" : { \"k\" : 1 } }\r\n",
			want: event.Event{Event: "a", Props: json.RawMessage(`{"k":1}`)}, // compacted in the record
		},
		{
			name: "at the size limit",
			raw:  `{"event":"a","props":{"p":"` + strings.Repeat("x", limit-len(`{"event":"a","props":{"p":""}}`)) + `"}}`,
			check: func(e *event.Event) error {
				if e.Event != "a" || len(e.Props) != limit-len(`{"event":"a","props":}`) {
					return fmt.Errorf("got event %q with %d bytes of props", e.Event, len(e.Props))
				}
				return nil
			},
		},

		// malformed_json
		{name: "empty", raw: "", wantReason: event.ReasonMalformed, wantMsg: []string{"empty event"}},
		{name: "blank", raw: " \r\n", wantReason: event.ReasonMalformed, wantMsg: []string{"empty event"}},
		{name: "truncated object", raw: `{"event":"a"`, wantReason: event.ReasonMalformed, wantMsg: []string{"byte offset 12", "unexpected end"}},
		{name: "trailing comma", raw: `{"event":"a",}`, wantReason: event.ReasonMalformed, wantMsg: []string{"byte offset 13", "invalid character '}'"}},
		{name: "bad literal", raw: `{"event":tru}`, wantReason: event.ReasonMalformed, wantMsg: []string{"byte offset 12"}},
		{name: "data after the object", raw: `{"event":"a"} {}`, wantReason: event.ReasonMalformed, wantMsg: []string{"byte offset 14", "data after the event object"}},
		{name: "truncated array", raw: `[1,`, wantReason: event.ReasonMalformed, wantMsg: []string{"byte offset 3"}},
		{
			name: "closing bracket after the object", raw: `{"event":"a"}]`,
			wantReason: event.ReasonMalformed, wantMsg: []string{"data after the event object"},
		},
		{
			name: "closing brace and garbage after the object", raw: `{"event":"a"}}x`,
			wantReason: event.ReasonMalformed, wantMsg: []string{"data after the event object"},
		},

		// not_object
		{name: "array", raw: `[{"event":"a"}]`, wantReason: event.ReasonNotObject, wantMsg: []string{"got array"}},
		{name: "string", raw: ` "a"`, wantReason: event.ReasonNotObject, wantMsg: []string{"got string"}},
		{name: "number", raw: `-1`, wantReason: event.ReasonNotObject, wantMsg: []string{"got number"}},
		{name: "boolean", raw: `false`, wantReason: event.ReasonNotObject, wantMsg: []string{"got boolean"}},
		{name: "null", raw: `null`, wantReason: event.ReasonNotObject, wantMsg: []string{"got null"}},

		// too_large
		{
			name:       "over the size limit",
			raw:        `{"event":"a","props":{"p":"` + strings.Repeat("x", limit+1-len(`{"event":"a","props":{"p":""}}`)) + `"}}`,
			wantReason: event.ReasonTooLarge,
			wantMsg:    []string{fmt.Sprintf("%d bytes", limit+1), fmt.Sprintf("limit is %d", limit)},
		},
		{name: "over the size limit and malformed", raw: "[" + strings.Repeat(" ", limit), wantReason: event.ReasonTooLarge},

		// missing_event
		{name: "no fields", raw: `{}`, wantReason: event.ReasonMissingEvent, wantMsg: []string{`"event" is required`}},
		{name: "no event", raw: `{"id":"x","props":{}}`, wantReason: event.ReasonMissingEvent, wantMsg: []string{`"event" is required`}},
		{name: "event empty", raw: `{"event":""}`, wantReason: event.ReasonMissingEvent, wantMsg: []string{`"event" is required`}},
		{name: "event null", raw: `{"event":null}`, wantReason: event.ReasonMissingEvent, wantMsg: []string{`"event" is required`}},

		// bad_field: event
		{name: "event number", raw: `{"event":1}`, wantReason: event.ReasonBadField, wantMsg: []string{`"event" must be a string, got number`}},
		{name: "event array", raw: `{"event":["a"]}`, wantReason: event.ReasonBadField, wantMsg: []string{`"event" must be a string, got array`}},
		{name: "event object", raw: `{"event":{}}`, wantReason: event.ReasonBadField, wantMsg: []string{`"event" must be a string, got object`}},
		{
			name:       "event 129 characters",
			raw:        `{"event":"` + strings.Repeat("a", event.MaxNameChars+1) + `"}`,
			wantReason: event.ReasonBadField,
			wantMsg:    []string{`"event" is 129 characters`, "limit is 128"},
		},
		{
			name:       "event 129 multi-byte characters",
			raw:        `{"event":"` + name128 + `é"}`,
			wantReason: event.ReasonBadField,
			wantMsg:    []string{`"event" is 129 characters`},
		},
		{name: "event 128 characters", raw: `{"event":"` + strings.Repeat("a", 128) + `"}`, want: event.Event{Event: strings.Repeat("a", 128)}},
		{name: "event 128 multi-byte characters", raw: `{"event":"` + name128 + `"}`, want: event.Event{Event: name128}},
		{name: "event 128 four-byte characters", raw: `{"event":"` + strings.Repeat("😀", 128) + `"}`, want: event.Event{Event: strings.Repeat("😀", 128)}},

		// bad_field: id
		{name: "id number", raw: `{"event":"a","id":5}`, wantReason: event.ReasonBadField, wantMsg: []string{`"id" must be a string, got number`}},
		{name: "id empty", raw: `{"event":"a","id":""}`, wantReason: event.ReasonBadField, wantMsg: []string{`"id" must be a non-empty string`}},
		{
			name:       "id 129 bytes",
			raw:        `{"event":"a","id":"` + strings.Repeat("i", event.MaxIDBytes+1) + `"}`,
			wantReason: event.ReasonBadField,
			wantMsg:    []string{`"id"`, "at most 128 bytes"},
		},
		{name: "id 128 bytes", raw: `{"event":"a","id":"` + strings.Repeat("i", 128) + `"}`, want: event.Event{Event: "a", ID: strings.Repeat("i", 128)}},
		{name: "id null", raw: `{"event":"a","id":null}`, want: event.Event{Event: "a"}},

		// bad_field: uid, anon_id
		{name: "uid number", raw: `{"event":"a","uid":7}`, wantReason: event.ReasonBadField, wantMsg: []string{`"uid" must be a string, got number`}},
		{
			name:       "uid 257 bytes",
			raw:        `{"event":"a","uid":"` + strings.Repeat("u", event.MaxUserBytes+1) + `"}`,
			wantReason: event.ReasonBadField,
			wantMsg:    []string{`"uid" is 257 bytes`, "limit is 256"},
		},
		{name: "uid 256 bytes", raw: `{"event":"a","uid":"` + strings.Repeat("u", 256) + `"}`, want: event.Event{Event: "a", UID: strings.Repeat("u", 256)}},
		{name: "anon_id boolean", raw: `{"event":"a","anon_id":true}`, wantReason: event.ReasonBadField, wantMsg: []string{`"anon_id" must be a string, got bool`}},
		{
			name:       "anon_id 257 bytes",
			raw:        `{"event":"a","anon_id":"` + strings.Repeat("n", event.MaxUserBytes+1) + `"}`,
			wantReason: event.ReasonBadField,
			wantMsg:    []string{`"anon_id" is 257 bytes`, "limit is 256"},
		},
		{name: "anon_id 256 bytes", raw: `{"event":"a","anon_id":"` + strings.Repeat("n", 256) + `"}`, want: event.Event{Event: "a", AnonID: strings.Repeat("n", 256)}},

		// bad_field: props, context
		{name: "props array", raw: `{"event":"a","props":[1]}`, wantReason: event.ReasonBadField, wantMsg: []string{`"props" must be a JSON object, got array`}},
		{name: "props string", raw: `{"event":"a","props":"{}"}`, wantReason: event.ReasonBadField, wantMsg: []string{`"props" must be a JSON object, got string`}},
		{name: "props number", raw: `{"event":"a","props":0}`, wantReason: event.ReasonBadField, wantMsg: []string{`"props" must be a JSON object, got number`}},
		{name: "props boolean", raw: `{"event":"a","props":true}`, wantReason: event.ReasonBadField, wantMsg: []string{`"props" must be a JSON object, got boolean`}},
		{name: "props null is absent", raw: `{"event":"a","props":null}`, want: event.Event{Event: "a"}},
		{name: "props empty object", raw: `{"event":"a","props":{}}`, want: event.Event{Event: "a", Props: json.RawMessage(`{}`)}},
		{name: "context array", raw: `{"event":"a","context":[]}`, wantReason: event.ReasonBadField, wantMsg: []string{`"context" must be a JSON object, got array`}},
		{name: "context string", raw: `{"event":"a","context":"x"}`, wantReason: event.ReasonBadField, wantMsg: []string{`"context" must be a JSON object, got string`}},
		{name: "context null is absent", raw: `{"event":"a","context":null}`, want: event.Event{Event: "a"}},

		// ts
		{name: "ts milliseconds", raw: `{"event":"a","ts":1767366245000}`, want: event.Event{Event: "a", TS: json.RawMessage(`1767366245000`)}},
		{name: "ts lowest", raw: `{"event":"a","ts":946684800000}`, want: event.Event{Event: "a", TS: json.RawMessage(`946684800000`)}},
		{name: "ts a year ahead", raw: `{"event":"a","ts":1811851200000}`, want: event.Event{Event: "a", TS: json.RawMessage(`1811851200000`)}},
		// Numbers a consumer cannot read as an int64 of milliseconds, or
		// that are no plausible event time, are rejected (they were kept).
		{name: "ts negative", raw: `{"event":"a","ts":-1}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" -1 must be milliseconds since the epoch between 2000-01-01T00:00:00Z and 2027-06-01T12:00:00Z`}},
		{name: "ts before 2000", raw: `{"event":"a","ts":946684799999}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 946684799999 must be milliseconds`}},
		{name: "ts past a year ahead", raw: `{"event":"a","ts":1811851200001}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 1811851200001 must be milliseconds`, "a year from now"}},
		{name: "ts seconds", raw: `{"event":"a","ts":1767366245}`, wantReason: event.ReasonBadField, wantMsg: []string{"it looks like seconds; send milliseconds"}},
		{name: "ts fraction", raw: `{"event":"a","ts":1767366245000.5}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 1767366245000.5 must be an integer number of milliseconds`}},
		{name: "ts exponent", raw: `{"event":"a","ts":1.5e12}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 1.5e12 must be an integer`}},
		{name: "ts huge exponent", raw: `{"event":"a","ts":1e400}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 1e400 must be an integer`}},
		{name: "ts 1e30", raw: `{"event":"a","ts":1e30}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 1e30 must be an integer`}},
		{name: "ts beyond int64", raw: `{"event":"a","ts":99999999999999999999}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" 99999999999999999999 must be milliseconds`}},
		{name: "ts rfc3339 before 2000", raw: `{"event":"a","ts":"1999-12-31T23:59:59Z"}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" "1999-12-31T23:59:59Z" must be between 2000-01-01T00:00:00Z`}},
		{name: "ts rfc3339 far ahead", raw: `{"event":"a","ts":"2030-01-01T00:00:00Z"}`, wantReason: event.ReasonBadField, wantMsg: []string{`must be between`}},
		{name: "ts rfc3339", raw: `{"event":"a","ts":"2026-01-02T15:04:05Z"}`, want: event.Event{Event: "a", TS: json.RawMessage(`"2026-01-02T15:04:05Z"`)}},
		{
			name: "ts rfc3339 with fraction and zone",
			raw:  `{"event":"a","ts":"2026-01-02T15:04:05.123456789+02:00"}`,
			want: event.Event{Event: "a", TS: json.RawMessage(`"2026-01-02T15:04:05.123456789+02:00"`)},
		},
		{name: "ts null is absent", raw: `{"event":"a","ts":null}`, want: event.Event{Event: "a"}},
		{name: "ts bad string", raw: `{"event":"a","ts":"yesterday"}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" "yesterday" is not an RFC 3339 time`}},
		{name: "ts date only", raw: `{"event":"a","ts":"2026-01-02"}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" "2026-01-02" is not an RFC 3339 time`}},
		{name: "ts empty string", raw: `{"event":"a","ts":""}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" "" is not an RFC 3339 time`}},
		{name: "ts boolean", raw: `{"event":"a","ts":true}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" must be a number`, "got boolean"}},
		{name: "ts object", raw: `{"event":"a","ts":{}}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" must be a number`, "got object"}},
		{name: "ts array", raw: `{"event":"a","ts":[1]}`, wantReason: event.ReasonBadField, wantMsg: []string{`"ts" must be a number`, "got array"}},

		// Strict JSON: exact names, no name twice, valid UTF-8, no lone
		// surrogates, at most MaxDepth deep (they were all accepted).
		{name: "name in capitals", raw: `{"EVENT":"a"}`, wantReason: event.ReasonUnknownField, wantMsg: []string{`unknown field "EVENT"`}},
		{name: "name capitalized beside the exact one", raw: `{"event":"a","Props":{}}`, wantReason: event.ReasonUnknownField, wantMsg: []string{`unknown field "Props"`}},
		{name: "name with an escape", raw: `{"\u0065vent":"a"}`, want: event.Event{Event: "a"}},
		{
			name: "duplicate top-level name", raw: `{"event":"a","event":"b"}`, // the second "event" is byte 13
			wantReason: event.ReasonMalformed, wantMsg: []string{`duplicate field "event" in the event`, "byte offset 13"},
		},
		{
			name: "duplicate name spelled otherwise", raw: `{"event":"a","\u0065vent":"b"}`,
			wantReason: event.ReasonMalformed, wantMsg: []string{`duplicate field "event"`, "byte offset 13"},
		},
		{
			name: "duplicate name in props", raw: `{"event":"a","props":{"k":1,"k":2}}`, // the second "k" is byte 28
			wantReason: event.ReasonMalformed, wantMsg: []string{`duplicate field "k" in "/props"`, "byte offset 28"},
		},
		{
			name: "duplicate name deep in context", raw: `{"event":"a","context":{"page":[{"x":1,"x":1}]}}`,
			wantReason: event.ReasonMalformed, wantMsg: []string{`duplicate field "x" in "/context/page/0"`},
		},
		{name: "same name in two objects", raw: `{"event":"a","props":{"k":{"k":1}},"context":{"k":1}}`, want: event.Event{Event: "a",
			Props: json.RawMessage(`{"k":{"k":1}}`), Context: json.RawMessage(`{"k":1}`)}},
		{name: "duplicate after a bad field", raw: `{"event":1,"x":1,"x":2}`, wantReason: event.ReasonMalformed, wantMsg: []string{`duplicate field "x"`}},
		{name: "invalid UTF-8 in the name", raw: "{\"event\":\"a\xffb\"}", wantReason: event.ReasonMalformed, wantMsg: []string{"invalid UTF-8", "byte offset 11"}},
		{name: "invalid UTF-8 in props", raw: "{\"event\":\"a\",\"props\":{\"s\":\"\xc3\"}}", wantReason: event.ReasonMalformed, wantMsg: []string{"invalid UTF-8"}},
		{name: "invalid UTF-8 in a name in props", raw: "{\"event\":\"a\",\"props\":{\"\xe2\x82\":1}}", wantReason: event.ReasonMalformed, wantMsg: []string{"invalid UTF-8"}},
		{name: "lone high surrogate", raw: `{"event":"\ud800"}`, wantReason: event.ReasonMalformed, wantMsg: []string{`\ud800`, "lone UTF-16 surrogate", "byte offset"}},
		{name: "lone low surrogate in props", raw: `{"event":"a","props":{"s":"x\udc00"}}`, wantReason: event.ReasonMalformed, wantMsg: []string{`\udc00`, "surrogate"}},
		{name: "high surrogate then no low one", raw: `{"event":"\ud83d\u0041"}`, wantReason: event.ReasonMalformed, wantMsg: []string{"surrogate"}},
		{name: "surrogate pair", raw: `{"event":"\ud83d\ude00"}`, want: event.Event{Event: "😀"}},
		{
			name: "nested to the depth limit", raw: `{"event":"a","props":` + nested(event.MaxDepth-1) + `}`,
			want: event.Event{Event: "a", Props: json.RawMessage(nested(event.MaxDepth - 1))},
		},
		{
			name: "nested past the depth limit", raw: `{"event":"a","props":` + nested(event.MaxDepth) + `}`,
			// The innermost '{' opens the 65th level.
			wantReason: event.ReasonMalformed, wantMsg: []string{fmt.Sprintf("nest more than %d deep", event.MaxDepth),
				fmt.Sprintf("byte offset %d", len(`{"event":"a","props":`)+(event.MaxDepth-1)*len(`{"a":`))},
		},
		{name: "nested past the limit in an unknown field", raw: `{"event":"a","x":` + nested(event.MaxDepth) + `}`, wantReason: event.ReasonMalformed, wantMsg: []string{"nest more than"}},
		{name: "array nested past the limit", raw: strings.Repeat("[", event.MaxDepth+1) + strings.Repeat("]", event.MaxDepth+1), wantReason: event.ReasonMalformed, wantMsg: []string{"nest more than"}},
		{
			name: "number beyond float64 kept", raw: `{"event":"a","props":{"n":123456789012345678901234567890,"f":1.50e+300}}`,
			want: event.Event{Event: "a", Props: json.RawMessage(`{"n":123456789012345678901234567890,"f":1.50e+300}`)},
		},

		// unknown_field
		{name: "unknown field", raw: `{"event":"a","user":"x"}`, wantReason: event.ReasonUnknownField, wantMsg: []string{`unknown field "user"`, `"props"`}},
		{name: "server field", raw: `{"event":"a","received_at":"2026-01-02T15:04:05Z"}`, wantReason: event.ReasonUnknownField, wantMsg: []string{`unknown field "received_at"`}},
		{name: "server field ip", raw: `{"event":"a","ip":"10.0.0.1"}`, wantReason: event.ReasonUnknownField, wantMsg: []string{`unknown field "ip"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.bug != "" {
				t.Skipf("known bug: %s", tt.bug)
			}
			e, bad := event.ParseAt([]byte(tt.raw), limit, parseNow)
			if tt.wantReason != "" {
				if bad == nil {
					t.Fatalf("Parse(%q) accepted %+v, want %s", tt.raw, e, tt.wantReason)
				}
				if bad.Reason != tt.wantReason {
					t.Errorf("Reason = %s, want %s (%s)", bad.Reason, tt.wantReason, bad.Msg)
				}
				if bad.Error() != bad.Msg || bad.Msg == "" {
					t.Errorf("Error() = %q, Msg = %q", bad.Error(), bad.Msg)
				}
				for _, m := range tt.wantMsg {
					if !strings.Contains(bad.Msg, m) {
						t.Errorf("message %q does not contain %q", bad.Msg, m)
					}
				}
				if !equalEvents(e, event.Event{}) {
					t.Errorf("rejected event is %+v, want the zero Event", e)
				}
				return
			}
			if bad != nil {
				t.Fatalf("Parse(%q): %s: %s", tt.raw, bad.Reason, bad.Msg)
			}
			if tt.check != nil {
				if err := tt.check(&e); err != nil {
					t.Error(err)
				}
				return
			}
			if !equalEvents(e, tt.want) {
				t.Errorf("Parse(%q) =\n%+v, want\n%+v", tt.raw, e, tt.want)
			}
		})
	}
}

// nested is n objects nested in each other, {"a":{"a":...{}}}: n deep.
func nested(n int) string {
	return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
}

// parseNow is TestParse's clock: "ts" may be up to a year past it.
var parseNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// equalEvents reports whether a and b hold the same fields; nil and empty raw
// JSON differ.
func equalEvents(a, b event.Event) bool {
	return a.Event == b.Event && a.ID == b.ID && a.UID == b.UID && a.AnonID == b.AnonID &&
		rawEqual(a.TS, b.TS) && rawEqual(a.Props, b.Props) && rawEqual(a.Context, b.Context)
}

func rawEqual(a, b json.RawMessage) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

func TestParseNoLimit(t *testing.T) {
	t.Parallel()
	raw := `{"event":"a","props":{"p":"` + strings.Repeat("x", 1<<20) + `"}}`
	if _, bad := event.ParseAt([]byte(raw), 0, time.Now()); bad != nil {
		t.Fatalf("Parse with no limit: %s", bad.Msg)
	}
}

// TestEnrich: the record gets the request's time in UTC, the client's ip
// and user agent (cut to MaxUABytes), and an id when the client sent none.
func TestEnrich(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("UTC+2", 2*60*60)
	at := time.Date(2026, 1, 2, 17, 4, 5, 123456789, zone)
	longUA := strings.Repeat("Mozilla/5.0 ", 100) // 1200 bytes

	tests := []struct {
		name   string
		id     string // the id the client sent
		ua     string
		wantUA string
	}{
		{name: "client id kept", id: "evt-1", ua: "curl/8.0", wantUA: "curl/8.0"},
		{name: "id generated", ua: "", wantUA: ""},
		{name: "ua at the limit", ua: longUA[:event.MaxUABytes], wantUA: longUA[:event.MaxUABytes]},
		{name: "ua cut", ua: longUA, wantUA: longUA[:event.MaxUABytes]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := event.NewBatch("events", event.Meta{ReceivedAt: at, IP: "192.0.2.7", UA: tt.ua}, 0)
			defer b.Release()
			raw := `{"event":"a"}`
			if tt.id != "" {
				raw = `{"event":"a","id":"` + tt.id + `"}`
			}
			if bad := b.Add([]byte(raw)); bad != nil {
				t.Fatal(bad)
			}
			b.Build()
			var e struct {
				ID         string    `json:"id"`
				ReceivedAt time.Time `json:"received_at"`
				IP, UA     string
			}
			r := b.Record(0)
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatal(err)
			}
			if tt.id != "" {
				if e.ID != tt.id {
					t.Errorf("ID = %q, want the client's %q", e.ID, tt.id)
				}
			} else {
				checkUUIDv7(t, e.ID)
			}
			if want := at.UTC().Format(event.TimeLayout); !strings.Contains(string(r.Value), `"received_at":"`+want+`"`) {
				t.Errorf("value %s has no received_at %s", r.Value, want)
			}
			if e.IP != "192.0.2.7" {
				t.Errorf("IP = %q", e.IP)
			}
			if e.UA != tt.wantUA {
				t.Errorf("UA is %d bytes %.20q..., want %d bytes %.20q...", len(e.UA), e.UA, len(tt.wantUA), tt.wantUA)
			}
		})
	}
}

func checkUUIDv7(tb testing.TB, id string) {
	tb.Helper()
	u, err := uuid.Parse(id)
	if err != nil {
		tb.Fatalf("id %q is not a UUID: %v", id, err)
	}
	if u.Version() != 7 {
		tb.Errorf("id %q is UUID version %d, want 7", id, u.Version())
	}
	if u.Variant() != uuid.RFC4122 {
		tb.Errorf("id %q has variant %v, want RFC4122", id, u.Variant())
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	prev := ""
	for range 1000 {
		id := event.NewID()
		checkUUIDv7(t, id)
		if seen[id] {
			t.Fatalf("NewID returned %q twice", id)
		}
		seen[id] = true
		// UUIDv7s from one process are ordered by creation (RFC 9562 method 3).
		if id <= prev {
			t.Fatalf("NewID returned %q after %q; want increasing ids", id, prev)
		}
		prev = id
	}
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 17, 4, 5, 123000000, time.FixedZone("UTC+2", 2*60*60))
	const wantAt = "2026-01-02T15:04:05.123000000Z"
	raw := []byte(`{"event":1,"props":{"k":"vvvvvvvvvv"}}`) // 38 bytes
	tests := []struct {
		name          string
		max           int
		wantValue     string
		wantTruncated bool
	}{
		{name: "under the limit", max: 100, wantValue: string(raw)},
		{name: "at the limit", max: len(raw), wantValue: string(raw)},
		{name: "over the limit", max: 10, wantValue: string(raw[:10]), wantTruncated: true},
		{name: "no limit", max: 0, wantValue: string(raw)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := event.DeadLetter("events-dlq", raw, string(event.ReasonBadField), at, tt.max)
			if r.Topic != "events-dlq" || r.Key != nil {
				t.Errorf("Topic, Key = %q, %q; want %q, nil", r.Topic, r.Key, "events-dlq")
			}
			if string(r.Value) != tt.wantValue {
				t.Errorf("Value = %q, want %q", r.Value, tt.wantValue)
			}
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			if got := headers[event.HeaderError]; got != "bad_field" {
				t.Errorf("header %s = %q, want %q", event.HeaderError, got, "bad_field")
			}
			if got := headers[event.HeaderReceivedAt]; got != wantAt {
				t.Errorf("header %s = %q, want %q", event.HeaderReceivedAt, got, wantAt)
			}
			got, ok := headers[event.HeaderTruncated]
			if tt.wantTruncated && got != "true" {
				t.Errorf("header %s = %q, want %q", event.HeaderTruncated, got, "true")
			}
			if !tt.wantTruncated && ok {
				t.Errorf("header %s = %q on a value that was not cut", event.HeaderTruncated, got)
			}
		})
	}
}
