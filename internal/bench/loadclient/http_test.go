package loadclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/report"
	"github.com/klauspost/compress/gzip"
)

// server starts a loopback HTTP server that reads each body and answers
// with handle's status (204 if handle is nil).
func server(tb testing.TB, handle func(n int64, r *http.Request) int) (*httptest.Server, *atomic.Int64) {
	tb.Helper()
	var count atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := count.Add(1)
		status := http.StatusNoContent
		if handle != nil {
			status = handle(n, r)
		}
		w.WriteHeader(status)
	}))
	tb.Cleanup(srv.Close)
	return srv, &count
}

// httpTarget makes an HTTP target of url.
func httpTarget(tb testing.TB, url string, connections int) *HTTP {
	tb.Helper()
	cfg := DefaultHTTPConfig()
	cfg.URL, cfg.Connections = url, connections
	h, err := NewHTTP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

func run(tb testing.TB, cfg bench.Config, target bench.Target) *report.Report {
	tb.Helper()
	rep, err := bench.Run(context.Background(), cfg, target)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

func runAsync(tb testing.TB, cfg bench.Config, target bench.AsyncTarget) *report.Report {
	tb.Helper()
	rep, err := bench.RunAsync(context.Background(), cfg, target)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

func openLoop(rate float64, workers int, warmup, duration time.Duration) bench.Config {
	return bench.Config{Rate: rate, Workers: workers, Warmup: warmup, Duration: duration, Timeout: 5 * time.Second, MaxLag: time.Second}
}

func closedLoop(workers int, warmup, duration time.Duration) bench.Config {
	return bench.Config{Workers: workers, Warmup: warmup, Duration: duration, Timeout: 5 * time.Second}
}

func TestBenchClassification(t *testing.T) {
	t.Parallel()
	t.Run("refused is a client error", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		for _, client := range []string{ClientH1, ClientStd} {
			cfg := DefaultHTTPConfig()
			cfg.URL, cfg.Connections, cfg.Client = "http://"+addr+"/v1/batch", 2, client
			h, err := NewHTTP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rep := run(t, closedLoop(2, 0, 200*time.Millisecond), h.Do)
			h.Close()
			if rep.Requests == 0 || len(rep.Errors) != 1 || rep.Errors[0].Kind != bench.KindRefused || rep.Errors[0].Count != rep.Requests {
				t.Errorf("%s: errors %+v for %d requests: want all refused", client, rep.Errors, rep.Requests)
			}
			if len(rep.Status) != 0 || rep.ServerErrors() != 0 || rep.Latency.Count != 0 {
				t.Errorf("%s: answers %v, latency count %d: a refused connection is no answer", client, rep.Status, rep.Latency.Count)
			}
		}
		// Reports of a run without an answer still write.
		rep := run(t, closedLoop(1, 0, 50*time.Millisecond), httpTarget(t, "http://"+addr+"/", 1).Do)
		var page, hgrm, text bytes.Buffer
		if err := errors.Join(rep.WriteHTML(&page), rep.WriteHgrm(&hgrm), rep.WriteText(&text)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(page.String(), "no data") || !strings.Contains(text.String(), "refused") {
			t.Errorf("empty reports:\n%s\n%s", page.String(), text.String())
		}
	})
	t.Run("server answers are counted by status", func(t *testing.T) {
		t.Parallel()
		srv, _ := server(t, func(n int64, _ *http.Request) int {
			if n%4 == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		rep := run(t, openLoop(200, 5, 0, 400*time.Millisecond), httpTarget(t, srv.URL, 5).Do)
		if rep.Status["200"] != 60 || rep.Status["503"] != 20 || len(rep.Errors) != 0 {
			t.Errorf("answers %v, errors %+v: want 60×200 and 20×503, no client error", rep.Status, rep.Errors)
		}
		if rep.ServerErrors() != 20 || rep.SuccessRatio != 0.75 || rep.Latency.Count != 80 {
			t.Errorf("server errors %d, success ratio %g, latency count %d", rep.ServerErrors(), rep.SuccessRatio, rep.Latency.Count)
		}
	})
	t.Run("connection closed without an answer", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		t.Cleanup(srv.Close)
		rep := run(t, closedLoop(1, 0, 100*time.Millisecond), httpTarget(t, srv.URL, 1).Do)
		// Closing a connection with the request unread may reset it.
		var n int64
		for _, e := range rep.Errors {
			if e.Kind == bench.KindClosed || e.Kind == bench.KindReset {
				n += e.Count
			}
		}
		if rep.Requests == 0 || n != rep.Requests || len(rep.Status) != 0 {
			t.Errorf("errors %+v, answers %v: want all closed or reset", rep.Errors, rep.Status)
		}
	})
	for err, want := range map[error]string{
		context.DeadlineExceeded: bench.KindTimeout,
		fmt.Errorf("post: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}): bench.KindRefused,
		&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}:                              bench.KindReset,
		io.ErrUnexpectedEOF:                     bench.KindClosed,
		&net.DNSError{Err: "no such host"}:      bench.KindDNS,
		errors.New("something else"):            bench.KindOther,
		fmt.Errorf("x: %w", context.Canceled):   bench.KindCanceled,
		&net.OpError{Op: "dial", Err: timeoutE}: bench.KindTimeout,
	} {
		if got := bench.Classify(err); got != want {
			t.Errorf("Classify(%v) = %s, want %s", err, got, want)
		}
	}
}

var timeoutE = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }

func (timeoutError) Timeout() bool { return true }

func (timeoutError) Temporary() bool { return true }

func TestBenchHTTPBodies(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ids := map[string]bool{}
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		var events []map[string]any
		raw, _ := io.ReadAll(body)
		if err := json.Unmarshal(raw, &events); err != nil || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Test") != "yes" {
			http.Error(w, fmt.Sprintf("%v %q", err, raw), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			b, _ := json.Marshal(e)
			sizes = append(sizes, len(b))
			ids[e["id"].(string)] = true
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	for _, client := range []string{ClientH1, ClientStd} {
		for _, gz := range []bool{false, true} {
			cfg := DefaultHTTPConfig()
			cfg.URL, cfg.Gzip, cfg.Header, cfg.Client = srv.URL, gz, http.Header{"X-Test": {"yes"}}, client
			h, err := NewHTTP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				if res := h.Do(context.Background()); !res.OK || res.Status != "202" || res.Events != 5 || res.Sent == 0 {
					t.Fatalf("%s, gzip %v: %+v", client, gz, res)
				}
			}
			h.Close()
		}
	}
	if len(ids) != 200 {
		t.Errorf("%d distinct ids in 200 events", len(ids))
	}
	for _, n := range sizes {
		if n < 95 || n > 105 {
			t.Fatalf("an event of %d bytes, want about 100", n)
		}
	}

	// A body file is sent as it is.
	got := make(chan string, 1)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.Header.Get("Content-Type") + " " + string(b)
	}))
	t.Cleanup(echo.Close)
	for _, client := range []string{ClientH1, ClientStd} {
		h, err := NewHTTP(HTTPConfig{URL: echo.URL, Method: http.MethodPut, Body: []byte("plain"), Connections: 1, Client: client})
		if err != nil {
			t.Fatal(err)
		}
		if res := h.Do(context.Background()); !res.OK || res.Sent != 5 {
			t.Fatalf("%s: %+v", client, res)
		}
		if s := <-got; s != "PUT  plain" {
			t.Errorf("%s: server got %q", client, s)
		}
		h.Close()
	}
}

// TestBenchH2CMultiplexes: the h2c client carries many requests in flight
// over H2Conns connections, not one connection per request.
func TestBenchH2CMultiplexes(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		io.Copy(io.Discard, r.Body)
		time.Sleep(100 * time.Millisecond)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	cfg := DefaultHTTPConfig()
	cfg.URL, cfg.Client, cfg.Connections, cfg.H2Conns = srv.URL, ClientH2C, 2000, 4
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.Do(context.Background()); r.OK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 500 {
		t.Fatalf("%d of 500 requests ok over h2c", ok.Load())
	}
	// Exactly the connections allowed: one per request would be 500.
	if n := conns.Load(); n != 4 {
		t.Fatalf("%d connections for 500 concurrent h2c requests with 4 allowed", n)
	}
}

func TestBenchHTTPConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]HTTPConfig{
		"no scheme":  {URL: "127.0.0.1:8080", Method: "POST", Events: 1, Connections: 1},
		"no events":  {URL: "http://h/", Method: "POST", Connections: 1},
		"bad method": {URL: "http://h/", Method: "PO ST", Events: 1, Connections: 1},
	} {
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
