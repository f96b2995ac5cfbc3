package ingest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/inlet-dev/inlet/internal/catalog"
)

// encodeAnswer is how answers were encoded before writeAnswer: the
// reference it must match byte for byte.
func encodeAnswer(tb testing.TB, a *Answer) []byte {
	tb.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func TestAppendAnswer(t *testing.T) {
	t.Parallel()
	tricky := "quote \" backslash \\ <b>&amp;</b> \b\f\n\r\t \x00\x01\x1f\x7f é 😀 \u2028\u2029 bad \xff\xfe end \xe2\x80"
	tests := []struct {
		name string
		a    Answer
	}{
		{name: "all accepted", a: Answer{Accepted: 5, Rejected: []Rejection{}}},
		{name: "none", a: Answer{Rejected: nil}},
		{name: "rejections", a: Answer{Accepted: 1, Rejected: []Rejection{
			{Index: 0, Error: `unknown field "EVENT": put custom data in "props" or "context"`},
			{Index: 12, Error: tricky},
		}}},
		{name: "violations", a: Answer{Rejected: []Rejection{{Index: 3, Error: "breaks the plan", Violations: []catalog.Violation{
			{Type: catalog.ViolationUnplanned, Msg: "not in the plan"},
			{Type: catalog.ViolationType(tricky), Path: "/a/" + tricky, Msg: tricky},
		}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := appendAnswer(nil, &tt.a)
			if want := encodeAnswer(t, &tt.a); !bytes.Equal(got, want) {
				t.Errorf("appendAnswer =\n%q, encoding/json =\n%q", got, want)
			}
		})
	}
}

// FuzzAppendJSONString: writeAnswer quotes any string as encoding/json does.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\x00\b\f\n\r\t\x1f", "é😀\u2028\u2029", "\xff", "\xe2\x80", "<>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a := Answer{Rejected: []Rejection{{Error: s}}}
		if got, want := appendAnswer(nil, &a), encodeAnswer(t, &a); !bytes.Equal(got, want) {
			t.Fatalf("appendAnswer(%q) =\n%q, encoding/json =\n%q", s, got, want)
		}
	})
}
