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

// Producer hands records to Kafka in order and returns at once; the
// Delivery tells when Kafka acknowledged all of them.
type Producer interface {
	Produce(recs []event.Record) (Delivery, error)
}

// Delivery is the pending acknowledgement of one Produce call.
type Delivery interface {
	// Wait blocks until Kafka acknowledged every record (nil), one failed,
	// or ctx is done.
	Wait(ctx context.Context) error
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
	WindowBytes int           // records read, sent and acknowledged together
	Windows     int           // windows in flight at once
	MinBackoff  time.Duration // after a failed window, doubling up to MaxBackoff
	MaxBackoff  time.Duration
	StallAfter  time.Duration // a window unacknowledged this long reports StateStalled
}

// DefaultForwarderConfig returns the documented defaults.
func DefaultForwarderConfig() ForwarderConfig {
	return ForwarderConfig{WindowBytes: 1 << 20, Windows: 4, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, StallAfter: 5 * time.Second}
}

// Forwarder sends the spool's records to Kafka in order, up to Windows
// windows in flight, and acknowledges windows in the spool in order, each
// only once Kafka acknowledged all of it (and all before it). Order per key
// holds because windows are handed to the idempotent producer in order; a
// window that fails (after the producer's own retries, for the delivery
// timeout) is sent again, after the windows behind it.
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

// window is records read together, on their way to Kafka.
type window struct {
	recs   []event.Record
	next   Pos // the position after them
	oldest int64
	d      Delivery
	err    error // of Produce; the acker sends the window again
}

// run reads windows and hands them to the producer; the acker waits for
// them in order.
func (f *Forwarder) run(waitCtx, runCtx context.Context) {
	defer close(f.done)
	defer f.setState(StateStopped)
	inflight := make(chan *window, max(f.cfg.Windows-1, 0)) // one more is with the acker
	ackerDone := make(chan struct{})
	go f.acker(runCtx, inflight, ackerDone)
	defer func() { close(inflight); <-ackerDone }()

	r := f.s.NewReader(f.s.Delivered())
	defer r.Close()
	for waitCtx.Err() == nil {
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
		w := &window{recs: make([]event.Record, len(entries)), next: next, oldest: entries[0].AppendedAt.UnixNano()}
		for i := range entries {
			w.recs[i] = entries[i].Record
		}
		f.oldest.CompareAndSwap(0, w.oldest)
		w.d, w.err = f.p.Produce(w.recs)
		select {
		case inflight <- w:
		case <-runCtx.Done():
			return
		}
	}
}

// acker waits for each window in order, sends failed ones again, and
// records delivery in the spool.
func (f *Forwarder) acker(ctx context.Context, inflight <-chan *window, done chan<- struct{}) {
	defer close(done)
	for w := range inflight {
		f.oldest.Store(w.oldest)
		if !f.deliver(ctx, w) {
			for range inflight { // abandoned: they are sent again on the next start
			}
			return
		}
		if err := f.s.Ack(w.next); err != nil {
			f.log.Error("spool: recording delivery", "err", err)
		}
		f.metrics.Forwarded.Add(float64(len(w.recs)))
		if len(inflight) == 0 {
			f.oldest.Store(0)
			f.setState(StateIdle)
		}
	}
}

// deliver waits until Kafka acknowledged all of w, sending it again after
// a failure; it returns false when told to abandon it.
func (f *Forwarder) deliver(ctx context.Context, w *window) bool {
	backoff := f.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		f.setState(StateForwarding)
		err := w.err
		if err == nil {
			stall := time.AfterFunc(f.cfg.StallAfter, func() { f.setState(StateStalled) })
			err = w.d.Wait(ctx)
			stall.Stop()
		}
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
			f.log.Warn("forwarder: kafka did not take the records; sending them again", "records", len(w.recs), "attempt", attempt, "err", err)
		}
		f.setState(StateRetrying)
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, f.cfg.MaxBackoff)
		w.d, w.err = f.p.Produce(w.recs)
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
