package kafka

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReach: Reach retries a failing ping, saying so, until it succeeds;
// and gives up with the last failure once the wait has passed.
func TestReach(t *testing.T) {
	refused := errors.New("connection refused")
	calls, said := 0, 0
	err := Reach(context.Background(), func(context.Context) error {
		if calls++; calls < 3 {
			return refused
		}
		return nil
	}, time.Minute, func(attempt int, err error, left time.Duration) { said++ })
	if err != nil || calls != 3 || said != 2 {
		t.Fatalf("Reach: %v after %d pings, %d retries said; want nil after 3, 2 said", err, calls, said)
	}
	start := time.Now()
	calls = 0
	err = Reach(context.Background(), func(ctx context.Context) error {
		if calls++; calls > 1 { // the later attempts time out: the cause is the first's
			<-ctx.Done()
			return ctx.Err()
		}
		return refused
	}, 600*time.Millisecond, nil)
	if took := time.Since(start); !errors.Is(err, refused) || took < 600*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Reach: %v after %v; want the ping's error after 0.6 s", err, took)
	}
	// wait 0: until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	calls = 0
	err = Reach(ctx, func(context.Context) error { calls++; return refused }, 0, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || calls < 2 {
		t.Fatalf("Reach without a bound: %v after %d pings; want the context's end, retrying until then", err, calls)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := Reach(ctx, func(ctx context.Context) error { return ctx.Err() }, time.Minute, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reach with ctx done: %v", err)
	}
}
