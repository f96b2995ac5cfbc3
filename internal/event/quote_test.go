package event_test

import (
	"bytes"
	"encoding/json"
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
