package spool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
)

// Producer delivers records and returns nil only once Kafka acknowledged
// all of them. kafka.Producer is one.
type Producer interface {
	ProduceSync(ctx context.Context, recs []event.Record) error
}

// Forwarder states.
const (
	StateIdle       = "idle"       // everything spooled was delivered
	StateForwarding = "forwarding" // a window is on its way to Kafka
	StateStalled    = "stalled"    // Kafka has not acknowledged a window for StallAfter
	StateRetrying   = "retrying"   // a window failed; waiting to send it again
	StateStopped    = "stopped"
)

var states = []string{StateIdle, StateForwarding, StateStalled, StateRetrying, StateStopped}

// ForwarderConfig configures a forwarder.
type ForwarderConfig struct {
	WindowBytes int           // records sent, and acknowledged, at a time
	MinBackoff  time.Duration // after a failed window, doubling up to MaxBackoff
	MaxBackoff  time.Duration
	StallAfter  time.Duration // a window unacknowledged this long reports StateStalled
}

// DefaultForwarderConfig returns the documented defaults.
func DefaultForwarderConfig() ForwarderConfig {
	return ForwarderConfig{WindowBytes: 1 << 20, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, StallAfter: 5 * time.Second}
}

// Forwarder sends the spool's records to Kafka in order, one window at a
// time, and acknowledges a window in the spool only once Kafka acknowledged
// all of it. Order per key holds because windows go one after another and
// the producer is idempotent.
type Forwarder struct {
	s       *Spool
	p       Producer
	cfg     ForwarderConfig
	log     *slog.Logger
	metrics *Metrics

	state  atomic.Value // string
	oldest atomic.Int64 // unix ns of the oldest record in flight; 0 when none

	stopWait  context.CancelFunc // stop waiting for new records
	cancelRun context.CancelFunc // abandon the window in flight
	done      chan struct{}
	stopOnce  sync.Once
}

// StartForwarder starts forwarding from the spool's delivered position.
// Stop it with Stop before closing the spool.
func StartForwarder(s *Spool, p Producer, cfg ForwarderConfig, log *slog.Logger) *Forwarder {
	f := &Forwarder{s: s, p: p, cfg: cfg, log: log, metrics: s.metrics, done: make(chan struct{})}
	f.setState(StateIdle)
	if reg := s.metrics.reg; reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_spool_oldest_unforwarded_seconds",
			Help: "Age of the oldest spooled record Kafka has not acknowledged (0 when none).",
		}, func() float64 { return f.OldestAge().Seconds() }))
	}
	waitCtx, stopWait := context.WithCancel(context.Background())
	runCtx, cancelRun := context.WithCancel(context.Background())
	f.stopWait, f.cancelRun = stopWait, cancelRun
	go f.run(waitCtx, runCtx)
	return f
}

// State is the forwarder's state: idle, forwarding, stalled, retrying or stopped.
func (f *Forwarder) State() string { return f.state.Load().(string) }

// OldestAge is the age of the oldest record not yet acknowledged by Kafka
// that the forwarder is sending; 0 when it sends nothing.
func (f *Forwarder) OldestAge() time.Duration {
	if ns := f.oldest.Load(); ns != 0 {
		return time.Since(time.Unix(0, ns))
	}
	return 0
}

func (f *Forwarder) setState(st string) {
	f.state.Store(st)
	for _, s := range states {
		v := 0.0
		if s == st {
			v = 1
		}
		f.metrics.ForwarderState.WithLabelValues(s).Set(v)
	}
}

func (f *Forwarder) run(waitCtx, runCtx context.Context) {
	defer close(f.done)
	defer f.setState(StateStopped)
	r := f.s.NewReader(f.s.Delivered())
	defer r.Close()
	for waitCtx.Err() == nil {
		f.setState(StateIdle)
		entries, next, err := r.Next(waitCtx, f.cfg.WindowBytes)
		if err != nil {
			if waitCtx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			// A read error is a bug or a damaged disk: say so, and try
			// again rather than skip records.
			f.log.Error("spool: reading for the forwarder", "err", err)
			if !sleep(waitCtx, f.cfg.MaxBackoff) {
				return
			}
			r.Close()
			r = f.s.NewReader(f.s.Delivered())
			continue
		}
		recs := make([]event.Record, len(entries))
		for i := range entries {
			recs[i] = entries[i].Record
		}
		f.oldest.Store(entries[0].AppendedAt.UnixNano())
		if !f.send(runCtx, recs) {
			return
		}
		if err := f.s.Ack(next); err != nil {
			f.log.Error("spool: recording delivery", "err", err)
		}
		f.metrics.Forwarded.Add(float64(len(recs)))
		f.oldest.Store(0)
	}
}

// send delivers one window, retrying until Kafka acknowledged all of it;
// it returns false when told to abandon it.
func (f *Forwarder) send(ctx context.Context, recs []event.Record) bool {
	backoff := f.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		f.setState(StateForwarding)
		stall := time.AfterFunc(f.cfg.StallAfter, func() { f.setState(StateStalled) })
		err := f.p.ProduceSync(ctx, recs)
		stall.Stop()
		if err == nil {
			if attempt > 1 {
				f.log.Info("forwarder: kafka acknowledged again", "attempts", attempt)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		f.metrics.ForwardErrors.Inc()
		if attempt == 1 || attempt%10 == 0 {
			f.log.Warn("forwarder: kafka did not take the records; retrying", "records", len(recs), "attempt", attempt, "err", err)
		}
		f.setState(StateRetrying)
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, f.cfg.MaxBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stop stops the forwarder: it stops reading at once, lets the window in
// flight finish until ctx ends, then abandons it (it is sent again on the
// next start). It returns when the forwarder has stopped.
func (f *Forwarder) Stop(ctx context.Context) {
	f.stopOnce.Do(func() {
		f.stopWait()
		select {
		case <-f.done:
		case <-ctx.Done():
			f.log.Warn("forwarder: shutdown deadline with a window in flight; it is sent again on the next start")
		}
		f.cancelRun()
		<-f.done
	})
}
