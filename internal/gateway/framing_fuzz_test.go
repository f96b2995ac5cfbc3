package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
)

// SmugglingShape is a named raw request; see SmugglingShapes.
type SmugglingShape struct{ Name, Raw string }

// hiddenRequest is a whole ingest request of one event named name: the
// request a smuggling shape hides where one reading of HTTP/1.1 sees a body
// and another a request.
func hiddenRequest(name string) string {
	body := `[{"event":"` + name + `"}]`
	return fmt.Sprintf("POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// SmugglingShapes are requests whose body is read one way by one HTTP
// parser and another way by another (a proxy in front, the old fasthttp
// front): each hides a request of event hidden. FuzzFraming's seeds, and
// TestSmuggling's table.
func SmugglingShapes(hidden string) []SmugglingShape {
	h := hiddenRequest(hidden)
	const head = "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(h), h)
	return []SmugglingShape{
		// Finding 6: the fasthttp front answered 400, kept the connection
		// and stored the hidden event.
		{"Transfer-Encoding identity, no length", head + "Transfer-Encoding: identity\r\n\r\n" + h},
		{"chunked, and a Content-Length over the hidden request (CL.TE)",
			head + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(h), h)},
		{"a short Content-Length, and chunked (TE.CL)", head + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + chunk},
		{"two Content-Lengths", head + fmt.Sprintf("Content-Length: 0\r\nContent-Length: %d\r\n\r\n%s", len(h), h)},
		{"Transfer-Encoding folded (obs-fold)", head + "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + h},
		{"a bare CR in a header", head + "X-A: b\rTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding chunked, identity", head + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding identity, chunked", head + "Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n" + h},
		{"two Transfer-Encodings", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding xchunked", head + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding with a space before the colon", head + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding chunked on HTTP/1.0", strings.Replace(head, "HTTP/1.1", "HTTP/1.0", 1) +
			"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + h},
		{"a chunk size line ending in a bare LF", head + "Transfer-Encoding: chunked\r\n\r\n0\n\r\n" + h},
		{"Content-Length with a sign", head + fmt.Sprintf("Content-Length: +%d\r\n\r\n%s", len(h), h)},
		{"Content-Length in hex", head + fmt.Sprintf("Content-Length: 0x%x\r\n\r\n%s", len(h), h)},
	}
}

// A framingFront serves h on a new loopback listener and returns its
// address and a stop that returns once every handler has returned. FuzzFraming
// feeds the same bytes to every front inlet ships; there is one today.
type framingFront struct {
	name  string
	serve func(tb testing.TB, cfg Config, h http.Handler) (addr string, stop func())
}

var framingFronts = []framingFront{{"net/http", serveNetHTTP}}

// serveNetHTTP serves h with the gateway's own server (newServer).
func serveNetHTTP(tb testing.TB, cfg Config, h http.Handler) (string, func()) {
	srv, err := newServer(cfg, h, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("net/http: handlers still running 10 s after the connection closed: %v", err)
			_ = srv.Close()
		}
		<-done
	}
}

// seqKey is the context key of a request's number on its connection.
type seqKey struct{}

// framingSink records, per request number, the events stored for it (on
// the events topic; dead letters are not counted). It is safe for
// concurrent use.
type framingSink struct {
	topic  string
	mu     sync.Mutex
	stored map[int64]int
}

func (s *framingSink) Write(ctx context.Context, recs []event.Record) error {
	seq, _ := ctx.Value(seqKey{}).(int64)
	n := 0
	for _, r := range recs {
		if r.Topic == s.topic {
			n++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored[seq] += n
	return nil
}

// framingOutcome is what one front made of one input.
type framingOutcome struct {
	statuses []int // of the final answers, in order (1xx left out)
	stored   []int // events stored per answered request with a number, in answer order
}

// runFraming writes raw to a fresh gateway handler on front, closes its
// write side, reads answers until the server closes, and checks the
// invariants against refBoundaries.
func runFraming(t *testing.T, front framingFront, raw []byte) framingOutcome {
	cfg := DefaultConfig()
	cfg.Ingest.AckStatus = http.StatusOK
	cfg.ReadTimeout, cfg.ReadHeaderTimeout, cfg.Ingest.BodyIdleTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	sink := &framingSink{topic: cfg.Ingest.Topic, stored: map[int64]int{}}
	in, err := ingest.New(cfg.Ingest, sink, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	in.Register(mux)
	var seq atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seq.Add(1)
		w.Header().Set("X-Seq", strconv.FormatInt(n, 10))
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), seqKey{}, n)))
	})
	addr, stop := front.serve(t, cfg, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// The server may close before it read everything: a failed write is
	// an answer too.
	_, _ = c.Write(raw)
	_ = c.(*net.TCPConn).CloseWrite()
	type answer struct {
		status   int
		seq      int64
		accepted int // -1: not a batch answer
	}
	var answers []answer
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: the server neither answered nor closed within 20 s of the end of the input", front.name)
			}
			break
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 {
			continue
		}
		a := answer{status: resp.StatusCode, accepted: -1}
		a.seq, _ = strconv.ParseInt(resp.Header.Get("X-Seq"), 10, 64)
		var ba struct {
			Accepted *int `json:"accepted"`
		}
		if json.Unmarshal(body, &ba) == nil && ba.Accepted != nil {
			a.accepted = *ba.Accepted
		}
		answers = append(answers, a)
		if rerr != nil {
			break
		}
	}
	c.Close()
	stop() // every handler has returned

	var out framingOutcome
	bounds, served := refBoundaries(raw), 0
	answered := map[int64]bool{}
	for i, a := range answers {
		if a.seq > 0 {
			served++
		} else if i < len(answers)-1 {
			t.Errorf("%s: the server answered %d itself (not a handler) and went on reading; answers %v", front.name, a.status, answers)
		}
		out.statuses = append(out.statuses, a.status)
		if a.status < 200 || a.status > 599 || a.status == http.StatusInternalServerError {
			t.Errorf("%s: answer %d", front.name, a.status)
		}
		if a.seq == 0 {
			continue
		}
		answered[a.seq] = true
		n := sink.stored[a.seq]
		out.stored = append(out.stored, n)
		switch {
		case n > 0 && a.status/100 != 2:
			t.Errorf("%s: %d events stored for a request answered %d", front.name, n, a.status)
		case a.accepted >= 0 && a.status/100 == 2 && n != a.accepted:
			t.Errorf("%s: %d events stored for a request answered %d accepting %d", front.name, n, a.status, a.accepted)
		case a.accepted < 0 && n > 1:
			t.Errorf("%s: %d events stored for a request answered %d without a batch answer", front.name, n, a.status)
		}
	}
	if served > bounds {
		t.Errorf("%s: %d requests served where a strict parser reads %d: a request was found where there is none; answers %v", front.name, served, bounds, answers)
	}
	for s, n := range sink.stored {
		if n > 0 && !answered[s] {
			t.Errorf("%s: %d events stored for request %d, whose answer never came (a hidden request?); answers %v", front.name, n, s, answers)
		}
	}
	return out
}

// FuzzFraming feeds raw bytes, pipelined HTTP/1.1 requests mutated, to
// the gateway's HTTP server with ingest behind it and a recording sink,
// and checks: no more requests reach a handler than a strict reference
// parser (refBoundaries) finds; an answer of the server's own (a
// malformed request) is its last; every event stored belongs to a request
// answered 2xx whose accepted count it matches; no 500. With more than
// one front, they must agree on status classes and events stored; a
// smuggling shape gets an answer. The seeds (testdata/fuzz/FuzzFraming and
// SmugglingShapes) run with go test.
func FuzzFraming(f *testing.F) {
	shapes := map[string]bool{}
	for _, s := range SmugglingShapes("hidden") {
		f.Add([]byte(s.Raw))
		shapes[s.Raw] = true
	}
	for _, s := range framingSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 64<<10 {
			return
		}
		var first framingOutcome
		for i, front := range framingFronts {
			o := runFraming(t, front, raw)
			if shapes[string(raw)] && len(o.statuses) == 0 {
				t.Errorf("%s: no answer to a smuggling shape (the request it sees, or the malformed one)", front.name)
			}
			if i == 0 {
				first = o
				continue
			}
			if classes(o.statuses) != classes(first.statuses) || fmt.Sprint(o.stored) != fmt.Sprint(first.stored) {
				t.Errorf("%s and %s disagree: status classes %s and %s, events stored %v and %v", framingFronts[0].name, front.name,
					classes(first.statuses), classes(o.statuses), first.stored, o.stored)
			}
		}
	})
}

func classes(statuses []int) string {
	var b strings.Builder
	for _, s := range statuses {
		fmt.Fprintf(&b, "%dxx ", s/100)
	}
	return b.String()
}

// framingSeeds are well-framed pipelines: what the mutator starts from.
func framingSeeds() []string {
	batch := func(body string) string {
		return fmt.Sprintf("POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	two := `[{"event":"a"},{"event":"b"}]`
	return []string{
		batch(two) + batch(`[{"event":"c"}]`),
		batch(two) + "GET /i?e=pv HTTP/1.1\r\nHost: x\r\n\r\n" + batch(`[{"event":"c"},{"nope":1}]`),
		"POST /v1/track HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"eve\r\n9\r\nnt\":\"t\"}\r\n0\r\n\r\n" + batch(two),
		"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 14\r\nExpect: 100-continue\r\n\r\n[{\"event\":\"e\"}]" + batch(two),
		"POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + batch(two),
		"POST /v1/batch HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n[{\"event\":\"e\"}]" + batch(two),
		"POST /v1/batch HTTP/1.1\nHost: x\nContent-Type: application/x-ndjson\nContent-Length: 30\n\n{\"event\":\"a\"}\n{\"event\":\"b\"}\n" + batch(two),
	}
}

// refBoundaries is a strict, independent reading of raw as HTTP/1.1
// requests on one connection (RFC 9112): the number of requests a server
// may answer. It counts each whole request, and one more for what follows
// that a server may answer with an error (a partial or faulty request),
// and stops after a request whose framing a server must not trust for the
// next one: Transfer-Encoding with Content-Length or on HTTP/1.0, a
// transfer coding other than chunked, differing or malformed
// Content-Lengths, HTTP/1.0, Connection: close. As RFC 9112 allows a
// recipient, it takes a bare LF for a line end and unfolds obs-fold; a
// bare CR anywhere in the head is faulty.
func refBoundaries(raw []byte) int {
	n := 0
	for {
		skipped := false
		for len(raw) > 0 && (raw[0] == '\n' || (raw[0] == '\r' && len(raw) > 1 && raw[1] == '\n')) {
			raw, skipped = raw[1:], true // empty lines before a request line (§2.2)
		}
		if len(raw) == 0 {
			if skipped {
				return n + 1 // a server that does not skip them may answer them 400
			}
			return n
		}
		n++
		end, lines := refHead(raw)
		if end < 0 {
			return n
		}
		raw = raw[end:]
		version, hdr, ok := refParseHead(lines)
		if !ok {
			return n
		}
		te, hasTE := hdr["transfer-encoding"]
		cl, hasCL := hdr["content-length"]
		last := version == "HTTP/1.0" || refHasToken(hdr["connection"], "close") || (hasTE && hasCL)
		switch {
		case hasTE:
			if version == "HTTP/1.0" || len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
				return n
			}
			rest, ok := refChunked(raw)
			if !ok {
				return n
			}
			raw = rest
		case hasCL:
			size := -1
			for _, v := range cl {
				v = strings.TrimSpace(v)
				m, err := strconv.Atoi(v)
				if err != nil || v == "" || strings.Trim(v, "0123456789") != "" || (size >= 0 && m != size) {
					return n
				}
				size = m
			}
			if len(raw) < size {
				return n
			}
			raw = raw[size:]
		}
		if last {
			return n
		}
	}
}

// refHead finds the end of the head at the start of raw (after its empty
// line) and returns its lines, or -1 if it is not whole or holds a bare CR.
func refHead(raw []byte) (end int, lines []string) {
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\n')
		if j < 0 {
			return -1, nil
		}
		line := raw[i : i+j]
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.IndexByte(line, '\r') >= 0 {
			return -1, nil
		}
		i += j + 1
		if len(line) == 0 {
			return i, lines
		}
		lines = append(lines, string(line))
	}
	return -1, nil
}

// refParseHead reads the request line and the fields (names lowercased).
func refParseHead(lines []string) (version string, hdr map[string][]string, ok bool) {
	if len(lines) == 0 {
		return "", nil, false
	}
	parts := strings.Split(lines[0], " ")
	v := parts[len(parts)-1]
	if len(parts) != 3 || !refToken(parts[0]) || parts[1] == "" || len(v) != 8 || !strings.HasPrefix(v, "HTTP/1.") || v[7] < '0' || v[7] > '9' {
		return "", nil, false
	}
	if v != "HTTP/1.0" {
		v = "HTTP/1.1" // a later 1.x is read as the highest this server knows (RFC 9110 §6.2)
	}
	hdr = map[string][]string{}
	var lastName string
	for _, l := range lines[1:] {
		if l[0] == ' ' || l[0] == '\t' { // obs-fold: part of the previous value
			if lastName == "" {
				return "", nil, false
			}
			v := hdr[lastName]
			v[len(v)-1] += " " + strings.TrimSpace(l)
			continue
		}
		name, value, found := strings.Cut(l, ":")
		if !found || !refToken(name) {
			return "", nil, false
		}
		lastName = strings.ToLower(name)
		hdr[lastName] = append(hdr[lastName], strings.Trim(value, " \t"))
	}
	return v, hdr, true
}

// refChunked reads a chunked body at the start of raw (§7.1), its chunk
// lines ending in CRLF, and returns what follows it.
func refChunked(raw []byte) (rest []byte, ok bool) {
	line := func() (string, bool) {
		i := bytes.Index(raw, []byte("\r\n"))
		if i < 0 || bytes.IndexByte(raw[:i], '\n') >= 0 || bytes.IndexByte(raw[:i], '\r') >= 0 {
			return "", false
		}
		l := string(raw[:i])
		raw = raw[i+2:]
		return l, true
	}
	for {
		l, ok := line()
		if !ok {
			return nil, false
		}
		sizeText, _, _ := strings.Cut(l, ";")
		sizeText = strings.TrimRight(sizeText, " \t")
		size, err := strconv.ParseUint(sizeText, 16, 31)
		if err != nil || sizeText == "" || strings.Trim(sizeText, "0123456789abcdefABCDEF") != "" {
			return nil, false
		}
		if size == 0 {
			for { // trailer fields, then the empty line
				l, ok := line()
				if !ok {
					return nil, false
				}
				if l == "" {
					return raw, true
				}
			}
		}
		if uint64(len(raw)) < size+2 || raw[size] != '\r' || raw[size+1] != '\n' {
			return nil, false
		}
		raw = raw[size+2:]
	}
}

func refToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func refHasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
