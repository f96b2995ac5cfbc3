package loadclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cServer starts a loopback server that speaks only HTTP/2 without TLS,
// with the HTTP/2 settings of conf if not nil. It counts the connections
// it accepted.
func h2cServer(tb testing.TB, conf *http.HTTP2Config, handler http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	tb.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.HTTP2 = conf
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv, &conns
}

// h2cTarget makes an h2c target of url; edit, if set, changes its config.
func h2cTarget(tb testing.TB, url string, h2conns int, edit func(*HTTPConfig)) *HTTP {
	tb.Helper()
	cfg := DefaultHTTPConfig()
	cfg.URL, cfg.Client, cfg.Connections, cfg.H2Conns = url, ClientH2C, 100000, h2conns
	if edit != nil {
		edit(&cfg)
	}
	h, err := NewHTTP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

// startAll starts n requests on target at once and returns their results
// once all are done, failing the test if that takes a minute.
func startAll(tb testing.TB, target bench.AsyncTarget, n int, timeout time.Duration) []bench.Result {
	tb.Helper()
	results := make([]bench.Result, n)
	var wg sync.WaitGroup
	wg.Add(n)
	deadline := time.Now().Add(timeout)
	for i := range n {
		target(context.Background(), deadline, func(r bench.Result) {
			results[i] = r
			wg.Done()
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		tb.Fatalf("%d requests not all done after a minute", n)
	}
	return results
}

// countResults counts the results by status, or by error kind.
func countResults(results []bench.Result) map[string]int {
	m := map[string]int{}
	for _, r := range results {
		if r.Err != nil {
			m[bench.Classify(r.Err)]++
		} else {
			m[r.Status]++
		}
	}
	return m
}

// TestBenchH2CRequests: method, path, query, authority, headers and body
// reach the server intact, and the answer's status and size come back.
func TestBenchH2CRequests(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, uri, host, ctype, enc, test string
		length                              int64
		body                                []byte
	}
	got := make(chan seen, 100)
	srv, _ := h2cServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding"), r.Header.Get("X-Test"), r.ContentLength, b}
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
		_, _ = w.Write(bytes.Repeat([]byte("a"), 1000))
	})
	for _, tc := range []struct {
		name   string
		edit   func(*HTTPConfig)
		status string
		ok     bool
	}{
		{"generated events", func(c *HTTPConfig) { c.URL += "/v1/batch?status=202" }, "202", true},
		{"gzip", func(c *HTTPConfig) { c.URL += "/v1/batch?status=200"; c.Gzip = true }, "200", true},
		{"body file, PUT, Host", func(c *HTTPConfig) {
			c.URL += "/put?status=503"
			c.Method, c.Body = http.MethodPut, []byte("plain")
			c.Header.Set("Host", "example.test")
			c.Header.Set("Connection", "close") // not for HTTP/2: left out
		}, "503", false},
	} {
		h := h2cTarget(t, srv.URL, 2, func(c *HTTPConfig) {
			c.Header = http.Header{"X-Test": {"yes"}}
			tc.edit(c)
		})
		for i := range 4 {
			var res bench.Result
			if i%2 == 0 {
				res = h.Do(context.Background())
			} else {
				res = startAll(t, h.Async(), 1, 10*time.Second)[0]
			}
			if res.Err != nil || res.Status != tc.status || res.OK != tc.ok || res.Received != 1000 || res.Sent == 0 || res.Events != h.cfg.Events {
				t.Fatalf("%s: %+v", tc.name, res)
			}
			s := <-got
			if s.method != h.cfg.Method || s.test != "yes" || s.length != res.Sent || s.uri != h.url[len(srv.URL):] {
				t.Errorf("%s: server saw %+v", tc.name, s)
			}
			switch tc.name {
			case "body file, PUT, Host":
				if s.host != "example.test" || string(s.body) != "plain" || s.ctype != "" {
					t.Errorf("%s: server saw %+v", tc.name, s)
				}
			default:
				if s.ctype != "application/json" || !looksJSON(s.body) || (s.enc == "gzip") != h.cfg.Gzip {
					t.Errorf("%s: server saw %+v", tc.name, s)
				}
			}
		}
	}
}

// TestBenchH2CManySlowRequests: thousands of requests in flight at once
// over two connections all complete.
func TestBenchH2CManySlowRequests(t *testing.T) {
	t.Parallel()
	const n = 3000
	var inflight, peak atomic.Int64
	srv, conns := h2cServer(t, &http.HTTP2Config{MaxConcurrentStreams: n}, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c := inflight.Add(1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(500 * time.Millisecond)
		inflight.Add(-1)
	})
	h := h2cTarget(t, srv.URL, 2, nil)
	counts := countResults(startAll(t, h.Async(), n, time.Minute))
	if counts["200"] != n {
		t.Fatalf("results %v: want %d × 200", counts, n)
	}
	if c := conns.Load(); c != 2 {
		t.Errorf("%d connections, want 2", c)
	}
	// Not a speed test: only that they were in flight together, not one
	// after another.
	if peak.Load() < 100 {
		t.Errorf("at most %d requests at once on the server", peak.Load())
	}
}

// TestBenchH2CMaxConcurrentStreams: the server's limit on streams is never
// exceeded; requests beyond it wait their turn. The server counts the open
// streams itself: Go's would refuse those over its limit.
func TestBenchH2CMaxConcurrentStreams(t *testing.T) {
	t.Parallel()
	const limit, n = 5, 200
	var mu sync.Mutex
	open, peak := 0, 0
	addr, _ := rawH2Server(t, []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: limit}}, func(c *rawH2Conn) {
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				return
			}
			end := uint32(0)
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
				}
			case *http2.MetaHeadersFrame:
				mu.Lock()
				open++
				peak = max(peak, open)
				mu.Unlock()
				if f.StreamEnded() {
					end = f.StreamID
				}
			case *http2.DataFrame:
				if f.Length > 0 {
					_ = c.write(func(fr *http2.Framer) error {
						_ = fr.WriteWindowUpdate(0, f.Length)
						return fr.WriteWindowUpdate(f.StreamID, f.Length)
					})
				}
				if f.StreamEnded() {
					end = f.StreamID
				}
			}
			if end != 0 {
				time.AfterFunc(5*time.Millisecond, func() {
					mu.Lock()
					open--
					mu.Unlock()
					_ = c.respond(end, 200, nil)
				})
			}
		}
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	counts := countResults(startAll(t, h.Async(), n, time.Minute))
	if counts["200"] != n {
		t.Fatalf("results %v: want %d × 200", counts, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > limit || peak < 2 {
		t.Errorf("%d streams at once on one connection, the server allows %d", peak, limit)
	}
}

// TestBenchH2CLargeAnswer: an answer much larger than the client's receive
// windows arrives whole: the client gives the windows back as it reads.
func TestBenchH2CLargeAnswer(t *testing.T) {
	t.Parallel()
	const size = 10 << 20
	srv, _ := h2cServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		chunk := make([]byte, 64<<10)
		for written := 0; written < size; written += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	h := h2cTarget(t, srv.URL, 1, nil)
	h.h2c.streamWindow, h.h2c.connWindow = 65535, 65535
	for _, r := range startAll(t, h.Async(), 2, 20*time.Second) {
		if r.Err != nil || r.Status != "200" || r.Received != size {
			t.Errorf("%+v, want 200 with %d bytes", r, size)
		}
	}
}

// TestBenchH2CFlowControl: bodies larger than the server's windows arrive
// whole: the client waits for WINDOW_UPDATE, on the stream and on the
// connection.
func TestBenchH2CFlowControl(t *testing.T) {
	t.Parallel()
	body := make([]byte, 1<<20+12345)
	for i := range body {
		body[i] = byte(i * 7)
	}
	want := sha256.Sum256(body)
	srv, _ := h2cServer(t, &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10},
		func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil || sha256.Sum256(b) != want || r.ContentLength != int64(len(body)) {
				http.Error(w, "body differs", http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
	h := h2cTarget(t, srv.URL, 1, func(c *HTTPConfig) { c.Body = body })
	counts := countResults(startAll(t, h.Async(), 8, time.Minute))
	if counts["200"] != 8 {
		t.Fatalf("results %v: want 8 × 200", counts)
	}
}

// TestBenchH2CTimeout: a request past its deadline fails as a timeout, and
// its stream is reset: the server's handler sees its context end.
func TestBenchH2CTimeout(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 10)
	srv, _ := h2cServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(time.Minute):
		}
	})
	h := h2cTarget(t, srv.URL, 1, nil)
	start := time.Now()
	res := startAll(t, h.Async(), 3, 200*time.Millisecond)
	if counts := countResults(res); counts[bench.KindTimeout] != 3 {
		t.Fatalf("results %v: want 3 timeouts", counts)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("timed out after %v, before the deadline", d)
	}
	for range 3 {
		select {
		case <-cancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("the server's handler was not cancelled")
		}
	}
	// A blocking call times out by its context.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if r := h.Do(ctx); bench.Classify(r.Err) != bench.KindTimeout {
		t.Errorf("Do: %+v, want a timeout", r)
	}
}

// TestBenchH2CBrokenConnections: connections the server closes fail their
// requests with a classified error; later requests go over new ones. A
// stream the server resets fails alone.
func TestBenchH2CBrokenConnections(t *testing.T) {
	t.Parallel()
	var block atomic.Bool
	block.Store(true)
	arrived := make(chan struct{}, 100)
	srv, conns := h2cServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("abort") != "" {
			panic(http.ErrAbortHandler) // resets the stream
		}
		if block.Load() {
			arrived <- struct{}{}
			<-r.Context().Done()
		}
	})
	h := h2cTarget(t, srv.URL, 2, nil)
	results := make(chan bench.Result, 10)
	for range 10 {
		h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { results <- r })
	}
	for range 10 {
		<-arrived
	}
	srv.CloseClientConnections()
	var failed []bench.Result
	for range 10 {
		failed = append(failed, <-results)
	}
	counts := countResults(failed)
	if counts[bench.KindClosed]+counts[bench.KindReset] != 10 {
		t.Fatalf("results %v: want all 10 closed or reset", counts)
	}
	block.Store(false)
	if counts := countResults(startAll(t, h.Async(), 20, 30*time.Second)); counts["200"] != 20 {
		t.Fatalf("after the server closed the connections: %v, want 20 × 200", counts)
	}
	if c := conns.Load(); c != 4 {
		t.Errorf("%d connections, want 2 then 2 more", c)
	}

	abort := h2cTarget(t, srv.URL+"/?abort=1", 1, nil)
	if counts := countResults(startAll(t, abort.Async(), 3, 30*time.Second)); counts[bench.KindReset] != 3 {
		t.Errorf("streams reset by the server: %v, want 3 reset", counts)
	}
}

// TestBenchH2CRefused: a server that is not there is a refused request,
// every time: the client dials again.
func TestBenchH2CRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := h2cTarget(t, "http://"+addr+"/", 2, nil)
	if counts := countResults(startAll(t, h.Async(), 10, 30*time.Second)); counts[bench.KindRefused] != 10 {
		t.Errorf("results %v: want 10 refused", counts)
	}
	h.Close()
	if r := h.Do(context.Background()); !errors.Is(r.Err, net.ErrClosed) {
		t.Errorf("after Close: %+v, want closed", r)
	}
}

// TestBenchH2CRunAsync: an open loop over h2c, run by RunAsync, sends what
// is due, and an interrupted one cancels what is in flight, on the server
// too.
func TestBenchH2CRunAsync(t *testing.T) {
	t.Parallel()
	var inflight atomic.Int64
	srv, _ := h2cServer(t, &http.HTTP2Config{MaxConcurrentStreams: 1000}, func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Add(-1)
		_, _ = io.Copy(io.Discard, r.Body)
		d := 100 * time.Millisecond
		if r.URL.Query().Get("hang") != "" {
			d = time.Hour
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	})
	h := h2cTarget(t, srv.URL, 2, nil)
	rep := runAsync(t, openLoop(200, 1000, 100*time.Millisecond, time.Second), h.Async())
	if rep.Intended != 200 || rep.Requests+rep.Dropped != 200 || rep.OK != rep.Requests || rep.Dropped > 20 || rep.WarmupRequests != 20 {
		t.Errorf("intended %d, sent %d, ok %d, dropped %d, warmup %d, errors %+v", rep.Intended, rep.Requests, rep.OK, rep.Dropped, rep.WarmupRequests, rep.Errors)
	}

	hang := h2cTarget(t, srv.URL+"/?hang=1", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	rep, err := bench.RunAsync(ctx, openLoop(100, 1000, 100*time.Millisecond, time.Minute), hang.Async())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Requests != 0 || rep.Unfinished+rep.Dropped < 30 {
		t.Errorf("interrupted %v: %d requests, %d unfinished, %d dropped, errors %+v", rep.Interrupted, rep.Requests, rep.Unfinished, rep.Dropped, rep.Errors)
	}
	for deadline := time.Now().Add(30 * time.Second); inflight.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still in the server's handlers after the interrupt", inflight.Load())
		}
	}
}

// TestBenchH2CGoAway: a server shutting down sends GOAWAY; the requests it
// took still get their answers, and later ones go over a new connection
// (to the server that took over the address).
func TestBenchH2CGoAway(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release
	})
	serve := func(addr string) (*http.Server, net.Listener) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
		srv.Protocols.SetUnencryptedHTTP2(true)
		go func() { _ = srv.Serve(ln) }()
		return srv, ln
	}
	old, ln := serve("127.0.0.1:0")
	addr := ln.Addr().String()
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	first := make(chan bench.Result, 5)
	for range 5 {
		h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { first <- r })
	}
	for range 5 {
		<-arrived
	}
	shutdown := make(chan error, 1)
	go func() { shutdown <- old.Shutdown(context.Background()) }() // GOAWAY, then waits for the 5
	slot := &h.h2c.slots[0]
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		slot.mu.Lock()
		s := slot.s
		slot.mu.Unlock()
		if !s.usable() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the GOAWAY")
		}
	}
	next, _ := serve(addr)
	t.Cleanup(func() { next.Close() })
	close(release)
	if counts := countResults([]bench.Result{<-first, <-first, <-first, <-first, <-first}); counts["200"] != 5 {
		t.Errorf("requests taken before the GOAWAY: %v, want 5 × 200", counts)
	}
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	if counts := countResults(startAll(t, h.Async(), 5, 30*time.Second)); counts["200"] != 5 {
		t.Errorf("requests after the GOAWAY: %v, want 5 × 200 over a new connection", counts)
	}
}

// rawH2Server starts a loopback HTTP/2 server made of x/net's Framer, for
// behaviour Go's server does not show. For each connection, it reads the
// client preface (unless noPreface), sends settings (nil: none at all),
// then calls serve with the connection's framer; the connection is closed
// when serve returns or at the end of the test.
func rawH2Server(tb testing.TB, settings []http2.Setting, serve func(c *rawH2Conn)) (addr string, conns *atomic.Int64) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	conns = new(atomic.Int64)
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	done := make(chan struct{})
	tb.Cleanup(func() {
		close(done)
		ln.Close()
		mu.Lock()
		for _, nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			open = append(open, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				c := &rawH2Conn{nc: nc, fr: http2.NewFramer(nc, nc), done: done}
				c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				c.enc = hpack.NewEncoder(&c.hbuf)
				if settings != nil {
					preface := make([]byte, len(http2.ClientPreface))
					if _, err := io.ReadFull(nc, preface); err != nil {
						return
					}
					if err := c.fr.WriteSettings(settings...); err != nil {
						return
					}
				}
				serve(c)
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// rawH2Conn is a connection of rawH2Server. Its write methods may be called
// from any goroutine.
type rawH2Conn struct {
	nc   net.Conn
	fr   *http2.Framer
	done <-chan struct{} // closed at the end of the test
	mu   sync.Mutex      // guards the writing and below
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

func (c *rawH2Conn) write(f func(fr *http2.Framer) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f(c.fr)
}

// header sends the header of an answer to stream id, ending the stream if
// end.
func (c *rawH2Conn) header(id uint32, status int, end bool) error {
	return c.write(func(fr *http2.Framer) error { return c.writeHeader(id, status, end) })
}

// writeHeader is header with c.mu held.
func (c *rawH2Conn) writeHeader(id uint32, status int, end bool) error {
	c.hbuf.Reset()
	_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

// respond answers stream id with status and body.
func (c *rawH2Conn) respond(id uint32, status int, body []byte) error {
	return c.write(func(fr *http2.Framer) error {
		if err := c.writeHeader(id, status, len(body) == 0); err != nil {
			return err
		}
		for len(body) > 0 {
			n := min(len(body), 16384)
			if err := fr.WriteData(id, n == len(body), body[:n]); err != nil {
				return err
			}
			body = body[n:]
		}
		return nil
	})
}

// requests reads frames, acknowledging settings and pings, and calls
// onRequest with the stream id of each request once its body ended, until
// onRequest returns false or reading fails.
func (c *rawH2Conn) requests(onRequest func(id uint32) bool) error {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		end := uint32(0)
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				end = f.StreamID
			}
		case *http2.DataFrame:
			if f.Length > 0 {
				_ = c.write(func(fr *http2.Framer) error {
					_ = fr.WriteWindowUpdate(0, f.Length)
					return fr.WriteWindowUpdate(f.StreamID, f.Length)
				})
			}
			if f.StreamEnded() {
				end = f.StreamID
			}
		}
		if end != 0 && !onRequest(end) {
			return nil
		}
	}
}

// waitClosed waits for the client to close nc, failing the test after
// timeout.
func waitClosed(tb testing.TB, nc net.Conn, timeout time.Duration) {
	tb.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, nc)
	if err != nil {
		tb.Errorf("the client did not close the connection within %v: %v", timeout, err)
	}
}

// closeWithin closes h, failing the test if that takes longer than timeout.
func closeWithin(tb testing.TB, h *HTTP, timeout time.Duration) {
	tb.Helper()
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(timeout):
		tb.Fatalf("Close did not return within %v", timeout)
	}
}

// TestBenchH2CGoAwayDrainedClosed: a connection that got GOAWAY is closed
// by the client once its last stream ends, however it ends (here with DATA,
// the usual end of an answer with a body), and Close does not wait for the
// server to close it.
func TestBenchH2CGoAwayDrainedClosed(t *testing.T) {
	t.Parallel()
	closedByClient := make(chan bool, 1)
	addr, _ := rawH2Server(t, []http2.Setting{}, func(c *rawH2Conn) {
		_ = c.requests(func(id uint32) bool {
			_ = c.write(func(fr *http2.Framer) error { return fr.WriteGoAway(id, http2.ErrCodeNo, nil) })
			_ = c.respond(id, 200, []byte("answer"))
			return false
		})
		_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c.nc)
		closedByClient <- err == nil
		<-c.done // left open otherwise, as a server might leave it
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	if counts := countResults(startAll(t, h.Async(), 1, 30*time.Second)); counts["200"] != 1 {
		t.Fatalf("results %v, want 1 × 200", counts)
	}
	if !<-closedByClient {
		t.Error("the client did not close the drained connection")
	}
	closeWithin(t, h, 10*time.Second)
}

// TestBenchH2CPeerNeverReads: a server that stops reading blocks the
// client's writes; the requests still time out at their deadline, and
// Close returns.
func TestBenchH2CPeerNeverReads(t *testing.T) {
	t.Parallel()
	addr, _ := rawH2Server(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1 << 30}}, func(c *rawH2Conn) {
		_ = c.write(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<30) })
		<-c.done // reads nothing more
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, func(c *HTTPConfig) { c.Body = make([]byte, 48<<20) })
	start := time.Now()
	results := make(chan bench.Result, 2)
	for range 2 {
		h.Async()(context.Background(), start.Add(500*time.Millisecond), func(r bench.Result) { results <- r })
	}
	for range 2 {
		select {
		case r := <-results:
			if bench.Classify(r.Err) != bench.KindTimeout {
				t.Errorf("%+v, want a timeout", r)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no result 20 s after the deadline")
		}
	}
	closeWithin(t, h, 10*time.Second)
}

// waitResult waits for one result, failing the test after timeout.
func waitResult(tb testing.TB, results <-chan bench.Result, timeout time.Duration) bench.Result {
	tb.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(timeout):
		tb.Fatalf("no result within %v", timeout)
		return bench.Result{}
	}
}

// TestBenchH2CInvalidFrames: a server breaking the protocol fails its
// connection's requests with an error, instead of looping or answering.
func TestBenchH2CInvalidFrames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		settings []http2.Setting
		before   func(c *rawH2Conn) error
		answer   func(c *rawH2Conn, id uint32) error
	}{
		{name: "MAX_FRAME_SIZE 0", settings: []http2.Setting{{ID: http2.SettingMaxFrameSize, Val: 0}}},
		{name: "INITIAL_WINDOW_SIZE too large", settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1 << 31}}},
		{name: "connection window overflow", before: func(c *rawH2Conn) error {
			return c.write(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<31-1) })
		}},
		{name: "frame larger than advertised", answer: func(c *rawH2Conn, id uint32) error {
			if err := c.header(id, 200, false); err != nil {
				return err
			}
			return c.write(func(fr *http2.Framer) error { return fr.WriteData(id, true, make([]byte, 20000)) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			settings := tc.settings
			if settings == nil {
				settings = []http2.Setting{}
			}
			addr, _ := rawH2Server(t, settings, func(c *rawH2Conn) {
				if tc.before != nil && tc.before(c) != nil {
					return
				}
				_ = c.requests(func(id uint32) bool {
					if tc.answer != nil {
						return tc.answer(c, id) == nil
					}
					return c.respond(id, 200, []byte("answer")) == nil
				})
			})
			h := h2cTarget(t, "http://"+addr+"/", 1, nil)
			results := make(chan bench.Result, 1)
			h.Async()(context.Background(), time.Now().Add(10*time.Second), func(r bench.Result) { results <- r })
			r := waitResult(t, results, 30*time.Second)
			if r.Err == nil || bench.Classify(r.Err) == bench.KindTimeout {
				t.Errorf("%+v, want a failure other than a timeout", r)
			}
			t.Log(r.Err)
			closeWithin(t, h, 10*time.Second)
		})
	}
}

// TestBenchH2CNoResetOfReset: a stream the server resets before its body is
// all sent is not reset back (RFC 9113 5.4.2).
func TestBenchH2CNoResetOfReset(t *testing.T) {
	t.Parallel()
	rstBack := make(chan bool, 1)
	addr, _ := rawH2Server(t, []http2.Setting{}, func(c *rawH2Conn) {
		reset := uint32(0)
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
				}
			case *http2.MetaHeadersFrame:
				if reset == 0 {
					reset = f.StreamID
					_ = c.write(func(fr *http2.Framer) error {
						_ = fr.WriteRSTStream(reset, http2.ErrCodeCancel)
						return fr.WritePing(false, [8]byte{1})
					})
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == reset {
					rstBack <- true
					return
				}
			case *http2.PingFrame:
				if f.IsAck() {
					rstBack <- false
					<-c.done
					return
				}
			}
		}
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, func(c *HTTPConfig) { c.Body = make([]byte, 1<<20) })
	results := make(chan bench.Result, 1)
	h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { results <- r })
	if r := waitResult(t, results, 30*time.Second); bench.Classify(r.Err) != bench.KindReset {
		t.Errorf("%+v, want reset", r)
	}
	select {
	case back := <-rstBack:
		if back {
			t.Error("the client reset a stream the server had reset")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw neither a RST_STREAM nor the PING's ack")
	}
}

// TestBenchH2CNoStreamsAllowed: requests a server allows no stream for time
// out, and are not kept queued.
func TestBenchH2CNoStreamsAllowed(t *testing.T) {
	t.Parallel()
	addr, _ := rawH2Server(t, []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 0}}, func(c *rawH2Conn) {
		_ = c.requests(func(uint32) bool { return true })
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	if counts := countResults(startAll(t, h.Async(), 50, 300*time.Millisecond)); counts[bench.KindTimeout] != 50 {
		t.Fatalf("results %v, want 50 timeouts", counts)
	}
	slot := &h.h2c.slots[0]
	slot.mu.Lock()
	s := slot.s
	slot.mu.Unlock()
	s.mu.Lock()
	queued := len(s.pending)
	s.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d requests that timed out still queued", queued)
	}
}

// TestBenchH2CNoSettings: a server that accepts the connection but never
// sends SETTINGS fails it, within seconds: the requests do not wait for
// their deadline.
func TestBenchH2CNoSettings(t *testing.T) {
	t.Parallel()
	addr, _ := rawH2Server(t, nil, func(c *rawH2Conn) {
		_, _ = io.Copy(io.Discard, c.nc)
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	results := make(chan bench.Result, 1)
	h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { results <- r })
	if r := waitResult(t, results, 30*time.Second); r.Err == nil || bench.Classify(r.Err) == bench.KindTimeout {
		t.Errorf("%+v, want the connection failed", r)
	}
	closeWithin(t, h, 10*time.Second)
}

// TestBenchH2CGoAwayRetries: the requests above a GOAWAY's last stream id
// were not processed: they go over a new connection and succeed there.
func TestBenchH2CGoAwayRetries(t *testing.T) {
	t.Parallel()
	var first atomic.Bool
	addr, conns := rawH2Server(t, []http2.Setting{}, func(c *rawH2Conn) {
		if !first.CompareAndSwap(false, true) {
			_ = c.requests(func(id uint32) bool { return c.respond(id, 200, nil) == nil })
			return
		}
		var ids []uint32
		_ = c.requests(func(id uint32) bool {
			if ids = append(ids, id); len(ids) < 3 {
				return true
			}
			_ = c.write(func(fr *http2.Framer) error { return fr.WriteGoAway(ids[0], http2.ErrCodeNo, nil) })
			return c.respond(ids[0], 200, nil) == nil
		})
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	if counts := countResults(startAll(t, h.Async(), 3, 30*time.Second)); counts["200"] != 3 {
		t.Errorf("results %v, want 3 × 200", counts)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestBenchH2CDeadPeer: a connection the server no longer answers on (here
// it reads but never writes) is pinged, then failed: its requests do not
// wait for their deadline.
func TestBenchH2CDeadPeer(t *testing.T) {
	t.Parallel()
	addr, _ := rawH2Server(t, []http2.Setting{}, func(c *rawH2Conn) {
		_, _ = io.Copy(io.Discard, c.nc)
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	h.h2c.pingIdle, h.h2c.pingTimeout = 200*time.Millisecond, 300*time.Millisecond
	results := make(chan bench.Result, 1)
	h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { results <- r })
	if r := waitResult(t, results, 30*time.Second); bench.Classify(r.Err) != bench.KindClosed {
		t.Errorf("%+v, want the connection closed", r)
	}
	closeWithin(t, h, 10*time.Second)
}

// TestBenchH2CStalledWrite: a connection whose writes make no progress is
// failed after the write timeout.
func TestBenchH2CStalledWrite(t *testing.T) {
	t.Parallel()
	addr, _ := rawH2Server(t, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1 << 30}}, func(c *rawH2Conn) {
		_ = c.write(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<30) })
		<-c.done // reads nothing more
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, func(c *HTTPConfig) { c.Body = make([]byte, 48<<20) })
	h.h2c.writeTimeout = 500 * time.Millisecond
	results := make(chan bench.Result, 1)
	h.Async()(context.Background(), time.Now().Add(time.Minute), func(r bench.Result) { results <- r })
	if r := waitResult(t, results, 30*time.Second); bench.Classify(r.Err) != bench.KindClosed {
		t.Errorf("%+v, want the connection closed", r)
	}
	closeWithin(t, h, 10*time.Second)
}

// TestBenchH2CGoAwayRetriesQueued: the requests still queued for a stream
// when a GOAWAY comes go over a new connection.
func TestBenchH2CGoAwayRetriesQueued(t *testing.T) {
	t.Parallel()
	var first atomic.Bool
	addr, conns := rawH2Server(t, []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}}, func(c *rawH2Conn) {
		if !first.CompareAndSwap(false, true) {
			_ = c.requests(func(id uint32) bool { return c.respond(id, 200, nil) == nil })
			return
		}
		_ = c.requests(func(id uint32) bool {
			_ = c.write(func(fr *http2.Framer) error { return fr.WriteGoAway(id, http2.ErrCodeNo, nil) })
			return c.respond(id, 200, nil) == nil
		})
		<-c.done
	})
	h := h2cTarget(t, "http://"+addr+"/", 1, nil)
	if counts := countResults(startAll(t, h.Async(), 3, 30*time.Second)); counts["200"] != 3 {
		t.Errorf("results %v, want 3 × 200", counts)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}
