package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// lifecycle owns the gateway's long-running parts, after the actors of
// Prometheus' run.Group: each part is recorded as it starts, with the
// function that stops it, and the parts are stopped in the reverse order,
// so nothing is stopped while a part started after it still uses it. The
// stop order is therefore the start order read backwards; Start documents
// it where it starts the parts.
//
// One budget (a context's deadline) is shared by all stops. Each stop gets
// a share of the time that is left, in proportion to its weight among the
// weights of the stops still to run: time a stop does not use passes to
// the next ones, and a slow stop cannot eat the others' shares. A stop of
// weight 0 gets no deadline of its own (it must be quick by itself) but
// still sees the overall one.
//
// It is not safe for concurrent use: Start builds it, and Shutdown (once)
// or a failed Start runs it.
type lifecycle struct {
	log   *slog.Logger
	parts []part
	now   func() time.Time
}

type part struct {
	name   string
	weight int
	stop   func(ctx context.Context) error
}

// started records that the part name is running and how it stops. stop
// must return once ctx is done, whatever state the part is in.
func (l *lifecycle) started(name string, weight int, stop func(ctx context.Context) error) {
	l.parts = append(l.parts, part{name: name, weight: weight, stop: stop})
}

// stop stops every part, the last started first, within ctx, and returns
// the errors of those that failed, joined. It always runs every stop.
func (l *lifecycle) stop(ctx context.Context) error {
	now := l.now
	if now == nil {
		now = time.Now
	}
	var errs []error
	for i := len(l.parts) - 1; i >= 0; i-- {
		p := l.parts[i]
		weights := 0
		for _, q := range l.parts[:i+1] {
			weights += q.weight
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok && p.weight > 0 {
			share := time.Duration(int64(deadline.Sub(now())) * int64(p.weight) / int64(weights))
			pctx, cancel = context.WithTimeout(ctx, max(share, 0))
		}
		start := now()
		err := p.stop(pctx)
		cancel()
		l.log.Debug("stopped", "part", p.name, "took", now().Sub(start), "err", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", p.name, err))
		}
	}
	l.parts = nil
	return errors.Join(errs...)
}
