package reply

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// FuzzUnmarshal: Unmarshal never panics, fails only with ErrMalformed, and
// what it decodes encodes back to the same reply. The corpus is
// testdata/fuzz/FuzzUnmarshal.
func FuzzUnmarshal(f *testing.F) {
	f.Add(Reply{ID: "c1", Status: 200, ContentType: "application/json", Body: []byte(`{}`)}.Marshal())
	f.Add(Reply{ID: "c2", Status: 502, Err: "boom"}.Marshal())
	f.Add([]byte{'R', 1, 1, 'a', 0xe8, 0x07})
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !ValidStatus(rep.Status) {
			t.Fatalf("decoded invalid status %d", rep.Status)
		}
		again, err := Unmarshal(rep.Marshal())
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", rep, err)
		}
		if again.ID != rep.ID || again.Status != rep.Status || again.ContentType != rep.ContentType ||
			again.Err != rep.Err || !bytes.Equal(again.Body, rep.Body) {
			t.Fatalf("round trip %+v, want %+v", again, rep)
		}
	})
}

// FuzzParseReply: ParseReply never panics, fails only with ErrMalformed,
// and what it decodes survives ReplyRecord and ParseReply again. The
// corpus is testdata/fuzz/FuzzParseReply.
func FuzzParseReply(f *testing.F) {
	f.Add([]byte("c1"), []byte("body"), "c1", "200", "text/plain", "")
	f.Add([]byte(nil), []byte(nil), "", "abc", "", "boom")
	f.Add([]byte("k"), []byte{0}, "", "1000", "", "")
	f.Fuzz(func(t *testing.T, key, value []byte, id, status, ct, errText string) {
		var hs []event.Header
		for _, h := range []struct{ k, v string }{{HeaderCorrelationID, id}, {HeaderStatus, status}, {HeaderContentType, ct}, {HeaderError, errText}} {
			if h.v != "" {
				hs = append(hs, event.Header{Key: h.k, Value: []byte(h.v)})
			}
		}
		rep, err := ParseReply(key, value, hs)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if rep.ID == "" || !ValidStatus(rep.Status) {
			t.Fatalf("decoded %+v: no id or an invalid status", rep)
		}
		rec := ReplyRecord("replies", rep)
		again, err := ParseReply(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", rep, err)
		}
		if !reflect.DeepEqual(again, rep) {
			t.Fatalf("round trip %+v, want %+v", again, rep)
		}
	})
}
