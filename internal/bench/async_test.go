package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/report"
)

// fakeAsync is an AsyncTarget that answers 200 after delay (never, if delay
// is negative), from a timer, and fails at the deadline or when ctx ends,
// as a real one must. It counts the requests it has in flight.
type fakeAsync struct {
	delay             time.Duration
	inflight, maxSeen atomic.Int64
	started           atomic.Int64
}

func (f *fakeAsync) start(ctx context.Context, deadline time.Time, done func(Result)) {
	f.started.Add(1)
	n := f.inflight.Add(1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	var once sync.Once
	var timers []*time.Timer
	var mu sync.Mutex
	var stopCtx func() bool
	finish := func(r Result) {
		once.Do(func() {
			f.inflight.Add(-1)
			mu.Lock()
			for _, t := range timers {
				t.Stop()
			}
			mu.Unlock()
			if stopCtx != nil {
				stopCtx()
			}
			done(r)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if f.delay >= 0 {
		timers = append(timers, time.AfterFunc(f.delay, func() { finish(Result{Status: "200", OK: true, Sent: 10, Events: 1}) }))
	}
	if !deadline.IsZero() {
		timers = append(timers, time.AfterFunc(time.Until(deadline), func() { finish(Result{Err: context.DeadlineExceeded, Events: 1}) }))
	}
	stopCtx = context.AfterFunc(ctx, func() { finish(Result{Err: ctx.Err(), Events: 1}) })
}

func runAsync(tb testing.TB, cfg Config, target AsyncTarget) *report.Report {
	tb.Helper()
	rep, err := RunAsync(context.Background(), cfg, target)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

// TestBenchAsyncOpenLoop: the asynchronous open loop counts requests, the
// warmup and the send lag as the synchronous one does.
func TestBenchAsyncOpenLoop(t *testing.T) {
	t.Parallel()
	f := &fakeAsync{delay: 50 * time.Millisecond}
	rep := runAsync(t, openLoop(100, 10, 300*time.Millisecond, 500*time.Millisecond), f.start)
	if rep.Mode != "open" || rep.WarmupRequests != 30 || rep.Intended != 50 || rep.Requests != 50 || rep.OK != 50 || rep.Dropped != 0 {
		t.Errorf("%s loop: warmup %d, intended %d, sent %d, ok %d, dropped %d: want 30 in the warmup and 50 measured, all ok",
			rep.Mode, rep.WarmupRequests, rep.Intended, rep.Requests, rep.OK, rep.Dropped)
	}
	if got := f.started.Load(); got != 80 {
		t.Errorf("the target saw %d requests, want 80", got)
	}
	if rep.Latency.Count != 50 || rep.SendLag == nil || rep.SendLag.Count != 50 || rep.Events != 50 || rep.BytesSent != 500 {
		t.Errorf("latency count %d, send lag %+v, events %d, bytes %d", rep.Latency.Count, rep.SendLag, rep.Events, rep.BytesSent)
	}
	if rep.Latency.P50 < 50 {
		t.Errorf("p50 %.3fms: below the target's 50 ms", rep.Latency.P50)
	}
}

// TestBenchAsyncDropped: a target that never answers holds every slot; the
// requests due meanwhile are dropped, and those sent time out, as with the
// synchronous loop (TestBenchDroppedWhenServerBlocks).
func TestBenchAsyncDropped(t *testing.T) {
	t.Parallel()
	f := &fakeAsync{delay: -1}
	cfg := openLoop(200, 4, 0, time.Second)
	cfg.MaxLag, cfg.Timeout = 100*time.Millisecond, 300*time.Millisecond
	rep := runAsync(t, cfg, f.start)
	t.Logf("intended %d, sent %d, dropped %d, errors %+v", rep.Intended, rep.Requests, rep.Dropped, rep.Errors)
	if rep.Intended != 200 || rep.Requests+rep.Dropped != rep.Intended {
		t.Errorf("sent %d + dropped %d, intended %d: want 200 in all", rep.Requests, rep.Dropped, rep.Intended)
	}
	if rep.Dropped < 150 || rep.OK != 0 {
		t.Errorf("dropped %d, ok %d: want most dropped, none answered", rep.Dropped, rep.OK)
	}
	// What the target saw, and the rate times the duration, not the report,
	// say how many were sent and due.
	if started := f.started.Load(); started != rep.Requests || started+rep.Dropped != 200 {
		t.Errorf("the target saw %d requests; report: %d sent, %d dropped: want 200 due in all", started, rep.Requests, rep.Dropped)
	}
	kinds := map[string]int64{}
	for _, e := range rep.Errors {
		kinds[e.Kind] = e.Count
	}
	if kinds[KindTimeout] != rep.Requests {
		t.Errorf("errors %+v: want %d timeouts", rep.Errors, rep.Requests)
	}
	if m := f.maxSeen.Load(); m > 4 {
		t.Errorf("%d requests in flight with 4 workers", m)
	}
	if n := f.inflight.Load(); n != 0 {
		t.Errorf("%d requests still in flight after the run", n)
	}
}

// TestBenchAsyncInterrupted: when ctx ends, the loop stops sending, the
// requests in flight are cancelled and counted unfinished, and the report
// says the run was interrupted.
func TestBenchAsyncInterrupted(t *testing.T) {
	t.Parallel()
	f := &fakeAsync{delay: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	rep, err := RunAsync(ctx, openLoop(100, 1000, 100*time.Millisecond, time.Minute), f.start)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Duration > 1 {
		t.Errorf("interrupted %v after %.3fs", rep.Interrupted, rep.Duration)
	}
	// Every measured request was in flight at the interrupt: none has a
	// figure, and each is counted as unfinished, not as an error.
	if due := rep.Unfinished + rep.Dropped; rep.Requests != 0 || len(rep.Errors) > 1 || due < 30 || due > 60 {
		t.Errorf("%d requests, %d unfinished, %d dropped, errors %+v", rep.Requests, rep.Unfinished, rep.Dropped, rep.Errors)
	}
	if n := f.inflight.Load(); n != 0 {
		t.Errorf("%d requests still in flight after the run", n)
	}
}

// TestBenchAsyncClosedLoop: a closed loop of an asynchronous target waits
// for each answer before the next request.
func TestBenchAsyncClosedLoop(t *testing.T) {
	t.Parallel()
	f := &fakeAsync{delay: 10 * time.Millisecond}
	rep := runAsync(t, closedLoop(3, 50*time.Millisecond, 300*time.Millisecond), f.start)
	if rep.Mode != "closed" || rep.Requests == 0 || rep.OK != rep.Requests || f.maxSeen.Load() > 3 {
		t.Errorf("%s loop: %d requests, %d ok, %d at once with 3 workers", rep.Mode, rep.Requests, rep.OK, f.maxSeen.Load())
	}
}
