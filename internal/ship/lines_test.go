package ship

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestReadLinesSplitsLongLines: a line longer than maxLineBytes (here one
// of 1.3 MiB of multi-byte runes, without an end, between two short ones)
// is sent in pieces of at most maxLineBytes, each cut before a UTF-8
// sequence, that put together are the line: bounded memory, nothing lost.
func TestReadLinesSplitsLongLines(t *testing.T) {
	long := strings.Repeat("é€x", (1300<<10)/6)
	in := "first\r\n" + long + "\nlast"
	enc := newLineEncoder(Config{Format: "raw", Event: "log"})
	out := make(chan record, 16)
	if err := readLines(context.Background(), strings.NewReader(in), enc, out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range out {
		var ev struct{ Props struct{ Line string } }
		if err := json.Unmarshal(l.event, &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Props.Line)
	}
	if len(got) < 4 || got[0] != "first" || got[len(got)-1] != "last" {
		t.Fatalf("%d events; want first, the long line's pieces, last", len(got))
	}
	pieces := got[1 : len(got)-1]
	for i, p := range pieces {
		if len(p) > maxLineBytes || !utf8.ValidString(p) {
			t.Errorf("piece %d: %d bytes (valid UTF-8: %v), want at most %d, whole runes", i, len(p), utf8.ValidString(p), maxLineBytes)
		}
	}
	if strings.Join(pieces, "") != long {
		t.Errorf("the pieces (%d) do not make the line up", len(pieces))
	}
}

// TestLineSplitterHeld: each piece reports the bytes read after it that
// are held back (a followed file's position of the piece is the byte after
// it), and a line that fits once its end of line is cut is not split.
func TestLineSplitterHeld(t *testing.T) {
	sp := lineSplitter{max: 4}
	type piece struct {
		line string
		held int
	}
	var got []piece
	yield := func(l []byte, held int) bool { got = append(got, piece{string(l), held}); return true }
	sp.add([]byte("abc"), false, yield)
	sp.add([]byte("defghij"), false, yield) // held: abcdefghij
	sp.add([]byte("k\n"), true, yield)
	sp.add([]byte("wxyz\r\n"), true, yield) // 4 bytes without its end: whole
	want := []piece{{"abcd", 6}, {"efgh", 2}, {"ijk", 0}, {"wxyz", 0}}
	if len(got) != len(want) {
		t.Fatalf("pieces %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("piece %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !bytes.Equal(sp.partial, nil) && len(sp.partial) != 0 {
		t.Errorf("held after a complete line: %q", sp.partial)
	}
}
