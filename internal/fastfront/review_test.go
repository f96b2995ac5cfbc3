package fastfront

// Review tests: behaviours of the front compared with a plain net/http
// server. Those named TestReview* fail on the code as reviewed; the
// others are regression tests that pass.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
)

// answerWithin reads one answer within d, or reports that none came.
func (c *conn) answerWithin(d time.Duration) (*http.Response, seen, error) {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.c.SetReadDeadline(time.Now().Add(20 * time.Second)) }()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, seen{}, err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, seen{}, err
	}
	var s seen
	if resp.Header.Get("Content-Type") == "application/json" {
		_ = json.Unmarshal(b, &s)
	}
	return resp, s, nil
}

// TestReviewExpectContinueBodySentWithHeader: a client that sends
// "Expect: 100-continue" and its body in the same write (many do: curl
// after its 1 s wait, clients that do not wait for 100 at all, or a short
// body in the same segment). net/http reads the body from what came and
// answers 200 "hello" at once. On the front the ExpectHandler returns
// non-100, and fasthttp then does br.Reset(conn), dropping the bytes it had
// buffered after the header; the handoff passes net/http the header only,
// so the body is lost and net/http waits for it (until ReadTimeout) — or,
// with pipelining, eats the next request as the body.
func TestReviewExpectContinueBodySentWithHeader(t *testing.T) {
	addr, _, _ := start(t, Config{ReadTimeout: 2 * time.Second})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
	// Skip a 100 Continue if one comes.
	for {
		resp, s, err := c.answerWithin(4 * time.Second)
		if err != nil {
			t.Fatalf("no answer to an Expect request whose body came with its header: %v (net/http answers 200 \"hello\")", err)
		}
		if resp.StatusCode == 100 {
			continue
		}
		if resp.StatusCode != 200 || s.Body != "hello" {
			t.Fatalf("%d by %s with body %q; net/http answers 200 with \"hello\"", resp.StatusCode, s.Server, s.Body)
		}
		return
	}
}

// TestReviewHandoffGetWithBody: a GET with a body (Content-Length) for a
// path of net/http's. fasthttp reads ahead the first byte of every body
// (MaxRequestBodySize 1), GET's too; handoff (hasBody: false for GET) then
// writes out the header, Content-Length included, but not that byte, so
// net/http reads the body one byte short and waits for one more (then
// takes it from the next request: a desync). net/http alone answers at
// once with the body "hello".
func TestReviewHandoffGetWithBody(t *testing.T) {
	addr, _, _ := start(t, Config{ReadTimeout: 2 * time.Second})
	c := dial(t, addr)
	c.send("GET /other HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
	resp, s, err := c.answerWithin(4 * time.Second)
	if err != nil {
		t.Fatalf("no answer to GET /other with a 5-byte body: %v (net/http answers 200 with body \"hello\")", err)
	}
	if resp.StatusCode != 200 || s.Body != "hello" {
		t.Fatalf("%d by %s with body %q, want 200 by net/http with \"hello\"", resp.StatusCode, s.Server, s.Body)
	}
}

// TestReviewHandoffGetWithBodyPipelined: the same, with a second request
// right behind: net/http answers both; on the front the first byte of the
// next request is taken as the last of the body, and the next request is
// misread.
func TestReviewHandoffGetWithBodyPipelined(t *testing.T) {
	addr, _, _ := start(t, Config{ReadTimeout: 2 * time.Second})
	c := dial(t, addr)
	c.send("GET /other HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" + "GET /other?n=2 HTTP/1.1\r\nHost: h\r\n\r\n")
	for i, want := range []string{"hello", ""} {
		resp, s, err := c.answerWithin(4 * time.Second)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		if resp.StatusCode != 200 || s.Body != want {
			t.Fatalf("answer %d: %d by %s with body %q, want 200 with %q", i+1, resp.StatusCode, s.Server, s.Body, want)
		}
	}
}

// TestPipelinedFastThenHandoffThenFast: one write of three requests: the
// fast answer (held for pipelining) must go out before the handoff.
func TestPipelinedFastThenHandoffThenFast(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\na" +
		"POST /other HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nb\r\n0\r\n\r\n" +
		"POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nc")
	for i, want := range []struct{ server, body string }{{"fasthttp", "a"}, {"net/http", "b"}, {"net/http", "c"}} {
		resp, s, err := c.answerWithin(5 * time.Second)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		if resp.StatusCode != 200 || s.Server != want.server || s.Body != want.body {
			t.Fatalf("answer %d: %d by %s body %q, want %s %q", i+1, resp.StatusCode, s.Server, s.Body, want.server, want.body)
		}
	}
}

// TestSmugglingCLAndTE: Content-Length and Transfer-Encoding together; the
// chunked framing wins on both servers (net/http drops Content-Length), and
// what follows the chunked body is the next request.
func TestSmugglingCLAndTE(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, p := range []string{"/fast", "/other"} {
		t.Run(p, func(t *testing.T) {
			c := dial(t, addr)
			c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"3\r\nabc\r\n0\r\n\r\n" + "GET " + p + "?x=smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, s, err := c.answerWithin(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode == 400 {
				// Refusing is fine too (and then the connection must close).
				if !c.closed() {
					t.Fatal("400 on CL+TE but the connection stays open")
				}
				return
			}
			if s.Body != "abc" {
				t.Fatalf("body %q, want \"abc\" (chunked wins)", s.Body)
			}
			// net/http goes on with the next request; closing the
			// connection instead (RFC 9112 6.1: a server MUST close after
			// answering CL+TE), as the front does, is fine too.
			resp, s, err = c.answerWithin(5 * time.Second)
			if err == nil && (resp.StatusCode != 200 || s.RawQuery != "x=smuggled") {
				t.Fatalf("second request misread: %d %+v", resp.StatusCode, s)
			}
		})
	}
}

// TestDuplicateContentLength: two different Content-Length
// headers. net/http refuses the request (400 "invalid Content-Length",
// RFC 9112 6.3) and closes the connection.
func TestDuplicateContentLength(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, p := range []string{"/fast", "/other"} {
		t.Run(p, func(t *testing.T) {
			c := dial(t, addr)
			c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde")
			resp, s, err := c.answerWithin(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 400 {
				t.Fatalf("%d by %s with body %q; net/http answers 400 to conflicting Content-Lengths", resp.StatusCode, s.Server, s.Body)
			}
		})
	}
}

// TestHTTP11WithoutHost: HTTP/1.1 requires Host; net/http answers
// 400 "missing required Host header". The fast path serves it.
func TestHTTP11WithoutHost(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
	resp, s, err := c.answerWithin(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 {
		t.Fatalf("%d by %s; net/http answers 400 to an HTTP/1.1 request without Host", resp.StatusCode, s.Server)
	}
}

// TestObsFoldInRequestHeader: net/http's textproto joins an
// obs-folded header value into one line ("a b"). Whatever the front does,
// the handler must not see CR or LF in a value (a handler that echoes a
// header, as ingest's CORS does with Origin, would split its answer).
func TestObsFoldInRequestHeader(t *testing.T) {
	var got string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("X-Fold")
		w.Header().Set("X-Echo", got)
		w.WriteHeader(204)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\nX-Fold: a\r\n b\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == 400 {
		return // refusing obs-fold is fine (RFC 9112 5.2)
	}
	if strings.ContainsAny(got, "\r\n") {
		t.Fatalf("the handler saw X-Fold %q, with a line break", got)
	}
}

// TestResponseHeaderNewline: a handler that sets a header value
// with CR/LF (from client input). net/http writes CR and LF as spaces,
// so that no header can be injected; the answer must carry no X-Injected.
func TestResponseHeaderNewline(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", "a\r\nX-Injected: 1")
		w.WriteHeader(204)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Injected") != "" {
		t.Fatalf("header injected through a handler's value: %q", resp.Header)
	}
}

// TestReviewNoContentTypeSniffed: a handler that writes a body without
// setting Content-Type. net/http sniffs one (http.DetectContentType:
// "text/plain; charset=utf-8" here); the fast path sends none.
func TestReviewNoContentTypeSniffed(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain text") })
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
		t.Fatalf("Content-Type %q; net/http sends \"text/plain; charset=utf-8\"", got)
	}
}

// TestSetCookieSameName: two Set-Cookie values (same cookie name,
// different Path) are two header lines on net/http, and on the front too.
func TestSetCookieSameName(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "a=1; Path=/x")
		w.Header().Add("Set-Cookie", "a=2; Path=/y")
		w.WriteHeader(204)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 2 {
		t.Fatalf("Set-Cookie %q, want both values as net/http sends", got)
	}
}

// TestRequestHeaderShapes: lower-case names are canonical; repeated Cookie
// and X-Forwarded-For lines are kept apart as net/http keeps them.
func TestRequestHeaderShapes(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\nx-forwarded-for: 1.1.1.1\r\nX-FORWARDED-FOR: 2.2.2.2\r\n" +
		"content-length: 2\r\n\r\nhi")
	resp, s, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(err, resp)
	}
	if s.Host != "h" || s.Header["Content-Type"] == nil || len(s.Header["X-Forwarded-For"]) != 2 || s.Body != "hi" {
		t.Fatalf("saw %+v", s)
	}
}

// TestHTTP10Close: an HTTP/1.0 request without keep-alive;
// net/http sets r.Close (the connection ends after the answer).
func TestHTTP10Close(t *testing.T) {
	closeSeen := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { closeSeen <- r.Close; w.WriteHeader(204) })
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.0\r\n\r\n")
	if _, _, err := c.answerWithin(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !<-closeSeen {
		t.Error("r.Close false for an HTTP/1.0 request without keep-alive; net/http sets it")
	}
	if !c.closed() {
		t.Error("connection open after an HTTP/1.0 answer without keep-alive")
	}
}

// TestReviewContextNotCancelled: net/http cancels a request's context
// when the handler returns, and when the connection ends. A handler that
// starts work bound to r.Context() (a goroutine waiting on Done) leaks on
// the fast path: the context is never cancelled, not even when the
// connection is closed (the package doc says "only when the connection
// ends", but nothing cancels it).
func TestReviewContextNotCancelled(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ctxs <- r.Context(); w.WriteHeader(204) })
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, _, err := c.answerWithin(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := <-ctxs
	c.c.Close()
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("request context not cancelled after the handler returned and the connection closed")
	}
}

// TestHalfCloseAfterRequest: a client that sends a whole request and shuts
// its write side still gets the answer (net/http does answer).
func TestHalfCloseAfterRequest(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, p := range []string{"/fast", "/other"} {
		t.Run(p, func(t *testing.T) {
			c := dial(t, addr)
			c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
			_ = c.c.(*net.TCPConn).CloseWrite()
			resp, s, err := c.answerWithin(5 * time.Second)
			if err != nil || resp.StatusCode != 200 || s.Body != "hi" {
				t.Fatalf("half-closed: %v %+v", err, s)
			}
		})
	}
}

// refuseOver1000 reads at most 1,000 bytes of a body through
// http.MaxBytesReader and answers 413 to a larger one, 200 otherwise.
var refuseOver1000 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1000))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		return
	}
	w.WriteHeader(200)
})

// TestTooLarge413ReadableAndClosed: a handler refusing with 413 through
// http.MaxBytesReader while the client goes on sending: the answer
// arrives, the connection closes, the lingering goroutine ends.
func TestTooLarge413ReadableAndClosed(t *testing.T) {
	addr, _, _ := start(t, Config{Handler: refuseOver1000})
	before := runtime.NumGoroutine()
	for _, hdr := range []string{"Content-Length: 10000000", "Transfer-Encoding: chunked"} {
		t.Run(hdr, func(t *testing.T) {
			c := dial(t, addr)
			c.send("POST /fast HTTP/1.1\r\nHost: h\r\n" + hdr + "\r\n\r\n")
			stop := make(chan struct{})
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				chunk := strings.Repeat("x", 4096)
				if strings.HasPrefix(hdr, "Transfer") {
					chunk = "1000\r\n" + chunk + "\r\n"
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := io.WriteString(c.c, chunk); err != nil {
						return
					}
				}
			}()
			resp, _, err := c.answerWithin(5 * time.Second)
			close(stop)
			<-sent
			if err != nil || resp.StatusCode != 413 {
				t.Fatalf("413 not read: %v %v", err, resp)
			}
			if !c.closed() {
				t.Fatal("connection open after 413")
			}
		})
	}
	// The client stopped sending without closing: the read-out ends after
	// lingerIdle.
	time.Sleep(lingerIdle + 500*time.Millisecond)
	// fasthttp's clock, its pool cleaner and an idle worker or two may
	// stay; a lingering close (fastConn.Close) must not.
	buf := make([]byte, 1<<20)
	if st := string(buf[:runtime.Stack(buf, true)]); strings.Contains(st, "fastfront.(*fastConn).Close") {
		t.Errorf("a lingering close is still running after %v (%d goroutines, %d before):\n%s", lingerIdle, runtime.NumGoroutine(), before, st)
	}
}

// TestTooLarge413AfterTheWholeBody: a client that reads its answer only
// once it has written its whole body (a 4 MiB one, refused by a handler
// that read 1,000 bytes of it) still gets the 413: the front reads out
// what comes after the answer until the client is done. A short read-out
// (256 KiB, as net/http's) resets the connection under the client's
// write, and the reset takes the unread answer with it.
func TestTooLarge413AfterTheWholeBody(t *testing.T) {
	addr, _, _ := start(t, Config{Handler: refuseOver1000})
	const size = 4 << 20
	c := dial(t, addr)
	c.send(fmt.Sprintf("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", size))
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.c.Write(bytes.Repeat([]byte("x"), size)); err != nil {
		t.Fatalf("writing the body: %v (the server reset the connection before the client could read its answer)", err)
	}
	resp, s, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("413 not read after the whole body: %v %v %+v", err, resp, s)
	}
	if !c.closed() {
		t.Fatal("connection open after 413")
	}
}

// TestHeaderChangedAfterWriteIgnored: a handler that changes the
// header after writing (net/http ignores the change): the fast path too.
func TestHeaderChangedAfterWriteIgnored(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(202)
		w.Header().Set("X-Late", "1")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, "x")
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 202 || resp.Header.Get("X-Late") != "" {
		t.Fatalf("%v %v", err, resp)
	}
}

// TestHeaderTooLarge431: a header past MaxHeaderBytes is answered 431 and
// the client can read it.
func TestHeaderTooLarge431(t *testing.T) {
	addr, _, _ := start(t, Config{MaxHeaderBytes: 16 << 10})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 431 {
		t.Fatalf("%v %v", err, resp)
	}
}

// TestReviewSilentConnWithoutReadHeaderTimeout: with ReadTimeout set and
// ReadHeaderTimeout zero, net/http (and the front's fasthttp, see New)
// bound the wait for a header by ReadTimeout; sniff uses
// ReadHeaderTimeout only, so a connection that sends nothing is held (a
// goroutine and a descriptor) for ever, and Close does not end it either.
func TestReviewSilentConnWithoutReadHeaderTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{Fast: []string{"/fast"}, Handler: http.HandlerFunc(echo), ReadTimeout: 300 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- f.Serve(ln) }()
	defer func() { f.Close(); <-done }()
	c := dial(t, ln.Addr().String())
	if !c.closed() {
		t.Fatal("a silent connection was not closed within 5 s with ReadTimeout 300ms (net/http closes it after ReadTimeout)")
	}
}

// TestReviewCloseLeavesActiveFastConnections: Close is documented to
// close fasthttp's connections (and the gateway calls it, with srv.Close,
// when requests outlive the shutdown deadline: "closing their
// connections"). fasthttp's ShutdownWithContext with a cancelled context
// closes only idle connections: a fast request whose body is still coming
// keeps its connection (and the handler its goroutine) until the read
// timeout. http.Server.Close closes every connection at once.
func TestReviewCloseLeavesActiveFastConnections(t *testing.T) {
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(204)
	})
	addr, f, _ := start(t, Config{Handler: h, ReadTimeout: 30 * time.Second})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nabc")
	<-entered
	_ = f.Close()
	_ = c.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("Close left an active fast connection open (net/http's Close closes it at once)")
	}
}

// countSink counts the records written.
type countSink struct {
	mu   sync.Mutex
	recs []event.Record
}

func (k *countSink) Write(_ context.Context, recs []event.Record) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.recs = append(k.recs, recs...)
	return nil
}

func (k *countSink) n() int { k.mu.Lock(); defer k.mu.Unlock(); return len(k.recs) }

// startIngest serves the real ingest handler on a Front.
func startIngest(t *testing.T, edit func(*ingest.Config)) (string, *countSink) {
	t.Helper()
	cfg := ingest.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	sink := &countSink{}
	s, err := ingest.New(cfg, sink, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	addr, _, _ := start(t, Config{Handler: mux, Fast: ingest.Paths(), BodyStartTimeout: cfg.BodyIdleTimeout, MaxHandoffBody: cfg.MaxBodyBytes})
	return addr, sink
}

// TestIngestOnFront: the real ingest handler through the adapter: pixel
// GET and HEAD, preflight, 405 with Allow, pipelined batches stored once
// each, 413 on Content-Length and on a chunked body that grows past the
// limit (answer readable, connection closed).
func TestIngestOnFront(t *testing.T) {
	addr, sink := startIngest(t, func(c *ingest.Config) { c.MaxBodyBytes = 1000 })
	c := dial(t, addr)
	c.send("GET /i.gif?e=view&p.a=1 HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/gif" || resp.ContentLength != 43 {
		t.Fatalf("GET /i.gif: %v %v", err, resp)
	}
	c.send("HEAD /i.gif HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err = http.ReadResponse(c.r, &http.Request{Method: http.MethodHead})
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "43" {
		t.Fatalf("HEAD /i.gif: %v %v", err, resp)
	}
	c.send("OPTIONS /v1/batch HTTP/1.1\r\nHost: h\r\nOrigin: https://a.test\r\nAccess-Control-Request-Method: POST\r\n\r\n")
	resp, _, err = c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://a.test" ||
		len(resp.Header.Values("Vary")) != 3 {
		t.Fatalf("preflight: %v %v", err, resp)
	}
	c.send("GET /v1/batch HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, _, err = c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST, OPTIONS" {
		t.Fatalf("405: %v %v", err, resp)
	}
	batch := `[{"event":"a"},{"event":"b"}]`
	req := "POST /v1/batch HTTP/1.1\r\nHost: h\r\ncontent-type: application/json\r\nContent-Length: " + itoa(len(batch)) + "\r\n\r\n" + batch
	c.send(req + req)
	for i := range 2 {
		resp, _, err = c.answerWithin(5 * time.Second)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("batch %d: %v %v", i, err, resp)
		}
	}
	if n := sink.n(); n != 5 {
		t.Fatalf("%d records, want 5 (pixel + 2x2)", n)
	}

	c = dial(t, addr)
	c.send("POST /v1/batch HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 5000))
	resp, _, err = c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 413 || !c.closed() {
		t.Fatalf("413 on Content-Length: %v %v", err, resp)
	}
	c = dial(t, addr)
	c.send("POST /v1/batch HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 5 {
		c.send("200\r\n" + strings.Repeat("x", 0x200) + "\r\n")
	}
	resp, _, err = c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 413 || !c.closed() {
		t.Fatalf("413 on a chunked body: %v %v", err, resp)
	}
}

// TestNoContentLengthOn204: net/http sends no Content-Length on
// a 204 (RFC 9110 8.6: a server MUST NOT).
func TestNoContentLengthOn204(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	var head []string
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
		head = append(head, line)
	}
	for _, l := range head {
		if strings.HasPrefix(strings.ToLower(l), "content-length") {
			t.Fatalf("204 with %q", l)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestShutdownRightAfterServe: Shutdown racing the start of Serve; Serve
// must return nil (it says so after Shutdown or Close).
func TestShutdownRightAfterServe(t *testing.T) {
	for i := range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := New(Config{Fast: []string{"/fast"}, Handler: http.HandlerFunc(echo)})
		done := make(chan error, 1)
		go func() { done <- f.Serve(ln) }()
		if i%2 == 0 {
			runtime.Gosched()
		}
		if err := f.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Serve returned %v after Shutdown, want nil", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Serve did not return after Shutdown", i)
		}
	}
}

// TestMiscRequestShapes: an empty query, a chunked body with a trailer
// (the next request is read right), an absolute-form target (net/http).
func TestMiscRequestShapes(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	c.send("POST /fast? HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n" +
		"GET /fast?a=%2F%20 HTTP/1.1\r\nHost: h\r\n\r\n" +
		"POST http://abs.test/fast HTTP/1.1\r\nHost: abs.test\r\nContent-Length: 1\r\n\r\nz")
	_, s, err := c.answerWithin(5 * time.Second)
	if err != nil || s.Server != "fasthttp" || s.Body != "hi" || s.RequestURI != "/fast?" || s.RawQuery != "" {
		t.Fatalf("1: %v %+v", err, s)
	}
	_, s, err = c.answerWithin(5 * time.Second)
	if err != nil || s.Server != "fasthttp" || s.RawQuery != "a=%2F%20" || s.Path != "/fast" {
		t.Fatalf("2: %v %+v", err, s)
	}
	_, s, err = c.answerWithin(5 * time.Second)
	if err != nil || s.Server != "net/http" || s.Body != "z" || s.Path != "/fast" || s.Host != "abs.test" {
		t.Fatalf("3: %v %+v", err, s)
	}
}

// TestShutdownDuringHandoff: Shutdown of both servers while a handed-off
// request runs on net/http: it is answered, both Serves end, no goroutine
// is left.
func TestShutdownDuringHandoff(t *testing.T) {
	before := runtime.NumGoroutine()
	entered := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		echo(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{Fast: []string{"/fast"}, Handler: h, ReadHeaderTimeout: time.Second, ReadTimeout: time.Second})
	srv := &http.Server{Handler: h}
	served := make(chan error, 2)
	go func() { served <- f.Serve(ln) }()
	go func() { served <- srv.Serve(f.NetListener()) }()
	idle := dial(t, ln.Addr().String()) // an idle fast keep-alive connection
	idle.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, _, err := idle.answerWithin(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	c := dial(t, ln.Addr().String())
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\nPOST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok")
	if _, _, err := c.answerWithin(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	shut := make(chan error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { shut <- f.Shutdown(ctx) }()
	go func() { shut <- srv.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	resp, s, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 200 || s.Body != "ok" {
		t.Fatalf("handed-off request in flight: %v %+v", err, s)
	}
	for range 2 {
		if err := <-shut; err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}
	if !idle.closed() {
		t.Error("idle fast connection open after Shutdown")
	}
	c.c.Close()
	idle.c.Close()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) { // fasthttp's clock and pool cleaner
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestHandoffHeaderFidelity: the header net/http sees after a handoff, as
// it would see it from the client: every line, each value as sent.
func TestHandoffHeaderFidelity(t *testing.T) {
	addr, _, _ := start(t, Config{})
	raw := "GET /other HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n" +
		"Cookie: a=1; weird; b=\"q r\"\r\nCookie: c=3\r\nX-Empty:\r\nX-Bytes: \xff\xfe\r\nUser-Agent: ua\r\n\r\n"
	c := dial(t, addr)
	c.send(raw)
	_, s, err := c.answerWithin(5 * time.Second)
	if err != nil || s.Server != "net/http" {
		t.Fatal(err, s)
	}
	want := map[string][]string{
		"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"},
		"Cookie": {"a=1; weird; b=\"q r\"", "c=3"}, "X-Empty": {""}, "User-Agent": {"ua"},
	}
	for k, v := range want {
		if got := s.Header[k]; strings.Join(got, "|") != strings.Join(v, "|") {
			t.Errorf("after the handoff net/http saw %s %q, the client sent %q", k, got, v)
		}
	}
}

// TestHandedOffConnTooLarge: on a connection handed over to net/http, a
// later request with a body net/http refuses (MaxBytesReader) while the
// client goes on sending still gets its 413.
func TestHandedOffConnTooLarge(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/other" && r.Method == "POST" {
			if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1000)); err != nil {
				http.Error(w, "too large", 413)
				return
			}
		}
		w.WriteHeader(204)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /other HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _, err := c.answerWithin(5 * time.Second); err != nil || resp.StatusCode != 204 {
		t.Fatal(err, resp)
	}
	c.send("POST /other HTTP/1.1\r\nHost: h\r\nContent-Length: 50000000\r\n\r\n")
	stop := make(chan struct{})
	go func() {
		chunk := strings.Repeat("y", 16384)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := io.WriteString(c.c, chunk); err != nil {
				return
			}
		}
	}()
	defer close(stop)
	resp, _, err := c.answerWithin(5 * time.Second)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("413 lost: %v %v", err, resp)
	}
}

// TestNonUTF8HeaderValue: obs-text bytes in a value reach the handler as
// sent, on both servers (net/http keeps them).
func TestNonUTF8HeaderValue(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Bytes") != "\xff\xfe" {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(204)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	for _, p := range []string{"/fast", "/other", "/fast"} {
		c.send("GET " + p + " HTTP/1.1\r\nHost: h\r\nX-Bytes: \xff\xfe\r\n\r\n")
		if resp, _, err := c.answerWithin(5 * time.Second); err != nil || resp.StatusCode != 204 {
			t.Fatalf("%s: %v %v", p, err, resp)
		}
	}
}

// TestRefusedLargeUploadAnswered (passes on loopback): a fast handler that refuses a
// request on its header (401, 415, 429...) without reading a large body
// the client is still sending. fasthttp answers with Connection: close and
// closes the socket at once with the body unread in its receive buffer:
// the kernel resets the connection and the client, still writing, often
// gets ECONNRESET instead of the answer. net/http closes such a
// connection with closeWriteAndWait (FIN, then rstAvoidanceDelay) so the
// answer gets through; the front lingers only after a 413.
func TestRefusedLargeUploadAnswered(t *testing.T) {
	addr, _, _ := start(t, Config{})
	lost := 0
	const rounds = 10
	for range rounds {
		c := dial(t, addr)
		c.send("POST /fast?skipbody=1&status=401 HTTP/1.1\r\nHost: h\r\nContent-Length: 100000000\r\n\r\n")
		stop := make(chan struct{})
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			chunk := strings.Repeat("z", 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := io.WriteString(c.c, chunk); err != nil {
					return
				}
			}
		}()
		time.Sleep(50 * time.Millisecond) // the answer is out; the client is still writing
		resp, _, err := c.answerWithin(5 * time.Second)
		close(stop)
		<-wrote
		if err != nil || resp.StatusCode != 401 {
			lost++
			t.Logf("answer lost: %v", err)
		}
		c.c.Close()
	}
	if lost > 0 {
		t.Fatalf("%d of %d 401 answers to a large upload lost to a reset (net/http delivers them)", lost, rounds)
	}
}

// TestOddTransferEncodings: net/http answers 501 to a Transfer-Encoding
// other than "chunked" (and 400 to a malformed one), and never falls back
// to Content-Length: a front that frames such a body by Content-Length
// while a proxy before it frames it otherwise is a smuggling vector.
func TestOddTransferEncodings(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, te := range []string{"gzip, chunked", "xchunked", "chunked, chunked"} {
		for _, p := range []string{"/fast", "/other"} {
			t.Run(te+p, func(t *testing.T) {
				c := dial(t, addr)
				c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: " + te + "\r\n\r\n" +
					"abcdGET " + p + "?x=smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
				resp, s, err := c.answerWithin(3 * time.Second)
				if err != nil {
					t.Logf("TE %q on %s: no answer (%v)", te, p, err)
					return
				}
				t.Logf("TE %q on %s: %d by %q body %q", te, p, resp.StatusCode, s.Server, s.Body)
				if resp.StatusCode < 400 && s.Body == "abcd" {
					t.Errorf("TE %q on %s: body framed by Content-Length (net/http: 501/400)", te, p)
				}
			})
		}
	}
}

// TestReviewTransferEncodingIdentity: net/http answers 501
// "Unsupported transfer encoding" to "Transfer-Encoding: identity" (with or
// without Content-Length) and closes. fasthttp takes it, frames the body by
// Content-Length, and a handoff re-serializes it as a plain Content-Length
// request, so both servers accept it. Generally: net/http answers 501 to a Transfer-Encoding
// other than "chunked" (and 400 to a malformed one), and never falls back
// to Content-Length: a front that frames such a body by Content-Length
// while a proxy before it frames it otherwise is a smuggling vector.
func TestReviewTransferEncodingIdentity(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, te := range []string{"identity"} {
		for _, p := range []string{"/fast", "/other"} {
			t.Run(te+p, func(t *testing.T) {
				c := dial(t, addr)
				c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: " + te + "\r\n\r\n" +
					"abcdGET " + p + "?x=smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
				resp, s, err := c.answerWithin(3 * time.Second)
				if err != nil {
					t.Logf("TE %q on %s: no answer (%v)", te, p, err)
					return
				}
				t.Logf("TE %q on %s: %d by %q body %q", te, p, resp.StatusCode, s.Server, s.Body)
				if resp.StatusCode < 400 && s.Body == "abcd" {
					t.Errorf("TE %q on %s: body framed by Content-Length (net/http: 501/400)", te, p)
				}
			})
		}
	}
}

// TestDifferentialHeaders sends the same request to the fast path and to
// a plain net/http server and compares what the handler saw of the
// header, host, target and body.
func TestDifferentialHeaders(t *testing.T) {
	addr, _, _ := start(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: http.HandlerFunc(echo)}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	for _, hdr := range []string{
		"X-A:   v  \r\n",
		"X_Under: 1\r\n",
		"x-lower-case: 1\r\nX-LOWER-CASE: 2\r\n",
		"Content-Type: text/plain; charset=UTF-8\r\n",
		"Accept-Encoding: gzip\r\nAccept-Encoding: br\r\n",
		"Connection: keep-alive\r\n",
		"X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n",
		"Authorization: Bearer abc\r\n",
		"Referer: http://x/?a=b\r\n",
		"Origin: null\r\n",
		"X-Tab:\tv\t\r\n",
	} {
		raw := "POST /fast?q=1 HTTP/1.1\r\nHost: h:8080\r\n" + hdr + "Content-Length: 2\r\n\r\nhi"
		get := func(a string) seen {
			c := dial(t, a)
			c.send(raw)
			_, s, err := c.answerWithin(5 * time.Second)
			if err != nil {
				t.Fatalf("%q: %v", hdr, err)
			}
			return s
		}
		f, n := get(addr), get(ln.Addr().String())
		if f.Server != "fasthttp" {
			t.Fatalf("%q served by %s", hdr, f.Server)
		}
		fh, nh := fmt.Sprint(f.Header), fmt.Sprint(n.Header)
		if fh != nh || f.Host != n.Host || f.RequestURI != n.RequestURI || f.Body != n.Body || f.ContentLength != n.ContentLength {
			t.Errorf("%q:\nfast     %s host %q uri %q\nnet/http %s host %q uri %q", hdr, fh, f.Host, f.RequestURI, nh, n.Host, n.RequestURI)
		}
	}
}

// TestHandlerConnectionCloseAndLongQuery: Connection: close from a handler
// ends the connection after the answer; a 15 KiB query (a pixel's data=)
// fits the 16 KiB header buffer.
func TestHandlerConnectionCloseAndLongQuery(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, strconv.Itoa(len(r.URL.RawQuery)))
	})
	addr, _, _ := start(t, Config{Handler: h, MaxHeaderBytes: 16 << 10})
	c := dial(t, addr)
	q := "data=" + strings.Repeat("A", 15<<10)
	c.send("GET /fast?" + q + " HTTP/1.1\r\nHost: h\r\nUser-Agent: Mozilla/5.0\r\n\r\n")
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("long query: %v %v", err, resp)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != strconv.Itoa(len(q)) {
		t.Fatalf("query of %s bytes seen, sent %d", b, len(q))
	}
	c.send("GET /fast?close=1 HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _, err := c.answerWithin(5 * time.Second); err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("Connection: close: %v %v", err, resp)
	}
	if !c.closed() {
		t.Fatal("connection open after the handler's Connection: close")
	}
}
