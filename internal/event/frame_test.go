package event_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// TestBodyFault: a body Frame cuts whose fault lies inside an event is
// refused as a whole, with the error a reading of the whole body gives
// (Split's, to the byte), found from the first event whose rejection hides
// it; a body whose events are only refused one by one has none.
func TestBodyFault(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 9999) + strings.Repeat("]", 9999) // encoding/json's limit is 10000 in all
	tests := []struct {
		name   string
		body   string
		format event.Format
		want   string // the error; "" for none
	}{
		{name: "a literal cut short", body: `[{"event":"a"},tru]`, want: "malformed JSON at byte offset 18: invalid character ']' in literal true (expecting 'e')"},
		{name: "a number's last byte", body: `[1x ]`, want: "malformed JSON at byte offset 2: invalid character 'x' after array element"},
		{name: "a literal before a space", body: "[nul ,1]", want: "malformed JSON at byte offset 4: invalid character ' ' in literal null (expecting 'l')"},
		{name: "inside an object", body: `{"batch":[{"event":"a","props":{"k":}}]}`, want: "malformed JSON at byte offset 36: invalid character '}' looking for beginning of value"},
		{name: "after a byte order mark", body: "\xef\xbb\xbf" + `[{"event":"a"},{"event" "b"}]`, want: "malformed JSON at byte offset 27: invalid character '\"' after object key"},
		{name: "the first of two", body: "[{\"event\":\"a\",\"k\":\"\x01\"},{\"event\":}]", want: "malformed JSON at byte offset 19: invalid character '\\x01' in string literal"},
		{name: "too large to be read", body: `[{"event":"a","props":{"p":"` + strings.Repeat("x", 600) + `",}}]`, want: "malformed JSON at byte offset 630: invalid character '}' looking for beginning of object key string"},
		{name: "nested as deep as encoding/json reads in an array", body: "[" + deep + "]"},
		{name: "nested past it in a batch object only", body: `{"batch":[` + deep + `]}`},
		{name: "nested past it with a fault", body: `{"batch":[` + deep[:9999] + "x" + deep[9999:] + `]}`, want: "malformed JSON at byte offset 10008: invalid character '[' exceeded max depth"},
		{name: "strict JSON only: a duplicate name", body: `[{"event":"a","event":"b"}]`},
		{name: "strict JSON only: invalid UTF-8", body: "[{\"event\":\"a\xff\"}]"},
		{name: "not an object", body: `[1]`},
		{name: "single: cut short", body: `{"event":"a"`, format: event.FormatSingle, want: "malformed JSON at byte offset 12: unexpected end of JSON input"},
		{name: "single: a fault of its last byte", body: `{"event":"a"}]`, format: event.FormatSingle, want: "malformed JSON at byte offset 13: invalid character ']' after top-level value"},
		{name: "single: after a byte order mark", body: "\xef\xbb\xbf" + `{"event":1} x`, format: event.FormatSingle, want: "malformed JSON at byte offset 15: invalid character 'x' after top-level value"},
		{name: "single: a field's fault only", body: `{"event":1}`, format: event.FormatSingle},
		{name: "ndjson lines are independent", body: "{\"event\":\n{\"event\":\"a\"}\n", format: event.FormatNDJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tt.body)
			items, err := event.Frame(nil, body, tt.format, 10)
			if err != nil {
				t.Fatalf("Frame: %v", err)
			}
			b := event.NewBatch("events", event.Meta{}, 512)
			defer b.Release()
			var fault error
			for _, raw := range items {
				if fault = event.BodyFault(body, raw, tt.format, b.Add(raw)); fault != nil {
					break
				}
			}
			_, split := event.Split(body, tt.format, 10)
			switch {
			case tt.want == "" && fault != nil:
				t.Fatalf("BodyFault: %v, want none", fault)
			case tt.want == "":
			case fault == nil:
				t.Fatalf("BodyFault found none, want %s", tt.want)
			case fault.Error() != tt.want:
				t.Fatalf("BodyFault:\n%s, want\n%s", fault, tt.want)
			case !errors.Is(fault, event.ErrMalformed):
				t.Fatalf("BodyFault %v is not ErrMalformed", fault)
			}
			if (split == nil) != (fault == nil) || (split != nil && split.Error() != fault.Error()) {
				t.Fatalf("Split: %v; BodyFault: %v", split, fault)
			}
		})
	}
}
