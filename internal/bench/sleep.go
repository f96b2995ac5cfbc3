package bench

import (
	"context"
	"time"
)

// A sleeper waits for a request's intended send time. The runtime's timers
// wake an idle Go process up to about 1 ms late (its poller waits in whole
// milliseconds), and in an open loop that lateness would be counted as
// latency; so the last stretch of a wait is done by a fine timer where the
// platform has one (Linux: timerfd, about 50 µs). A sleeper is used by one
// goroutine at a time.
type sleeper struct {
	timer *time.Timer
	fine  fineTimer // nil: none
}

// fineTimer waits until t precisely, without a cancellation of its own:
// sleeper hands it at most coarseMargin.
type fineTimer interface {
	sleepUntil(t time.Time)
	close()
}

// coarseMargin is how much of a wait the fine timer is left: more than the
// runtime timer's lateness.
const coarseMargin = 3 * time.Millisecond

func newSleeper() *sleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{timer: t, fine: newFineTimer()}
}

// until waits until t, and reports false if ctx ended first.
func (s *sleeper) until(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	coarse := d
	if s.fine != nil {
		coarse = d - coarseMargin
	}
	if coarse > 0 {
		s.timer.Reset(coarse)
		select {
		case <-ctx.Done():
			s.timer.Stop()
			return false
		case <-s.timer.C:
		}
	}
	if s.fine != nil {
		s.fine.sleepUntil(t)
	}
	return ctx.Err() == nil
}

func (s *sleeper) close() {
	s.timer.Stop()
	if s.fine != nil {
		s.fine.close()
	}
}
