package event_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// TestAppendJSONString: the bytes encoding/json (HTML escaping off) makes
// of a string, for strings and byte slices, without allocating.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c/", "\x00\x1f\x7f\b\f\n\r\t", "é€😀", "\u2028\u2029", "\xff\xe2\x80 \xed\xa0\x80", "<&>"} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := event.AppendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("string %q: %s, want %s", s, got, want)
		}
		if got := event.AppendJSONString(nil, []byte(s)); string(got) != string(want) {
			t.Errorf("bytes %q: %s, want %s", s, got, want)
		}
	}
	src, dst := []byte("é€\xff\u2028x"), make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst = event.AppendJSONString(dst[:0], src) }); n != 0 {
		t.Errorf("%v allocations per call with room in dst, want 0", n)
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"web", `"web"`},
		{"", `""`},
		{strings.Repeat("a", event.MaxQuoteBytes), `"` + strings.Repeat("a", event.MaxQuoteBytes) + `"`},
		{strings.Repeat("a", 3<<20), `"` + strings.Repeat("a", event.MaxQuoteBytes) + `"... (3145728 bytes)`},
		{strings.Repeat("a", event.MaxQuoteBytes-1) + "é", `"` + strings.Repeat("a", event.MaxQuoteBytes-1) + `"... (129 bytes)`},
	} {
		if got := event.Quote(tc.in); got != tc.want {
			t.Errorf("event.Quote(%d bytes) = %.200s, want %.200s", len(tc.in), got, tc.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"page_view", true},
		{strings.Repeat("é", event.MaxNameChars), true},
		{strings.Repeat("a", event.MaxNameChars+1), false},
		{strings.Repeat("a", 200), false},
		{"bad\xff", false},
	} {
		if err := event.CheckName("event", tc.name); (err == nil) != tc.ok {
			t.Errorf("event.CheckName(%.20q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
