package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// fakeClock advances only when a stop says it used time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestLifecycleStopsInReverseWithWeightedShares(t *testing.T) {
	clock := &fakeClock{t: time.Now()} // near the wall clock: shares are timeouts on it
	l := lifecycle{log: testkit.Logger(t), now: clock.now}
	var order []string
	budgets := map[string]time.Duration{}
	add := func(name string, weight int, uses time.Duration, err error) {
		l.started(name, weight, func(ctx context.Context) error {
			order = append(order, name)
			if _, own := ctx.(deadlineCtx); own {
				budgets[name] = -1 // the overall context, not a share of it
			} else {
				d, _ := ctx.Deadline() // a share: set against the wall clock
				budgets[name] = time.Until(d)
			}
			clock.t = clock.t.Add(uses)
			return err
		})
	}
	add("broker", 0, 0, nil)
	add("producer", 2, time.Second, errors.New("flush failed"))
	add("forwarder", 4, 0, nil)
	add("http", 4, 10*time.Second, nil) // uses all of its share
	err := l.stop(deadlineCtx{Context: context.Background(), d: clock.t.Add(100 * time.Second)})
	if got := strings.Join(order, ","); got != "http,forwarder,producer,broker" {
		t.Fatalf("stopped in order %s, want the reverse of the start order", got)
	}
	want := map[string]time.Duration{
		"http":      100 * time.Second * 4 / 10, // 4 of 10
		"forwarder": 90 * time.Second * 4 / 6,   // what http left, 4 of 6
		"producer":  90 * time.Second,           // the forwarder used nothing: all that is left
		"broker":    -1,                         // weight 0: no deadline of its own
	}
	for name, w := range want {
		if got := budgets[name]; w >= 0 && (got < w-time.Second || got > w+time.Second) || w < 0 && got != w {
			t.Errorf("%s had %v, want about %v", name, got, w)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "stopping producer: flush failed") {
		t.Fatalf("stop returned %v, want the producer's error", err)
	}
	if len(l.parts) != 0 {
		t.Fatal("parts left after stop")
	}
}

// deadlineCtx has a deadline on the fake clock: lifecycle computes each
// share from its now(), and sets it as a timeout on the wall clock.
type deadlineCtx struct {
	context.Context
	d time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }
