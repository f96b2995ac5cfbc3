package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/report"
)

// maxCountRun bounds the time of a closed-loop run of a number of requests.
const maxCountRun = 24*time.Hour - time.Minute

// RunCount is Run with counts of requests in place of times: warmup
// requests left out of every figure (0: cfg.Warmup's time), then n
// measured ones (0: cfg.Duration's time). Like Run it blocks until the run
// is over and returns an error only for an invalid cfg.
//
// In an open loop the pacer's schedule is cut to the counts (a ramp,
// cfg.StartRate, is not supported). In a closed loop a warmup of requests,
// or a time before a count, is a run of its own before the measured one;
// a measured count stops the workers from claiming requests after the
// n-th, and Duration then ends with the last answer.
func RunCount(ctx context.Context, cfg Config, warmup, n int64, target Target) (*report.Report, error) {
	switch {
	case n < 0 || warmup < 0:
		return nil, errors.New("bench: request counts must not be negative")
	case warmup > 0 && cfg.Warmup > 0:
		return nil, errors.New("bench: a warmup of requests or of time, not both")
	case cfg.StartRate > 0 && (warmup > 0 || n > 0):
		return nil, errors.New("bench: a run of a number of requests cannot ramp")
	}
	if cfg.Open() {
		p := cfg.Pacer()
		if warmup > 0 {
			cfg.Warmup = p.Offset(warmup)
		}
		if n > 0 {
			first := p.Count(cfg.Warmup) // Count and Offset agree exactly
			cfg.Duration = p.Offset(first+n) - cfg.Warmup
		}
		return Run(ctx, cfg, target)
	}
	if warmup == 0 && (n == 0 || cfg.Warmup == 0) {
		if n == 0 {
			return Run(ctx, cfg, target)
		}
		return runCounted(ctx, cfg, n, target)
	}

	wcfg := cfg
	wcfg.Warmup, wcfg.Progress = 0, nil
	var pre *report.Report
	var err error
	if warmup > 0 {
		pre, err = runCounted(ctx, wcfg, warmup, target)
	} else {
		wcfg.Duration = cfg.Warmup
		pre, err = Run(ctx, wcfg, target)
	}
	if err != nil || pre.Interrupted {
		return pre, err
	}
	measured := cfg
	measured.Warmup = 0
	var rep *report.Report
	if n > 0 {
		rep, err = runCounted(ctx, measured, n, target)
	} else {
		rep, err = Run(ctx, measured, target)
	}
	if err != nil {
		return nil, err
	}
	rep.Start = pre.Start
	rep.Warmup = pre.Duration
	rep.WarmupRequests = pre.Requests + pre.Unfinished
	return rep, nil
}

// runCounted is a closed-loop run without warmup that ends after n
// requests: the worker that claims request n+1 stops the run, and the
// requests still in flight are answered (their contexts are ctx's, not
// the stopped run's). cfg.Duration is not used.
func runCounted(ctx context.Context, cfg Config, n int64, target Target) (*report.Report, error) {
	cfg.Warmup, cfg.Duration = 0, maxCountRun
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var claimed, over, last atomic.Int64
	limited := func(rctx context.Context) Result {
		if claimed.Add(1) > n {
			over.Add(1)
			stop()
			return Result{Err: context.Canceled} // never sent: counted as unfinished, taken off below
		}
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := rctx.Deadline(); ok {
			tctx, cancel = context.WithDeadline(ctx, dl)
		}
		res := target(tctx)
		cancel()
		now := time.Now().UnixNano()
		for {
			l := last.Load()
			if now <= l || last.CompareAndSwap(l, now) {
				break
			}
		}
		return res
	}
	rep, err := Run(runCtx, cfg, limited)
	if err != nil || ctx.Err() != nil {
		return rep, err // interrupted by the caller: as Run reports it
	}
	rep.Interrupted = false
	rep.Unfinished = max(rep.Unfinished-over.Load(), 0)
	if l := last.Load(); l > 0 {
		if window := time.Unix(0, l).Sub(rep.Start.Add(time.Duration(rep.Warmup * float64(time.Second)))); window > 0 {
			rep.Duration = window.Seconds()
			rep.Throughput = float64(rep.Requests) / window.Seconds()
			rep.EventsPerSec = float64(rep.EventsOK) / window.Seconds()
		}
	}
	return rep, nil
}
