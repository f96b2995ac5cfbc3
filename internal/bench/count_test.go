package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchRunCount checks that a run of a number of requests measures
// exactly that many, after exactly the warmup asked for, in both loops.
func TestBenchRunCount(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	target := func(ctx context.Context) Result {
		calls.Add(1)
		select {
		case <-time.After(time.Millisecond):
			return Result{Status: "200", OK: true, Events: 1}
		case <-ctx.Done():
			return Result{Err: ctx.Err()}
		}
	}
	cases := []struct {
		name           string
		cfg            Config
		warmup, n      int64
		warmupRequests int64
	}{
		{"closed, warmup requests", closedLoop(8, 0, 0), 40, 500, 40},
		{"closed, warmup time", closedLoop(8, 50*time.Millisecond, 0), 0, 500, -1},
		{"closed, no warmup", closedLoop(3, 0, 0), 0, 7, 0},
		{"open, warmup requests", openLoop(1000, 8, 0, 0), 40, 300, 40},
		{"open, warmup time", openLoop(1000, 8, 50*time.Millisecond, 0), 0, 300, 50},
		{"closed, warmup requests, then time", closedLoop(8, 0, 100*time.Millisecond), 40, 0, 40},
		{"open, warmup requests, then time", openLoop(1000, 8, 0, 200*time.Millisecond), 40, 0, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			rep, err := RunCount(context.Background(), tc.cfg, tc.warmup, tc.n, target)
			if err != nil {
				t.Fatal(err)
			}
			if tc.n == 0 && rep.Requests > 0 { // measured for a time
				tc.n = rep.Requests
			}
			if rep.Requests != tc.n || rep.OK != tc.n || rep.Interrupted || rep.Unfinished != 0 || rep.Dropped != 0 {
				t.Fatalf("%d requests, %d ok, interrupted %v, %d unfinished, %d dropped; want %d", rep.Requests, rep.OK, rep.Interrupted, rep.Unfinished, rep.Dropped, tc.n)
			}
			if tc.warmupRequests >= 0 && rep.WarmupRequests != tc.warmupRequests || rep.WarmupRequests+rep.Requests != calls.Load() {
				t.Errorf("%d warmup requests, want %d; %d calls", rep.WarmupRequests, tc.warmupRequests, calls.Load())
			}
			if want := float64(rep.Requests) / rep.Duration; rep.Duration <= 0 || rep.Throughput < want*0.999 || rep.Throughput > want*1.001 {
				t.Errorf("throughput %g over %gs", rep.Throughput, rep.Duration)
			}
		})
	}

	for _, bad := range []struct {
		cfg       Config
		warmup, n int64
	}{
		{closedLoop(1, 0, 0), 0, 0},
		{closedLoop(1, time.Second, 0), 10, 10},
		{Config{Rate: 10, StartRate: 5, Workers: 1, Timeout: time.Second, MaxLag: time.Second}, 0, 10},
	} {
		if _, err := RunCount(context.Background(), bad.cfg, bad.warmup, bad.n, target); err == nil {
			t.Errorf("RunCount(%+v, %d, %d): no error", bad.cfg, bad.warmup, bad.n)
		}
	}
}
