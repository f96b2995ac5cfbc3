package kafka

import (
	"context"
	"errors"
	"time"
)

// Reach calls ping (a metadata request: kgo.Client.Ping) until it
// succeeds, ctx ends or wait has passed since the first attempt (wait 0:
// until ctx ends), each attempt bounded by the time left (and 10 s). After each failed attempt
// but the last it calls retrying, if not nil, with the attempt's number,
// its error and the time left, then waits: 250 ms, doubling up to 5 s.
// It returns nil or the last failure other than an attempt's deadline
// (ctx's error if ctx ended first).
// For commands that must not wait for ever for an unreachable Kafka, yet
// ride out a broker that is starting (inlet ship).
func Reach(ctx context.Context, ping func(context.Context) error, wait time.Duration, retrying func(attempt int, err error, left time.Duration)) error {
	deadline := time.Now().Add(wait)
	if wait <= 0 {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour) // never
	}
	backoff := 250 * time.Millisecond
	var last error // the last failure that was not the attempt's deadline
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, min(time.Until(deadline), 10*time.Second))
		err := ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if last == nil || !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		left := time.Until(deadline)
		if left <= 0 {
			// The cause (connection refused), not the deadline the
			// wait cut the last attempt short with.
			return last
		}
		if retrying != nil {
			retrying(attempt, err, left.Round(time.Second))
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
