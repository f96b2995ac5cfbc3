package ingest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/inlet-dev/inlet/internal/testkit"
)

var (
	five = []byte(`[
		{"event":"page_view","uid":"u1","props":{"path":"/","n":1.5}},
		{"event":"click","anon_id":"a1","context":{"lib":"js"}},
		{"event":"signup","id":"client-id-1"},
		{"event":"page_view2","uid":"u2","anon_id":"a2","ts":1767225600000},
		{"event":"purchase","uid":"u1","ts":"2026-01-01T00:00:00Z","props":{"total":9.5}}]`)
	fiveNDJSON = []byte("{\"event\":\"page_view\",\"uid\":\"u1\",\"props\":{\"path\":\"/\",\"n\":1.5}}\r\n\n" +
		"{\"event\":\"click\",\"anon_id\":\"a1\",\"context\":{\"lib\":\"js\"}}\n" +
		"  \n{\"event\":\"signup\",\"id\":\"client-id-1\"}\n" +
		"{\"event\":\"page_view2\",\"uid\":\"u2\",\"anon_id\":\"a2\",\"ts\":1767225600000}\n" +
		"{\"event\":\"purchase\",\"uid\":\"u1\",\"ts\":\"2026-01-01T00:00:00Z\",\"props\":{\"total\":9.5}}")
	fiveWrapped = append(append([]byte(`{"batch":`), five...), '}')
	fiveNames   = []string{"page_view", "click", "signup", "page_view2", "purchase"}
)

// TestBodyFormats: every layout, Content-Type and Content-Encoding inlet
// reads gives the same five events, in order, on the events topic.
func TestBodyFormats(t *testing.T) {
	t.Parallel()
	ct := func(v string) []string { return []string{"Content-Type", v} }
	cases := []struct {
		name    string
		body    []byte
		headers []string
	}{
		{"json array", five, ct("application/json")},
		{"batch object with charset", fiveWrapped, ct("application/json; charset=utf-8")},
		{"ndjson", fiveNDJSON, ct("application/x-ndjson")},
		{"jsonl", fiveNDJSON, ct("application/jsonl")},
		{"x-jsonlines", fiveNDJSON, ct("application/x-jsonlines")},
		{"application/ndjson", fiveNDJSON, ct("application/ndjson")},
		{"sendBeacon text/plain", five, ct("text/plain;charset=UTF-8")},
		{"no content type", five, nil},
		{"gzip", testkit.Gzip(t, five), append(ct("application/json"), "Content-Encoding", "gzip")},
		{"x-gzip", testkit.Gzip(t, five), append(ct("application/json"), "Content-Encoding", "x-gzip")},
		{"GZIP in capitals", testkit.Gzip(t, five), append(ct("application/json"), "Content-Encoding", " GZIP ")},
		{"zstd", testkit.Zstd(t, five), append(ct("application/json"), "Content-Encoding", "zstd")},
		{"identity", five, append(ct("application/json"), "Content-Encoding", "identity")},
		{"gzip ndjson", testkit.Gzip(t, fiveNDJSON), append(ct("application/x-ndjson"), "Content-Encoding", "gzip")},
		{"zstd batch object", testkit.Zstd(t, fiveWrapped), append(ct("application/json"), "Content-Encoding", "zstd")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			r := h.do(t, "POST", "/v1/batch", tc.body, tc.headers...)
			if r.status != http.StatusOK {
				t.Fatalf("answer %s, want 200", r)
			}
			if a := decodeAnswer(t, r); a.Accepted != 5 || len(a.Rejected) != 0 {
				t.Fatalf("answer %s, want 5 accepted and none rejected", r)
			}
			calls := h.sink.calls()
			if len(calls) != 1 || len(calls[0]) != 5 {
				t.Fatalf("sink got %d writes (%v), want one of 5 records", len(calls), calls)
			}
			for i, rec := range calls[0] {
				if rec.Topic != "events" || fields(t, rec)["event"] != fiveNames[i] {
					t.Errorf("record %d: topic %s value %s, want %s on events", i, rec.Topic, rec.Value, fiveNames[i])
				}
			}
		})
	}
}

// TestTrack: /v1/track takes one event object, in JSON or text/plain,
// compressed or not.
func TestTrack(t *testing.T) {
	t.Parallel()
	ev := []byte(` {"event":"track_one","uid":"t1"} `)
	cases := []struct {
		name    string
		body    []byte
		headers []string
	}{
		{"json", ev, []string{"Content-Type", "application/json"}},
		{"text/plain", ev, []string{"Content-Type", "text/plain"}},
		{"no content type", ev, nil},
		{"gzip", testkit.Gzip(t, ev), []string{"Content-Encoding", "gzip"}},
		{"zstd", testkit.Zstd(t, ev), []string{"Content-Encoding", "zstd"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			r := h.do(t, "POST", "/v1/track", tc.body, tc.headers...)
			if a := decodeAnswer(t, r); r.status != 200 || a.Accepted != 1 || len(a.Rejected) != 0 {
				t.Fatalf("answer %s, want 200 with one accepted", r)
			}
			recs := h.sink.onTopic("events")
			if len(recs) != 1 || string(recs[0].Key) != "t1" || fields(t, recs[0])["event"] != "track_one" {
				t.Fatalf("sink got %v, want track_one keyed t1", recs)
			}
		})
	}
}

// TestBadInput is every rejection of a whole request: its status, message
// and offset, a JSON body, and nothing of it on the events topic.
func TestBadInput(t *testing.T) {
	t.Parallel()
	json := []string{"Content-Type", "application/json"}
	var many bytes.Buffer
	many.WriteString("[")
	for i := range 501 {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `{"event":"e%d"}`, i)
	}
	many.WriteString("]")
	manyNDJSON := bytes.ReplaceAll(bytes.Trim(many.Bytes(), "[]"), []byte("},{"), []byte("}\n{"))
	bomb := make([]byte, 8<<20+1<<10) // zeros past the 8 MiB limit: a few KiB compressed
	huge := append(append([]byte(`[{"event":"x","props":{"s":"`), bytes.Repeat([]byte("a"), 1<<20)...), []byte(`"}}]`)...)
	const none = -1 // no offset in the answer
	// An event over --max-event-bytes is rejected unread: a syntax error
	// inside it is still the body's.
	largeBad := []byte(`[{"event":"ok"},{"event":"a","props":{"s":"` + strings.Repeat("x", 33<<10) + `"},}]`)
	largeBadAt := int64(bytes.LastIndex(largeBad, []byte("}]")))

	cases := []struct {
		name    string
		method  string
		path    string
		body    []byte
		headers []string
		status  int
		msg     string
		offset  int64
		allow   string // the Allow header of a 405
		dead    int    // dead letters the sink gets
	}{
		{name: "malformed json", body: []byte(`[{"event":"a"},{"event":`), headers: json, status: 400, msg: "malformed JSON at byte offset 24", offset: 24},
		{name: "garbage", body: []byte(`hello`), headers: json, status: 400, msg: "malformed JSON at byte offset 0", offset: 0},
		{name: "garbage after spaces", body: []byte("  \nhello"), headers: json, status: 400, msg: "malformed JSON at byte offset 3", offset: 3},
		{name: "trailing data", body: []byte(`[{"event":"a"}] x`), headers: json, status: 400, msg: "malformed JSON at byte offset 16", offset: 16},
		{name: "object without batch", body: []byte(`{"event":"a"}`), headers: json, status: 400, msg: `unknown key "event" at byte offset 1`, offset: 1},
		{name: "batch not array", body: []byte(`{"batch":{"event":"a"}}`), headers: json, status: 400, msg: `"batch" must be an array of events, got object`, offset: 9},
		{name: "batch and another key", body: []byte(`{"batch":[{"event":"a"}],"foo":1}`), headers: json, status: 400, msg: `unknown key "foo" at byte offset 25`, offset: 25},
		{name: "amplified array", body: testkit.Gzip(t, zeros(8<<20)), headers: append(json, "Content-Encoding", "gzip"), status: 413, msg: "more than 500 events", offset: none},
		{name: "zstd window bomb", body: zstWindow(t, 26, five), headers: append(json, "Content-Encoding", "zstd"), status: 413, msg: "the zstd body needs a window larger than 8388608 bytes", offset: none},
		{name: "empty body", headers: json, status: 400, msg: "empty body", offset: none},
		{name: "blank body", body: []byte(" \n\t"), headers: json, status: 400, msg: "empty body", offset: none},
		{name: "empty batch", body: []byte(`[]`), headers: json, status: 400, msg: "no events", offset: none},
		{name: "empty batch object", body: []byte(`{"batch":[]}`), headers: json, status: 400, msg: "no events", offset: none},
		{name: "empty ndjson", body: []byte("\n\n"), headers: []string{"Content-Type", "application/x-ndjson"}, status: 400, msg: "no events", offset: none},
		{name: "too many events", body: many.Bytes(), headers: json, status: 413, msg: "more than 500 events", offset: none},
		{name: "too many ndjson events", body: manyNDJSON, headers: []string{"Content-Type", "application/x-ndjson"}, status: 413, msg: "more than 500 events", offset: none},
		{name: "body too large", body: huge, headers: json, status: 413, msg: fmt.Sprintf("body is %d bytes; the limit is 1048576", len(huge)), offset: none},
		{name: "gzip bomb", body: testkit.Gzip(t, bomb), headers: append(json, "Content-Encoding", "gzip"), status: 413, msg: "decompressed body exceeds 8388608 bytes", offset: none},
		{name: "zstd bomb", body: testkit.Zstd(t, bomb), headers: append(json, "Content-Encoding", "zstd"), status: 413, msg: "decompressed body exceeds 8388608 bytes", offset: none},
		{name: "not gzip", body: []byte(`[{"event":"a"}]`), headers: append(json, "Content-Encoding", "gzip"), status: 400, msg: "body is not valid gzip data", offset: none},
		{name: "truncated gzip", body: testkit.Gzip(t, five)[:40], headers: append(json, "Content-Encoding", "gzip"), status: 400, msg: "body is not valid gzip data", offset: none},
		{name: "not zstd", body: []byte(`[{"event":"a"}]`), headers: append(json, "Content-Encoding", "zstd"), status: 400, msg: "body is not valid zstd data", offset: none},
		// Two field lines are one list (RFC 9110): a body gzipped twice,
		// not gzip applied once and the second line ignored.
		{name: "gzip on two lines", body: testkit.Gzip(t, testkit.Gzip(t, five)), headers: append(json, "Content-Encoding", "gzip", "Content-Encoding", "gzip"), status: 415, msg: `Content-Encoding "gzip, gzip" is not supported`, offset: none},
		{name: "identity then gzip on two lines", body: testkit.Gzip(t, five), headers: append(json, "Content-Encoding", "identity", "Content-Encoding", "gzip"), status: 415, msg: `Content-Encoding "identity, gzip" is not supported`, offset: none},
		{name: "unknown encoding", body: []byte(`[{"event":"a"}]`), headers: append(json, "Content-Encoding", "br"), status: 415, msg: `Content-Encoding "br" is not supported`, offset: none},
		{name: "wrong content type", body: []byte(`[{"event":"a"}]`), headers: []string{"Content-Type", "text/csv"}, status: 415, msg: "text/csv is not supported", offset: none},
		{name: "form content type", body: []byte(`[{"event":"a"}]`), headers: []string{"Content-Type", "application/x-www-form-urlencoded"}, status: 415, msg: "(what curl -d sends unless told otherwise) is not supported: send application/json (curl -H 'Content-Type: application/json')", offset: none},
		{name: "bad content type", body: []byte(`[{"event":"a"}]`), headers: []string{"Content-Type", "a/b; ==="}, status: 415, msg: "cannot be parsed", offset: none},
		{name: "wrong method", method: "GET", status: 405, msg: "method GET is not allowed on /v1/batch; use POST", offset: none, allow: "POST, OPTIONS"},
		{name: "wrong method track", method: "PUT", path: "/v1/track", body: []byte(`{"event":"a"}`), headers: json, status: 405, msg: "use POST", offset: none, allow: "POST, OPTIONS"},
		{name: "wrong method pixel", method: "POST", path: "/i", status: 405, msg: "method POST is not allowed on /i; use GET or HEAD", offset: none, allow: "GET, HEAD, OPTIONS"},
		{name: "wrong method pixel gif", method: "DELETE", path: "/i.gif", status: 405, msg: "use GET or HEAD", offset: none, allow: "GET, HEAD, OPTIONS"},
		{name: "track array", path: "/v1/track", body: []byte(`[{"event":"a"}]`), headers: json, status: 400, msg: "send arrays to /v1/batch", offset: 0},
		{name: "track ndjson", path: "/v1/track", body: []byte(`{"event":"a"}`), headers: []string{"Content-Type", "application/x-ndjson"}, status: 415, msg: "/v1/track takes one JSON event", offset: none},
		{name: "track malformed", path: "/v1/track", body: []byte(`{"event":"a"`), headers: json, status: 400, msg: "malformed JSON at byte offset 12", offset: 12},
		{name: "track empty", path: "/v1/track", headers: json, status: 400, msg: "empty body: expected one JSON event object", offset: none},
		// The events are read once, after the body is cut: a syntax error
		// inside one still refuses the whole body, where it is.
		{name: "syntax error inside an event", body: []byte(`[{"event":"a"},{"event":x},{"event":"b"}]`), headers: json, status: 400, msg: "malformed JSON at byte offset 24: invalid character 'x'", offset: 24},
		{name: "syntax error inside a too large event", body: largeBad, headers: json, status: 400, msg: fmt.Sprintf("malformed JSON at byte offset %d", largeBadAt), offset: largeBadAt},
		{name: "track a too large event with a syntax error", path: "/v1/track", body: largeBad[16 : len(largeBad)-1], headers: json, status: 400,
			msg: fmt.Sprintf("malformed JSON at byte offset %d", largeBadAt-16), offset: largeBadAt - 16},
		{name: "bracket mismatch inside an event", body: []byte(`[{"event":"a","props":{"a":[1}]},{"event":"b"}]`), headers: json, status: 400, msg: "malformed JSON at byte offset 29", offset: 29},
		{name: "track a bad field and a second object", path: "/v1/track", body: []byte(`{"event":1} {"event":"b"}`), headers: json, status: 400, msg: "malformed JSON at byte offset 12: invalid character '{' after top-level value", offset: 12},
		{name: "track unknown field and garbage", path: "/v1/track", body: []byte(`{"EVENT":"a"}}`), headers: json, status: 400, msg: "malformed JSON at byte offset 13", offset: 13},
		// An invalid event is not a bad request body: it is answered in
		// the Answer, and dead-lettered.
		{name: "invalid event", path: "/v1/track", body: []byte(`{"event":""}`), headers: json, status: 400, msg: `"event" is required`, offset: none, dead: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.method == "" {
				tc.method = "POST"
			}
			if tc.path == "" {
				tc.path = "/v1/batch"
			}
			h := newHarness(t, nil)
			r := h.do(t, tc.method, tc.path, tc.body, tc.headers...)
			if r.status != tc.status || !strings.Contains(unquote(r.body), tc.msg) {
				t.Fatalf("answer %s, want %d with %q", r, tc.status, tc.msg)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if cc := r.header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if tc.dead == 0 {
				e := decodeError(t, r)
				switch {
				case tc.offset == none && e.Offset != nil:
					t.Errorf("offset %d, want none", *e.Offset)
				case tc.offset != none && (e.Offset == nil || *e.Offset != tc.offset):
					t.Errorf("offset %v, want %d", e.Offset, tc.offset)
				}
			}
			if n := len(h.sink.onTopic("events")); n != 0 {
				t.Errorf("%d records reached the events topic", n)
			}
			if n := len(h.sink.onTopic("events.invalid")); n != tc.dead {
				t.Errorf("%d dead letters, want %d", n, tc.dead)
			}
			if tc.dead == 0 && len(h.sink.calls()) != 0 {
				t.Errorf("the sink was called for a rejected request")
			}
		})
	}
}

// zeros is a JSON array [0,0,...] of about n bytes.
func zeros(n int) []byte {
	b := bytes.Repeat([]byte(",0"), n/2-1)
	b[0] = '['
	return append(b, ']')
}

// zstWindow compresses b into a zstd frame that declares a window of
// 1<<windowLog bytes, however small b is.
func zstWindow(tb testing.TB, windowLog int, b []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithSingleSegment(false))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := enc.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		tb.Fatal(err)
	}
	f := buf.Bytes()
	// Magic, then the frame header descriptor: no dictionary, not
	// single-segment, so the window descriptor follows.
	if len(f) < 6 || f[4]&0x23 != 0 {
		tb.Fatalf("zstd frame header % x: want a window descriptor", f[:min(len(f), 6)])
	}
	f[5] = byte(windowLog-10) << 3 // exponent; mantissa 0
	return f
}

// noise returns n bytes that do not compress.
func noise(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(b)
	return b
}

// pad returns a batch of one event padded to exactly n bytes.
func pad(tb testing.TB, n int) []byte {
	tb.Helper()
	const head, tail = `[{"event":"e","props":{"s":"`, `"}}]`
	if n < len(head)+len(tail) {
		tb.Fatalf("pad: %d is too short", n)
	}
	return []byte(head + strings.Repeat("a", n-len(head)-len(tail)) + tail)
}

// TestLimits: the body and event-count limits, at and one past each.
func TestLimits(t *testing.T) {
	t.Parallel()
	small := func(c *Config) {
		c.MaxBodyBytes = 1 << 10
		c.MaxDecompressedBytes = 4 << 10
		c.MaxInflightBytes = 64 << 10
		c.MaxEvents = 3
	}
	json := []string{"Content-Type", "application/json"}
	cases := []struct {
		name    string
		body    []byte
		chunked bool // no Content-Length: the limit is found while reading
		headers []string
		status  int
		msg     string
	}{
		{"body at the limit", pad(t, 1<<10), false, json, 200, ""},
		{"body past the limit", pad(t, 1<<10+1), false, json, 413, "body is 1025 bytes; the limit is 1024"},
		{"chunked body at the limit", pad(t, 1<<10), true, json, 200, ""},
		{"chunked body past the limit", pad(t, 1<<10+1), true, json, 413, "body exceeds 1024 bytes, the limit"},
		{"gzip body past the limit as sent", testkit.Gzip(t, noise(4<<10)), true, append(json, "Content-Encoding", "gzip"), 413, "body exceeds 1024 bytes, the limit"},
		{"gzip at the decompressed limit", testkit.Gzip(t, pad(t, 4<<10)), false, append(json, "Content-Encoding", "gzip"), 200, ""},
		{"gzip past the decompressed limit", testkit.Gzip(t, pad(t, 4<<10+1)), false, append(json, "Content-Encoding", "gzip"), 413, "decompressed body exceeds 4096 bytes, the limit"},
		{"zstd at the decompressed limit", testkit.Zstd(t, pad(t, 4<<10)), false, append(json, "Content-Encoding", "zstd"), 200, ""},
		{"zstd past the decompressed limit", testkit.Zstd(t, pad(t, 4<<10+1)), true, append(json, "Content-Encoding", "zstd"), 413, "decompressed body exceeds 4096 bytes, the limit"},
		{"events at the limit", testkit.Batch(3, "e", testkit.JSONArray), false, json, 200, ""},
		{"events past the limit", testkit.Batch(4, "e", testkit.JSONArray), false, json, 413, "more than 3 events"},
		{"ndjson events past the limit", testkit.Batch(4, "e", testkit.NDJSON), false, []string{"Content-Type", "application/x-ndjson"}, 413, "more than 3 events"},
		{"batch object past the limit", testkit.Batch(4, "e", testkit.Wrapped), false, json, 413, "more than 3 events"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, small)
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length
			}
			r := h.send(t, "POST", "/v1/batch", body, tc.headers...)
			if r.status != tc.status || !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("answer %s, want %d with %q", r, tc.status, tc.msg)
			}
			if tc.status != 200 && len(h.sink.calls()) != 0 {
				t.Errorf("the sink was called for a rejected request")
			}
		})
	}
}

// TestBodyOverLimitClosesConnection: past MaxBodyBytes while reading,
// http.MaxBytesReader reaches net/http's own ResponseWriter under the
// metrics wrapper, so the server closes the connection instead of reading
// the rest of the body.
func TestBodyOverLimitClosesConnection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxBodyBytes = 1 << 10 })
	req, err := http.NewRequest("POST", h.srv.URL+"/v1/batch", io.MultiReader(bytes.NewReader(pad(t, 4<<10))))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !resp.Close {
		t.Fatalf("answer %d, Connection %q: want 413 and Connection: close", resp.StatusCode, resp.Header.Get("Connection"))
	}
}

// stall sends a request's headers and the first part of its body on a new
// connection, and leaves it open.
func stall(tb testing.TB, addr, path string, length int, part []byte) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, length)
	if _, err := c.Write(part); err != nil {
		tb.Fatal(err)
	}
	return c
}

func readResponse(tb testing.TB, c net.Conn) response {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestReadTimeout: a body that does not arrive within the server's read
// timeout is answered 408.
func TestReadTimeout(t *testing.T) {
	t.Parallel()
	s, sink, _ := newServer(t, nil)
	mux := http.NewServeMux()
	s.Register(mux)
	srv := serve(t, mux, func(hs *http.Server) { hs.ReadTimeout = 200 * time.Millisecond })
	c := stall(t, srv.Listener.Addr().String(), "/v1/batch", 100, []byte(`[{"event":`))
	r := readResponse(t, c)
	if r.status != http.StatusRequestTimeout || !strings.Contains(string(r.body), "body not received within the read timeout") {
		t.Fatalf("stalled body: %s, want 408", r)
	}
	if len(sink.calls()) != 0 {
		t.Errorf("the sink was called for a timed-out body")
	}
}

// TestResponseControllerThroughWrapper: a handler behind route reaches the
// connection with http.ResponseController (statusWriter unwraps), and a
// read deadline it sets ends a stalled body with 408.
func TestResponseControllerThroughWrapper(t *testing.T) {
	t.Parallel()
	s, _, _ := newServer(t, nil)
	errs := make(chan error, 1)
	h := s.route("probe", []string{http.MethodPost}, func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*statusWriter); !ok {
			t.Errorf("route gave the handler a %T, not the metrics wrapper", w)
		}
		errs <- http.NewResponseController(w).SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		s.serveBatch(w, r)
	})
	srv := serve(t, h, nil)
	c := stall(t, srv.Listener.Addr().String(), "/v1/batch", 100, []byte(`[{"event":`))
	if err := <-errs; err != nil {
		t.Fatalf("SetReadDeadline through the wrapper: %v", err)
	}
	r := readResponse(t, c)
	if r.status != http.StatusRequestTimeout {
		t.Fatalf("answer %s after the handler's read deadline, want 408", r)
	}
}

// TestInflightBudget: the bytes of bodies held at once are bounded across
// requests; past the budget a request is answered 503 with Retry-After, and
// the budget is given back when the holder is done.
func TestInflightBudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxDecompressedBytes = 64 << 10
		c.MaxInflightBytes = 100 << 10 // room for one 64 KiB body, not two
	})
	// A client that sends 60 KiB of its body and stalls holds 60 KiB.
	slow := stall(t, h.srv.Listener.Addr().String(), "/v1/batch", 62<<10,
		append([]byte(`[{"event":"slow","props":{"s":"`), bytes.Repeat([]byte("a"), 60<<10)...))
	testkit.WaitFor(t, 5*time.Second, "the stalled body charged to the budget", func() bool {
		return h.s.budget.Used() >= 60<<10
	})

	ev := `{"event":"second","props":{"s":"` + strings.Repeat("b", 10<<10) + `"}}`
	body := []byte("[" + strings.Repeat(ev+",", 4) + ev + "]") // 50 KiB in five events
	r := h.do(t, "POST", "/v1/batch", body, "Content-Type", "application/json")
	if r.status != 503 || r.header.Get("Retry-After") != "2" || !strings.Contains(string(r.body), "too many request bodies in memory; retry later") {
		t.Fatalf("second large body while the first is held: %s (Retry-After %q), want 503 with Retry-After 2", r, r.header.Get("Retry-After"))
	}
	if n := len(h.sink.calls()); n != 0 {
		t.Fatalf("the sink got %d writes, want none", n)
	}
	// The refused request gave back what it had taken.
	if used := h.s.budget.Used(); used > 64<<10 { // the stalled body's buffer
		t.Errorf("budget holds %d bytes after the refusal, want only the stalled body", used)
	}
	if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"small"}`)); r.status != 200 {
		t.Fatalf("small request under pressure: %s", r)
	}
	slow.Close()
	testkit.WaitFor(t, 5*time.Second, "the budget released", func() bool { return h.s.budget.Used() == 0 })
	if r := h.do(t, "POST", "/v1/batch", body, "Content-Type", "application/json"); r.status != 200 {
		t.Fatalf("large body after the budget was released: %s", r)
	}
	if used := h.s.budget.Used(); used != 0 {
		t.Errorf("budget holds %d bytes with no request in flight", used)
	}
}
