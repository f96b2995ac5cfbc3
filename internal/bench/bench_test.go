package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/report"
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

// httpTarget is a plain net/http target of url, for the engine's tests
// (the load clients are tested in loadclient): each request posts a body
// of 5 events.
func httpTarget(tb testing.TB, url string, connections int) *plainHTTP {
	tb.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: connections, MaxConnsPerHost: connections}
	tb.Cleanup(tr.CloseIdleConnections)
	return &plainHTTP{client: &http.Client{Transport: tr}, url: url}
}

type plainHTTP struct {
	client *http.Client
	url    string
}

const plainBody = `[{"event":"bench"},{"event":"bench"},{"event":"bench"},{"event":"bench"},{"event":"bench"}]`

func (h *plainHTTP) Do(ctx context.Context) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, strings.NewReader(plainBody))
	if err != nil {
		return Result{Err: err}
	}
	res := Result{Sent: int64(len(plainBody)), Events: 5}
	resp, err := h.client.Do(req)
	if err != nil {
		res.Err = err
		return res
	}
	res.Received, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		res.Err = err
		return res
	}
	res.Status, res.OK = strconv.Itoa(resp.StatusCode), resp.StatusCode/100 == 2
	return res
}

func run(tb testing.TB, cfg Config, target Target) *report.Report {
	tb.Helper()
	rep, err := Run(context.Background(), cfg, target)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

func openLoop(rate float64, workers int, warmup, duration time.Duration) Config {
	return Config{Rate: rate, Workers: workers, Warmup: warmup, Duration: duration, Timeout: 5 * time.Second, MaxLag: time.Second}
}

func closedLoop(workers int, warmup, duration time.Duration) Config {
	return Config{Workers: workers, Warmup: warmup, Duration: duration, Timeout: 5 * time.Second}
}

// TestOpenLoopSeesStalls checks the point of an open loop: a server that
// stops for 200 ms now and then shows it in the open loop's p99, while a
// closed loop on the same server hides it (coordinated omission).
func TestBenchOpenLoopSeesStalls(t *testing.T) {
	const stall, every = 200 * time.Millisecond, 200
	var mu sync.Mutex // the whole server stalls, as in a GC pause or a full disk
	srv, _ := server(t, func(n int64, _ *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if n%every == 0 {
			time.Sleep(stall)
		}
		return http.StatusOK
	})
	target := httpTarget(t, srv.URL, 200).Do

	// Closed loop, one worker: one request in 200 waits out the stall, and
	// nothing is sent meanwhile, so p99 does not see it.
	closed := run(t, closedLoop(1, 100*time.Millisecond, time.Second), target)
	if closed.Latency.P99 >= report.Millis(int64(stall/time.Microsecond))/4 {
		t.Errorf("closed loop p99 %.3fms: want it to hide the %v stalls (%d requests)", closed.Latency.P99, stall, closed.Requests)
	}

	// Open loop at 400/s: a stall every 0.5 s holds up the 80 requests due
	// during it, each from its intended time. The request due just as a
	// stall ends waits little, so p99 is a little under the stall itself
	// (about 195 ms here); the stalled requests put p99.9 and max past it.
	open := run(t, openLoop(400, 200, 200*time.Millisecond, 1500*time.Millisecond), target)
	t.Logf("closed loop: p99 %.3fms max %.3fms over %d requests; open loop: p50 %.3fms p99 %.3fms max %.3fms over %d",
		closed.Latency.P99, closed.Latency.Max, closed.Requests, open.Latency.P50, open.Latency.P99, open.Latency.Max, open.Requests)
	stallMs := float64(stall / time.Millisecond)
	if open.Latency.P99 < 0.9*stallMs || open.Latency.Max < stallMs {
		t.Errorf("open loop p99 %.3fms, max %.3fms: want the %v stalls to show", open.Latency.P99, open.Latency.Max, stall)
	}
	if open.Latency.P90 < 10*closed.Latency.P90 {
		t.Errorf("open loop p90 %.3fms, closed loop p90 %.3fms: the open loop should see the queue", open.Latency.P90, closed.Latency.P90)
	}
	if open.Dropped != 0 || open.OK != open.Intended {
		t.Errorf("open loop: %d ok of %d intended, %d dropped: the generator kept up, want all ok", open.OK, open.Intended, open.Dropped)
	}
	var text bytes.Buffer
	if err := open.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if want := regexp.MustCompile(`p99 [0-9.]+(µs|ms|s) `); !want.MatchString(text.String()) {
		t.Errorf("the summary does not show the p99:\n%s", text.String())
	}
	var worst float64
	for _, s := range open.Series {
		worst = max(worst, s.Max)
	}
	if worst < stallMs {
		t.Errorf("no second of the series shows the stall: %+v", open.Series)
	}
}

// TestDroppedWhenServerBlocks: a server that never answers keeps every
// worker busy; the requests due meanwhile are counted as dropped by the
// generator, not sent late.
func TestBenchDroppedWhenServerBlocks(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers

	cfg := openLoop(200, 4, 0, time.Second)
	cfg.MaxLag, cfg.Timeout = 100*time.Millisecond, 300*time.Millisecond
	rep := run(t, cfg, httpTarget(t, srv.URL, 4).Do)
	t.Logf("intended %d, sent %d, dropped %d, errors %+v", rep.Intended, rep.Requests, rep.Dropped, rep.Errors)
	if rep.Intended != 200 {
		t.Errorf("%d requests intended, want 200", rep.Intended)
	}
	if rep.Requests+rep.Dropped != rep.Intended {
		t.Errorf("sent %d + dropped %d != intended %d", rep.Requests, rep.Dropped, rep.Intended)
	}
	if rep.Dropped < 150 || rep.OK != 0 || len(rep.Status) != 0 {
		t.Errorf("dropped %d, ok %d, answers %v: want most dropped, no answer", rep.Dropped, rep.OK, rep.Status)
	}
	kinds := map[string]int64{}
	for _, e := range rep.Errors {
		kinds[e.Kind] = e.Count
	}
	if kinds[KindDropped] != rep.Dropped || kinds[KindTimeout] != rep.Requests || rep.ServerErrors() != 0 {
		t.Errorf("errors %+v: want %d dropped and %d timeouts, apart from server answers", rep.Errors, rep.Dropped, rep.Requests)
	}
	if rep.SuccessRatio != 0 {
		t.Errorf("success ratio %g", rep.SuccessRatio)
	}
}

func TestBenchWarmupExcluded(t *testing.T) {
	t.Parallel()
	t.Run("open", func(t *testing.T) {
		t.Parallel()
		srv, served := server(t, nil)
		rep := run(t, openLoop(100, 10, 300*time.Millisecond, 500*time.Millisecond), httpTarget(t, srv.URL, 10).Do)
		if rep.WarmupRequests != 30 || rep.Intended != 50 || rep.Requests != 50 || rep.OK != 50 {
			t.Errorf("warmup %d, intended %d, sent %d, ok %d: want 30 in the warmup and 50 measured",
				rep.WarmupRequests, rep.Intended, rep.Requests, rep.OK)
		}
		if got := served.Load(); got != 80 {
			t.Errorf("server saw %d requests, want 80", got)
		}
		if rep.Latency.Count != 50 || rep.SendLag.Count != 50 || rep.Events != 250 {
			t.Errorf("latency count %d, send lag count %d, events %d: the warmup leaked into the figures",
				rep.Latency.Count, rep.SendLag.Count, rep.Events)
		}
	})
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		srv, served := server(t, nil)
		rep := run(t, closedLoop(2, 200*time.Millisecond, 300*time.Millisecond), httpTarget(t, srv.URL, 2).Do)
		if rep.WarmupRequests == 0 || rep.Requests == 0 || rep.WarmupRequests+rep.Requests != served.Load() {
			t.Errorf("warmup %d + measured %d, server saw %d", rep.WarmupRequests, rep.Requests, served.Load())
		}
		if rep.Latency.Count != rep.Requests {
			t.Errorf("latency count %d, requests %d", rep.Latency.Count, rep.Requests)
		}
	})
}

func TestBenchRunInterrupted(t *testing.T) {
	t.Parallel()
	srv, _ := server(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	rep, err := Run(ctx, openLoop(100, 5, 100*time.Millisecond, time.Minute), httpTarget(t, srv.URL, 5).Do)
	if err != nil {
		t.Fatal(err)
	}
	// Sent and dropped together are what was due; on a loaded machine a
	// request may be dropped (counted), which is not what this checks.
	if due := rep.Requests + rep.Dropped; !rep.Interrupted || rep.Duration > 1 || due < 30 || due > 60 {
		t.Errorf("interrupted %v after %.3fs: %d sent, %d dropped", rep.Interrupted, rep.Duration, rep.Requests, rep.Dropped)
	}
}

// TestBenchInterruptedAfterLastSend: an interrupt while the last answers
// are awaited cuts them short; the text report says how many.
func TestBenchInterruptedAfterLastSend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int64
	hang := func(ctx context.Context) Result { // answers nothing until the run is interrupted
		if started.Add(1) == 10 {
			time.AfterFunc(100*time.Millisecond, cancel) // all 10 were sent by then
		}
		<-ctx.Done()
		return Result{Err: ctx.Err()}
	}
	rep, err := Run(ctx, openLoop(50, 20, 0, 200*time.Millisecond), hang)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unfinished != 10 || rep.Requests != 0 {
		t.Fatalf("%d unfinished, %d recorded; want all 10 unfinished", rep.Unfinished, rep.Requests)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "10 requests were cut short") {
		t.Errorf("the text report does not say the 10 requests were cut short:\n%s", text.String())
	}
}

func TestBenchConfigValidate(t *testing.T) {
	t.Parallel()
	ok := closedLoop(1, 0, time.Second)
	for name, c := range map[string]func(*Config){
		"no workers":         func(c *Config) { c.Workers = 0 },
		"no duration":        func(c *Config) { c.Duration = 0 },
		"negative warmup":    func(c *Config) { c.Warmup = -1 },
		"no timeout":         func(c *Config) { c.Timeout = 0 },
		"ramp without rate":  func(c *Config) { c.StartRate = 10 },
		"negative rate":      func(c *Config) { c.Rate = -1 },
		"open without lag":   func(c *Config) { c.Rate = 10; c.MaxLag = 0 },
		"timeout past range": func(c *Config) { c.Timeout = 2 * time.Minute },
	} {
		cfg := ok
		c(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
