package ship

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/event"
)

// refEvent is the event as ship encoded it with encoding/json: the
// reference that lineEncoder's hand-written JSON must decode equal to.
type refEvent struct {
	Event   string            `json:"event"`
	ID      string            `json:"id"`
	AnonID  string            `json:"anon_id,omitempty"`
	Props   json.RawMessage   `json:"props"`
	Context map[string]string `json:"context"`
}

func refEncode(e *lineEncoder, line []byte, id string) []byte {
	var props json.RawMessage
	switch e.cfg.Format {
	case "json":
		if t := strings.TrimSpace(string(line)); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
			props = json.RawMessage(t)
		}
	case "logfmt":
		if m := parseLogfmt(string(line)); len(m) > 0 {
			props, _ = json.Marshal(m)
		}
	}
	if props == nil {
		props, _ = json.Marshal(map[string]string{"line": string(line)})
	}
	host, _ := os.Hostname()
	src := "stdin"
	if e.cfg.File != "" {
		src, _ = filepath.Abs(e.cfg.File)
	}
	b, _ := json.Marshal(refEvent{Event: e.cfg.Event, ID: id, AnonID: e.cfg.Key, Props: props,
		Context: map[string]string{"host": host, "source": src}})
	return b
}

// TestLineEncoderMatchesEncodingJSON: each format's events decode to what
// encoding/json made of the same line, quoting included (control bytes,
// invalid UTF-8, U+2028, quotes, HTML characters).
func TestLineEncoderMatchesEncodingJSON(t *testing.T) {
	lines := []string{"", "plain line", `a "quoted" \ back\slash`, "tab\tcr\rnul\x00esc\x1b",
		"bad utf8 \xff\xfe end", "sep \u2028 \u2029 ünï €", "<html> & </html>",
		`  {"a": 1, "b": [true, null, "x\u0041"], "c": {"d": "<"}}  `, `{"broken": `, `{"a":1} trailing`,
		`level=info msg="hello \"world\"" n=3 bare`, "=x k=", strings.Repeat("x", 5000)}
	for _, format := range []string{"raw", "json", "logfmt"} {
		for _, key := range []string{"", "host:src \"q\""} {
			cfg := Config{Format: format, Event: "log \"ev\"", Key: key, File: "/tmp/a\tb.log"}
			e := newLineEncoder(cfg)
			for i, line := range lines {
				got := e.encode([]byte(line), "")
				want := refEncode(e, []byte(line), e.run+"-"+strconv.FormatInt(e.seq, 10))
				var g, w any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatalf("%s line %d: %v: %s", format, i, err, got)
				}
				json.Unmarshal(want, &w)
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s line %d:\n got %s\nwant %s", format, i, got, want)
				}
				if id := e.encode([]byte(line), "f-1-2-3"); !strings.Contains(string(id), `"id":"f-1-2-3"`) {
					t.Errorf("given id not kept: %s", id)
				}
			}
		}
	}
}

// TestLineEncoderJSONFormatStrict: a --format json line that is a strict
// JSON object is the props as written (compacted; names in their order,
// numbers and escapes byte for byte); any other line, invalid UTF-8, a
// lone surrogate or a duplicate name included, is sent as a line, never
// changed into an object it was not.
func TestLineEncoderJSONFormatStrict(t *testing.T) {
	e := newLineEncoder(Config{Format: "json", Event: "log"})
	asLine := func(s string) string { b, _ := json.Marshal(map[string]string{"line": s}); return string(b) }
	for line, want := range map[string]string{
		` { "b" : 1 , "a" : [ 2 , "\u0041" ] } `: `{"b":1,"a":[2,"\u0041"]}`,
		`{"n":12345678901234567890,"f":1.50}`:    `{"n":12345678901234567890,"f":1.50}`,
		"{\"a\":\"\xff\"}":                       asLine("{\"a\":\"\xff\"}"),
		`{"a":"\ud800"}`:                         asLine(`{"a":"\ud800"}`),
		`{"a":1,"a":2}`:                          asLine(`{"a":1,"a":2}`),
		`{"a":{"x":1,"x":2}}`:                    asLine(`{"a":{"x":1,"x":2}}`),
		`{"a":1} {"b":2}`:                        asLine(`{"a":1} {"b":2}`),
		`[1,2]`:                                  asLine(`[1,2]`),
		// 63 deep is as deep as inlet takes props; 64 is a line.
		strings.Repeat(`{"a":`, 62) + `{}` + strings.Repeat(`}`, 62): strings.Repeat(`{"a":`, 62) + `{}` + strings.Repeat(`}`, 62),
		strings.Repeat(`{"a":`, 63) + `{}` + strings.Repeat(`}`, 63): asLine(strings.Repeat(`{"a":`, 63) + `{}` + strings.Repeat(`}`, 63)),
		`{"s":"{[{[\"]"}`: `{"s":"{[{[\"]"}`,
	} {
		var ev struct{ Props json.RawMessage }
		out := e.encode([]byte(line), "")
		if !utf8.Valid(out) || json.Unmarshal(out, &ev) != nil || string(ev.Props) != want {
			t.Errorf("line %q: event %q, want props %s", line, out, want)
		}
	}
}

// TestParseLogfmtUnterminatedQuote: a quoted value with no closing quote
// is the rest of the line (it used to lose its last byte, or panic).
func TestParseLogfmtUnterminatedQuote(t *testing.T) {
	for line, want := range map[string]string{`k="abc`: "abc", `k="a\`: `a\`, `k="`: "", `k="a b" x=1`: "a b"} {
		if got := parseLogfmt(line)["k"]; got != want {
			t.Errorf("parseLogfmt(%q)[k] = %q, want %q", line, got, want)
		}
	}
}

// TestLineEncoderJSONFormatValidUTF8: a --format json line whose
// strings hold invalid UTF-8 or a lone surrogate escape must still give an
// event that is valid UTF-8 (and strict JSON), as every other format does.
func TestLineEncoderJSONFormatValidUTF8(t *testing.T) {
	e := newLineEncoder(Config{Format: "json", Event: "log"})
	for _, line := range []string{"{\"a\":\"\xff\xfe\"}", "{\"\xc3\":1}", `{"a":"\ud800"}`, `{"a":1,"a":2}`} {
		out := e.encode([]byte(line), "")
		if !utf8.Valid(out) {
			t.Errorf("line %q: event is not valid UTF-8: %q", line, out)
		}
		if strings.Contains(string(out), `\ud800"`) {
			t.Errorf("line %q: event carries a lone surrogate: %s", line, out)
		}
		if strings.Count(string(out), `"a":`) > 1 {
			t.Errorf("line %q: event carries a duplicate key: %s", line, out)
		}
	}
}

// FuzzAppendJSONString: event.AppendJSONString's quoting of any bytes
// is valid UTF-8 and JSON, and decodes to what encoding/json's quoting of
// the same bytes decodes to (each invalid byte a U+FFFD).
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "\xff\xfe", "\xed\xa0\x80", "\u2028\u2029", "\xe2\x80", "€\xc3(", "\r\n\t\b\f"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		got := event.AppendJSONString([]byte("x"), s)
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

// FuzzLineEncoderRaw: a raw line's event is valid UTF-8 JSON whose
// props.line is the line (invalid bytes as U+FFFD).
func FuzzLineEncoderRaw(f *testing.F) {
	f.Add([]byte("plain"), "")
	f.Add([]byte("\xff\x00\u2028"), "f-1-2")
	f.Fuzz(func(t *testing.T, line []byte, id string) {
		e := newLineEncoder(Config{Format: "raw", Event: "log", Key: id})
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

// TestParseLogfmt: key=value pairs, quoted values with escapes, a bare key
// is "true".
func TestParseLogfmt(t *testing.T) {
	m := parseLogfmt(`level=info msg="hello \"you\"" done n=3`)
	if fmt.Sprint(m) != `map[done:true level:info msg:hello "you" n:3]` {
		t.Errorf("logfmt: %v", m)
	}
}
