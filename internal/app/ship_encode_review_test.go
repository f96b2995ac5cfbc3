package app

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzShipReviewAppendJSONString: appendJSONString's quoting of any bytes
// is valid UTF-8 and JSON, and decodes to what encoding/json's quoting of
// the same bytes decodes to (each invalid byte a U+FFFD).
func FuzzShipReviewAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "\xff\xfe", "\xed\xa0\x80", "\u2028\u2029", "\xe2\x80", "€\xc3(", "\r\n\t\b\f"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		got := appendJSONString([]byte("x"), s)
		if !bytes.HasPrefix(got, []byte("x")) {
			t.Fatalf("dst prefix lost: %q", got)
		}
		got = got[1:]
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("quoting %q gave %q: not valid UTF-8 JSON", s, got)
		}
		want, _ := json.Marshal(string(s))
		var g, w string
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(want, &w)
		if g != w {
			t.Fatalf("quoting %q: decodes to %q; encoding/json's to %q", s, g, w)
		}
	})
}

// FuzzShipReviewEncodeRaw: a raw line's event is valid UTF-8 JSON whose
// props.line is the line (invalid bytes as U+FFFD).
func FuzzShipReviewEncodeRaw(f *testing.F) {
	f.Add([]byte("plain"), "")
	f.Add([]byte("\xff\x00\u2028"), "f-1-2")
	f.Fuzz(func(t *testing.T, line []byte, id string) {
		e := newLineEncoder(ShipConfig{Format: "raw", Event: "log", Key: id})
		out := e.encode(line, id)
		if !utf8.Valid(out) {
			t.Fatalf("not UTF-8: %q", out)
		}
		var ev struct {
			ID     string            `json:"id"`
			AnonID string            `json:"anon_id"`
			Props  map[string]string `json:"props"`
		}
		if err := json.Unmarshal(out, &ev); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		var w string
		b, _ := json.Marshal(string(line))
		json.Unmarshal(b, &w)
		if ev.Props["line"] != w {
			t.Fatalf("line %q: props.line %q", line, ev.Props["line"])
		}
	})
}
