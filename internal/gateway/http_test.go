package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// serveHTTP runs newServer(cfg) with handler h on 127.0.0.1:0 and returns
// its address; the server is closed at the end of the test.
func serveHTTP(tb testing.TB, cfg Config, h http.Handler) string {
	tb.Helper()
	srv, err := newServer(cfg, h, testkit.Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

// h2cConn is a raw HTTP/2 connection without TLS: the test decides what
// the client advertises and never reads what it is not asked to.
type h2cConn struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// dialH2C opens an h2c connection advertising settings, and returns it
// with the server's SETTINGS.
func dialH2C(tb testing.TB, addr string, settings ...http2.Setting) (*h2cConn, *http2.SettingsFrame) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		tb.Fatal(err)
	}
	h := &h2cConn{c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.hb)
	if err := h.fr.WriteSettings(settings...); err != nil {
		tb.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			tb.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			_ = c.SetReadDeadline(time.Time{})
			if err := h.fr.WriteSettingsAck(); err != nil {
				tb.Fatal(err)
			}
			return h, sf
		}
	}
}

// get opens stream id with GET path, no body.
func (h *h2cConn) get(tb testing.TB, id uint32, path string) {
	tb.Helper()
	h.hb.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "inlet"}, {Name: ":path", Value: path}} {
		_ = h.enc.WriteField(f)
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		tb.Fatal(err)
	}
}

// TestSlowReaderH2C: an h2c client that opens a window of zero (it never
// reads an answer) held a handler goroutine per stream until the server's
// write timeout, 45 s, and could open 1,000 streams per connection. Now a
// connection takes 128 streams, and an answer not read within
// --response-write-timeout is cut, which ends its handler.
func TestSlowReaderH2C(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.ResponseWriteTimeout = 300 * time.Millisecond
	var in atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		defer in.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<10))
		_ = http.NewResponseController(w).Flush() // blocks until the client opens its window
	})
	addr := serveHTTP(t, cfg, h)
	c, sf := dialH2C(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 128 {
		t.Errorf("the server advertises MAX_CONCURRENT_STREAMS %d (set: %v), want 128 by default", v, ok)
	}
	const streams = 100
	for i := range streams {
		c.get(t, uint32(2*i+1), "/slow")
	}
	testkit.WaitFor(t, 5*time.Second, "every stream in its handler", func() bool { return in.Load() == streams })
	start := time.Now()
	testkit.WaitFor(t, 5*time.Second, "the handlers of unread answers ended", func() bool { return in.Load() == 0 })
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("handlers ended %v after their answers were written, want about --response-write-timeout", d)
	}
	// The server still serves others.
	resp, err := http.Get("http://" + addr + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("another client: %d", resp.StatusCode)
	}
}

// TestMaxRequests: each class of requests (ingest, request-reply, the
// rest) has its share of --max-requests: past it a request of that class is
// answered 503 with Retry-After at once, while the other classes and the
// probes still answer; a slot given back is taken again, and a request
// that gives its slot back early (a request-reply call waiting for its
// reply) holds none. Refusals are counted by class.
func TestMaxRequests(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRequests = 8 // ingest 4, rpc 2, other 2
	release := make(chan struct{})
	var in atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("release") {
			w.(reply.SlotReleaser).ReleaseSlot()
		}
		if r.URL.Query().Has("block") {
			in.Add(1)
			<-release
		}
	})
	mux.HandleFunc("/healthz", (&Gateway{}).serveHealth)
	l := limitRequests(cfg, mux).(*limited)
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	block := func(path string, n int) {
		for range n {
			wg.Go(func() {
				if r := testkit.Do(t, "GET", srv.URL+path, nil); r.Status != 200 {
					t.Errorf("a blocked request to %s: %s", path, r)
				}
			})
		}
	}
	refused := func(path, class string, limit int) {
		t.Helper()
		start := time.Now()
		r := testkit.Do(t, "GET", srv.URL+path, nil)
		want := fmt.Sprintf("inlet is serving %d %s requests, the most it serves at once (their share of --max-requests)", limit, class)
		if r.Status != 503 || r.Header.Get("Retry-After") != "2" || !strings.Contains(string(r.Body), want) {
			t.Errorf("%s past its share: %s (Retry-After %q), want 503 with Retry-After 2 and %q", path, r, r.Header.Get("Retry-After"), want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the refusal took %v, want at once", d)
		}
	}
	served := func(path string) {
		t.Helper()
		if r := testkit.Do(t, "GET", srv.URL+path, nil); r.Status != 200 {
			t.Errorf("%s: %s, want 200", path, r)
		}
	}

	block("/ui/stream?block", 2)
	testkit.WaitFor(t, 5*time.Second, "2 other requests in flight", func() bool { return in.Load() == 2 })
	refused("/nowhere", "other", 2)
	served("/v1/batch")
	served("/v1/rpc/a")
	block("/v1/batch?block", 2)
	block("/i?block", 2)
	testkit.WaitFor(t, 5*time.Second, "4 ingest requests in flight", func() bool { return in.Load() == 6 })
	refused("/v1/track", "ingest", 4)
	served("/v1/rpc/a")
	served("/healthz")
	// Calls that give their slot back hold none: more than the share wait.
	block("/v1/rpc/a?block&release", 5)
	testkit.WaitFor(t, 5*time.Second, "5 calls waiting", func() bool { return in.Load() == 11 })
	served("/v1/rpc/a")
	block("/v1/rpc/a?block", 2)
	testkit.WaitFor(t, 5*time.Second, "2 calls holding their slots", func() bool { return in.Load() == 13 })
	refused("/v1/rpc/b", "rpc", 2)

	close(release)
	wg.Wait()
	served("/nowhere")
	served("/v1/track")
	served("/v1/rpc/b")
	if err := testutil.CollectAndCompare(l, strings.NewReader(`
# HELP inlet_http_requests_refused_total HTTP requests answered 503 because their class had its share of --max-requests in flight.
# TYPE inlet_http_requests_refused_total counter
inlet_http_requests_refused_total{class="ingest"} 1
inlet_http_requests_refused_total{class="other"} 1
inlet_http_requests_refused_total{class="rpc"} 1
`), "inlet_http_requests_refused_total"); err != nil {
		t.Error(err)
	}
	if got := DefaultConfig().maxRequests(); got != 4096 {
		t.Errorf("default --max-requests %d, want 4096 (64 MiB / 16 KiB)", got)
	}
	if got, want := classLimits(4096), [numClasses]int64{2048, 1024, 1024}; got != want {
		t.Errorf("shares of 4096 by class: %v, want %v", got, want)
	}
}

// TestConnBudgetShare: every request of one connection carries the same
// membudget.Conn, HTTP/2 streams too, so ingest can bound what one
// connection holds; another connection has its own.
func TestConnBudgetShare(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]*membudget.Conn{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen[r.URL.Query().Get("c")] = append(seen[r.URL.Query().Get("c")], membudget.ConnFrom(r.Context()))
	})
	addr := serveHTTP(t, DefaultConfig(), h)
	for _, client := range []string{"h2c", "h1"} {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		if client == "h2c" {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		for range 2 {
			req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+addr+"/?c="+client, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
	}
	mu.Lock()
	defer mu.Unlock()
	h2, h1 := seen["h2c"], seen["h1"]
	if len(h2) != 2 || len(h1) != 2 || h2[0] == nil || h1[0] == nil {
		t.Fatalf("connections seen: h2c %v, h1 %v", h2, h1)
	}
	if h2[0] != h2[1] || h1[0] != h1[1] {
		t.Errorf("requests of one connection have different Conns: h2c %p %p, h1 %p %p", h2[0], h2[1], h1[0], h1[1])
	}
	if h2[0] == h1[0] {
		t.Error("two connections share one Conn")
	}
}

// TestSlowReaderH2CMemory: 20 zero-window h2c connections of 128 streams
// (the default limit) hold at most 2,560 handler goroutines, a bounded heap,
// and only for --response-write-timeout: then the goroutines and the heap
// come back. (With 1,000 streams and the 45 s write timeout, 20 such
// connections held 20,000 goroutines, 480 MB.) Not parallel: it counts the
// process's goroutines and heap.
func TestSlowReaderH2CMemory(t *testing.T) {
	cfg := DefaultConfig()
	// Long enough that every stream is open before the first is cut, on a
	// loaded CI machine too (opening the 2,760 streams took over 500 ms there).
	cfg.ResponseWriteTimeout = 3 * time.Second
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"accepted":1,"rejected":[]}`)) // an answer as ingest's, sent once the handler returns
	})
	addr := serveHTTP(t, cfg, h)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	base := runtime.NumGoroutine()
	const conns, streams = 20, 128
	for range conns {
		c, _ := dialH2C(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		for i := range streams + 10 { // 10 past the limit: refused
			c.get(t, uint32(2*i+1), "/slow")
		}
	}
	var peakG int
	var peakHeap uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakG = max(peakG, runtime.NumGoroutine()-base)
		if ms.HeapInuse > before.HeapInuse {
			peakHeap = max(peakHeap, ms.HeapInuse-before.HeapInuse)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "the streams held", func() bool { sample(); return peakG >= conns*streams })
	testkit.WaitFor(t, 20*time.Second, "the goroutines of unread answers ended", func() bool {
		sample()
		return runtime.NumGoroutine()-base < conns*4
	})
	t.Logf("peak: %d goroutines, %d MiB of heap over the start, for %d connections of %d streams", peakG, peakHeap>>20, conns, streams)
	if limit := conns * (streams + 4); peakG > limit {
		t.Errorf("%d goroutines at the peak, want at most %d (a goroutine per stream up to the limit, a few per connection)", peakG, limit)
	}
	if bound := uint64(conns*streams) * (32 << 10); peakHeap > bound {
		t.Errorf("heap peaked %d MiB over the start, want at most 32 KiB per held stream: %d MiB", peakHeap>>20, bound>>20)
	}
}

// TestBodyShares: with request-reply on, it has a quarter of the body
// budget (at least one body of --rpc-max-body-bytes) and ingest the rest;
// off, ingest has all of it. A budget whose rest cannot hold one
// decompressed ingest body is refused at start.
func TestBodyShares(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tt := range []struct {
		name            string
		services        []string
		budget, rpcBody int64
		rpc, ingest     int64
		err             string
	}{
		{"request-reply off", nil, 64 * mib, mib, 0, 64 * mib, ""},
		{"defaults", []string{"a"}, 64 * mib, mib, 16 * mib, 48 * mib, ""},
		{"large rpc bodies", []string{"a"}, 64 * mib, 20 * mib, 20 * mib, 44 * mib, ""},
		{"too small for both", []string{"a"}, 9 * mib, mib, 2*mib + mib/4, 6*mib + 3*mib/4, "leaves ingest"},
	} {
		cfg := DefaultConfig()
		cfg.RPC.Services, cfg.Ingest.MaxInflightBytes, cfg.RPC.MaxBodyBytes = tt.services, tt.budget, tt.rpcBody
		if rpc, in := cfg.rpcBodyBytes(), cfg.ingestBodyBytes(); rpc != tt.rpc || in != tt.ingest {
			t.Errorf("%s: request-reply %d, ingest %d; want %d and %d", tt.name, rpc, in, tt.rpc, tt.ingest)
		}
		if err := cfg.Validate(); (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: Validate: %v, want %q", tt.name, err, tt.err)
		}
	}
}
