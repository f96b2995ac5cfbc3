package ingest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// The attack tests run the default config (64 MiB of body budget) on a real
// HTTP server that speaks HTTP/1.1 and h2c and gives each connection its
// budget share, as the gateway's does. They are not parallel: each reads
// the process's heap, and asserts that it stays within the body budget and
// a per-connection constant, while a legitimate client is answered 200.

// perConnBytes is what a connection costs beyond the bodies charged to the
// budget, generously: goroutines, bufio buffers, an HTTP/2 connection's
// flow-control window (1 MiB at most), a gzip reader.
const perConnBytes = 2 << 20

// heapBound is the heap in use that the budget and conns connections
// allow: what they hold live, twice (the garbage collector lets the heap
// grow to twice the live heap, GOGC=100, before it collects).
func heapBound(s *Server, conns int) uint64 {
	return 2 * (uint64(s.cfg.MaxInflightBytes) + uint64(conns)*perConnBytes)
}

// attackHarness is newHarness on a server that also speaks h2c, with
// membudget.ConnContext.
func attackHarness(tb testing.TB, edit func(*Config)) *harness {
	tb.Helper()
	s, sink, logs := newServer(tb, edit)
	mux := http.NewServeMux()
	s.Register(mux)
	srv := serve(tb, mux, func(hs *http.Server) {
		hs.ConnContext = membudget.ConnContext
		hs.Protocols = new(http.Protocols)
		hs.Protocols.SetHTTP1(true)
		hs.Protocols.SetUnencryptedHTTP2(true)
	})
	return &harness{s: s, sink: sink, logs: logs, srv: srv}
}

// h2c returns a client that sends every request over one h2c connection
// (prior knowledge), closed at the end of the test.
func h2c(tb testing.TB) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// heapPeak samples the heap in use every few milliseconds until stopped,
// and returns the peak over what was in use when it started.
func heapPeak(tb testing.TB) (stop func() uint64) {
	tb.Helper()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// legitBatch is a legitimate client's batch: 100 events of 4 KiB.
var legitBatch = func() []byte {
	ev := `{"event":"legit","props":{"s":"` + strings.Repeat("l", 4<<10) + `"}}`
	return []byte("[" + strings.Repeat(ev+",", 99) + ev + "]")
}()

// legit posts legitBatch and wants 200.
func legit(tb testing.TB, h *harness, during string) {
	tb.Helper()
	if r := h.do(tb, "POST", "/v1/batch", legitBatch, "Content-Type", "application/json"); r.status != 200 {
		tb.Errorf("a legitimate client during %s: %s, want 200", during, r)
	}
}

// TestAttackAmplification: 8 KB of gzip inflating to 8 MiB of [0,0,0,...],
// 8 requests at once (and 8 more over one h2c connection), are refused
// 413 at the 501st item; the heap stays within the body budget (each
// request took 480 MB).
func TestAttackAmplification(t *testing.T) {
	h := attackHarness(t, nil)
	body := testkit.Gzip(t, zeros(8<<20))
	t.Logf("%d bytes of gzip inflating to 8 MiB", len(body))
	stop := heapPeak(t)
	var wg sync.WaitGroup
	statuses := make(chan int, 16)
	attack := func(c *http.Client) {
		defer wg.Done()
		req, _ := http.NewRequest("POST", h.srv.URL+"/v1/batch", bytes.NewReader(body))
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses <- resp.StatusCode
	}
	one := h2c(t)
	for range 8 {
		wg.Add(2)
		go attack(h.srv.Client())
		go attack(one)
	}
	legit(t, h, "the amplification")
	wg.Wait()
	peak := stop()
	close(statuses)
	for s := range statuses {
		if s != http.StatusRequestEntityTooLarge && s != http.StatusServiceUnavailable && s != http.StatusTooManyRequests {
			t.Errorf("an amplified body was answered %d, want 413 (or 503/429 when the budget is full)", s)
		}
	}
	bound := heapBound(h.s, 9)
	t.Logf("heap peak %d MiB over the start (bound %d MiB)", peak>>20, bound>>20)
	if peak > bound {
		t.Errorf("heap peaked %d MiB over the start, want at most twice the budget and %d connections: %d MiB", peak>>20, 9, bound>>20)
	}
	if used := h.s.budget.Used(); used != 0 {
		t.Errorf("budget holds %d bytes after the attack", used)
	}
}

// stallGzip sends, on a connection of its own, all of a gzip body but its
// last bytes (the trailer the decompressor waits for), and stalls.
func stallGzip(tb testing.TB, addr string, body []byte) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := c.Write(body[:len(body)-8]); err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestAttackBudgetLockout: 8 stalled uploads of 8 KB of gzip (each
// inflating to 8 MiB), on 8 connections and as 8 streams of one h2c
// connection, held the whole 64 MiB budget for the read timeout: every
// other client got 503. Now a stalled upload holds what it sent (a
// compressed body is inflated once whole), a legitimate client gets 200
// meanwhile, and the body idle timeout answers the stalled ones 408 and
// gives the budget back.
func TestAttackBudgetLockout(t *testing.T) {
	body := testkit.Gzip(t, pad(t, 8<<20-1))
	for _, via := range []string{"8 connections", "8 streams of one h2c connection"} {
		t.Run(via, func(t *testing.T) {
			h := attackHarness(t, func(c *Config) { c.BodyIdleTimeout = 500 * time.Millisecond })
			stop := heapPeak(t)
			answers := make(chan response, 8)
			if via == "8 connections" {
				for range 8 {
					c := stallGzip(t, h.srv.Listener.Addr().String(), body)
					go func() {
						_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
						resp, err := http.ReadResponse(bufio.NewReader(c), nil)
						if err != nil {
							answers <- response{body: []byte(err.Error())}
							return
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						answers <- response{status: resp.StatusCode, body: b}
					}()
				}
			} else {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				one := h2c(t)
				for range 8 {
					pr, pw := io.Pipe()
					defer pw.Close()
					go func() { _, _ = pw.Write(body[:len(body)-8]) }()
					req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/batch", pr)
					req.Header.Set("Content-Encoding", "gzip")
					go func() {
						resp, err := one.Do(req)
						if err != nil {
							answers <- response{body: []byte(err.Error())}
							return
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						answers <- response{status: resp.StatusCode, body: b}
					}()
				}
			}
			testkit.WaitFor(t, 5*time.Second, "8 stalled uploads charged", func() bool { return h.s.budget.Used() >= int64(8*len(body)) })
			used := settled(t, h.s.budget) // every upload read what it was sent (and, before, inflated it)
			legit(t, h, "8 stalled uploads")
			if used > 8*64<<10 {
				t.Errorf("8 stalled uploads of %d bytes hold %d bytes of the budget, want what they sent", len(body), used)
			}
			for range 8 {
				select {
				case r := <-answers:
					if r.status != http.StatusRequestTimeout || !strings.Contains(string(r.body), "no byte of the body received for 500ms") {
						t.Errorf("a stalled upload: %s, want 408 after the body idle timeout", r)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a stalled upload is still unanswered 5 s on")
				}
			}
			peak := stop()
			t.Logf("budget %d bytes with 8 uploads stalled; heap peak %d MiB over the start", used, peak>>20)
			if bound := heapBound(h.s, 9); peak > bound {
				t.Errorf("heap peaked %d MiB over the start, want at most %d MiB", peak>>20, bound>>20)
			}
			testkit.WaitFor(t, 5*time.Second, "the budget given back", func() bool { return h.s.budget.Used() == 0 })
		})
	}
}

// settled waits until what b holds stops changing for 100 ms, and returns it.
func settled(tb testing.TB, b *membudget.Budget) int64 {
	tb.Helper()
	last := b.Used()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if now := b.Used(); now == last {
			return now
		} else {
			last = now
		}
	}
	tb.Fatalf("the budget never settled: %d bytes held", last)
	return 0
}

// TestAttackConnShare: one h2c connection whose streams all upload large
// bodies and stall holds at most its share of the budget (a quarter, at
// least one largest request); its streams past it get 429 with Retry-After,
// and another client still gets 200.
func TestAttackConnShare(t *testing.T) {
	h := attackHarness(t, nil) // the body idle timeout (5 s) is longer than the test
	chunk := pad(t, 1<<20)[:1<<20-100]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one := h2c(t)
	const streams = 40 // 40 MiB of bodies: more than the share (16 MiB), less than the budget
	statuses := make(chan response, streams)
	var wg sync.WaitGroup
	for range streams {
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write(chunk) }()
		req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/batch", pr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := one.Do(req)
			if err != nil {
				return // cancelled at the end: a stream still stalled
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses <- response{status: resp.StatusCode, header: resp.Header, body: b}
		}()
	}
	share := h.s.budget.PerConn()
	testkit.WaitFor(t, 5*time.Second, "the connection at its share", func() bool {
		return h.s.budget.Used() > share-(1<<20) && len(statuses) > 0
	})
	used := h.s.budget.Used()
	legit(t, h, "a connection holding its share")
	r := <-statuses
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" || !strings.Contains(string(r.body), "the most one connection may") {
		t.Errorf("a stream past the connection's share: %s (Retry-After %q), want 429 with Retry-After", r, r.header.Get("Retry-After"))
	}
	if used > share {
		t.Errorf("one connection holds %d bytes, over its share of %d", used, share)
	}
	t.Logf("one connection of %d stalled streams holds %d MiB (share %d MiB of %d MiB)", streams, used>>20, share>>20, h.s.budget.Max()>>20)
	cancel()
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, "the budget given back", func() bool { return h.s.budget.Used() == 0 })
}

// TestBodyIdleTimeout: a body that sends nothing for the idle timeout is
// answered 408 long before the read timeout, and gives back its budget; a
// slow body that keeps sending is not cut.
func TestBodyIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.BodyIdleTimeout = 200 * time.Millisecond })
	start := time.Now()
	c := stall(t, h.srv.Listener.Addr().String(), "/v1/batch", 100, []byte(`[{"event":`))
	r := readResponse(t, c)
	if r.status != http.StatusRequestTimeout || !strings.Contains(string(r.body), "no byte of the body received for 200ms (the body idle timeout)") {
		t.Fatalf("idle body: %s, want 408", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v, want about the idle timeout", d)
	}
	testkit.WaitFor(t, 5*time.Second, "the budget given back", func() bool { return h.s.budget.Used() == 0 })

	// A byte every 50 ms: longer than the idle timeout in all, but never
	// idle for it. Its own server with a 1 s idle timeout, so that only a
	// stall of 20 times the pace fails it (a 200 ms gap was seen on a
	// machine at load 47).
	h = newHarness(t, func(c *Config) { c.BodyIdleTimeout = time.Second })
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		for _, b := range []byte(`[{"event":"slow","props":{"pace":"a byte per 50ms"}}]`) {
			time.Sleep(50 * time.Millisecond)
			if _, err := pw.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	if r := h.send(t, "POST", "/v1/batch", pr); r.status != 200 {
		t.Fatalf("slow body: %s, want 200", r)
	}
}
