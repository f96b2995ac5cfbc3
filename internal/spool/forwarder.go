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
	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Producer hands records to Kafka in order and returns at once; the
// Delivery tells when Kafka acknowledged all of them. The forwarder calls
// Produce from one goroutine at a time. A Produce that does not return
// holds the forwarder back, but not Stop (see Forwarder.Stop).
type Producer interface {
	Produce(recs []event.Record) (Delivery, error)
}

// Delivery is the pending acknowledgement of one Produce call.
type Delivery interface {
	// Wait blocks until Kafka acknowledged every record (nil), one failed,
	// or ctx is done (it must then return).
	Wait(ctx context.Context) error
}

// Forwarder states.
const (
	StateIdle       = "idle"       // everything spooled was delivered
	StateForwarding = "forwarding" // windows are on their way to Kafka
	StateStalled    = "stalled"    // Kafka has not acknowledged the oldest window for StallAfter
	StateRetrying   = "retrying"   // a window failed; waiting to send it, and those after it, again
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
// only once Kafka acknowledged all of it (and all before it).
//
// Order per key holds because windows are handed to the idempotent producer
// in order, and a window that fails (after the producer's own retries: the
// delivery timeout, a non-retriable error, a full buffer) is never
// overtaken: the forwarder produces nothing more, abandons the windows it
// produced after the failed one, and after a backoff produces again from
// the spool's delivered position, the failed window first. Windows that
// Kafka took before they were abandoned are sent again: delivery is
// at-least-once, and the last copy of each record lands in order.
type Forwarder struct {
	s       *Spool
	p       Producer
	cfg     ForwarderConfig
	log     *slog.Logger
	metrics *Metrics
	// afterFunc starts the stall timer: time.AfterFunc, or a test's seam.
	afterFunc func(d time.Duration, fn func()) (stop func() bool)

	retryLog, recoverLog, readLog, ackLog *ratelog.Limiter

	stopCtx   context.Context // done once Stop is called: produce nothing more
	stopRead  context.CancelFunc
	runCtx    context.Context // done at Stop's deadline: abandon what is in flight
	cancelRun context.CancelFunc
	done      chan struct{} // closed when run returned
	stopOnce  sync.Once

	attempts int // failed epochs since a window was acknowledged; run's alone

	state  atomic.Value // string; written with mu held
	oldest atomic.Int64 // unix ns of the oldest record in flight; 0 when none; written with mu held

	// mu guards what the state derives from, so that each change of state
	// and its metric is one step. Lock order: ackMu, then mu.
	mu       sync.Mutex
	inflight int    // windows produced and not yet acknowledged or abandoned
	wait     uint64 // counts the deliveries waited for; a late stall timer of an earlier one does nothing
	stalled  bool
	retrying bool
	stopped  bool

	// ackMu serializes recording a delivery in the spool with Stop giving
	// up on the forwarder: once abandoned is set, nothing more is recorded.
	ackMu     sync.Mutex
	abandoned bool
}

// stopGrace bounds how long Stop waits past its deadline for the forwarder
// to return from the producer.
const stopGrace = 200 * time.Millisecond

// StartForwarder starts forwarding from the spool's delivered position.
// Stop it with Stop before closing the spool.
func StartForwarder(s *Spool, p Producer, cfg ForwarderConfig, log *slog.Logger) *Forwarder {
	f := newForwarder(s, p, cfg, log)
	f.start()
	return f
}

func newForwarder(s *Spool, p Producer, cfg ForwarderConfig, log *slog.Logger) *Forwarder {
	f := &Forwarder{
		s: s, p: p, cfg: cfg, log: log, metrics: s.metrics, done: make(chan struct{}),
		afterFunc:  func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop },
		retryLog:   ratelog.New(log, slog.LevelWarn, "forwarder: kafka did not take the records; sending them again", 10*time.Second),
		recoverLog: ratelog.New(log, slog.LevelInfo, "forwarder: kafka acknowledged again", 10*time.Second),
		readLog:    ratelog.New(log, slog.LevelError, "spool: reading for the forwarder", 10*time.Second),
		ackLog:     ratelog.New(log, slog.LevelError, "spool: recording delivery", 10*time.Second),
	}
	f.stopCtx, f.stopRead = context.WithCancel(context.Background())
	f.runCtx, f.cancelRun = context.WithCancel(context.Background())
	f.mu.Lock()
	f.update()
	f.mu.Unlock()
	return f
}

func (f *Forwarder) start() {
	if reg := f.metrics.reg; reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_spool_oldest_unforwarded_seconds",
			Help: "Age of the oldest spooled record Kafka has not acknowledged (0 when none).",
		}, func() float64 { return f.OldestAge().Seconds() }))
	}
	go f.run()
}

// State is the forwarder's state: idle, forwarding, stalled, retrying or stopped.
func (f *Forwarder) State() string { return f.state.Load().(string) }

// OldestAge is the age of the oldest record not yet acknowledged by Kafka
// that the forwarder is sending (or waiting to send again); 0 when it sends
// nothing.
func (f *Forwarder) OldestAge() time.Duration {
	if ns := f.oldest.Load(); ns != 0 {
		return time.Since(time.Unix(0, ns))
	}
	return 0
}

// update derives the state from what it depends on. f.mu must be held.
func (f *Forwarder) update() {
	st := StateIdle
	switch {
	case f.stopped:
		st = StateStopped
	case f.retrying:
		st = StateRetrying
	case f.stalled:
		st = StateStalled
	case f.inflight > 0:
		st = StateForwarding
	}
	if old, _ := f.state.Load().(string); old == st {
		return
	}
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
	err    error // of Produce
}

// readError is a failure to read the spool, as opposed to Kafka's.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// run runs epochs until the forwarder stops, backing off after each failed
// one.
func (f *Forwarder) run() {
	defer close(f.done)
	defer func() {
		f.mu.Lock()
		f.stopped, f.inflight, f.stalled, f.retrying = true, 0, false, false
		f.oldest.Store(0)
		f.update()
		f.mu.Unlock()
	}()
	for {
		err := f.epoch()
		if err == nil || f.stopCtx.Err() != nil {
			return
		}
		f.attempts++
		backoff := f.cfg.MaxBackoff
		if re := (*readError)(nil); errors.As(err, &re) {
			// A read error is a bug or a damaged disk: say so, and try
			// again rather than skip records.
			f.readLog.Log("err", err)
		} else {
			f.metrics.ForwardErrors.Inc()
			backoff = f.cfg.MinBackoff // doubling per failure, up to MaxBackoff
			for i := 1; i < f.attempts && backoff < f.cfg.MaxBackoff; i++ {
				backoff *= 2
			}
			backoff = min(backoff, f.cfg.MaxBackoff)
		}
		f.mu.Lock()
		f.retrying = true
		f.update()
		f.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-f.stopCtx.Done(): // nothing is in flight: stop at once
			t.Stop()
			return
		}
		f.mu.Lock()
		f.retrying = false
		f.update()
		f.mu.Unlock()
	}
}

// epoch produces windows from the spool's delivered position on, at most
// Windows of them unacknowledged at once, and waits for them in order,
// recording each delivery in the spool. It returns nil once the forwarder
// stops or the spool is closed, and otherwise the error of the first window
// that failed (or of reading the spool). Before it returns, the reader has
// stopped: nothing newer than the failed window was produced after the
// failure, and the windows produced after it are abandoned.
func (f *Forwarder) epoch() error {
	ctx, abort := context.WithCancel(f.runCtx)
	slots := make(chan struct{}, max(f.cfg.Windows, 1))
	windows := make(chan *window, cap(slots))
	var readErr error
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(windows)
		readErr = f.read(ctx, slots, windows)
	}()
	defer func() {
		abort()
		<-readerDone // a Produce under way ends before the next epoch's first
		f.mu.Lock()
		f.inflight = 0
		f.update()
		f.mu.Unlock()
	}()
	for w := range windows {
		if err := f.deliver(ctx, w); err != nil {
			if ctx.Err() != nil {
				return nil // abandoned at Stop's deadline
			}
			f.retryLog.Log("records", len(w.recs), "attempt", f.attempts+1, "err", err)
			return err
		}
		if f.attempts > 0 {
			f.recoverLog.Log("attempts", f.attempts+1)
			f.attempts = 0
		}
		if !f.record(w) {
			return nil
		}
		<-slots
	}
	return readErr // the reader stopped: at Stop, at Close, or failing
}

// read reads windows from the spool's delivered position, produces them,
// and hands them to the epoch in order, taking a slot for each. It stops
// when ctx ends, when Stop is called, or after a window whose Produce
// failed: nothing newer may be produced before that one.
func (f *Forwarder) read(ctx context.Context, slots chan<- struct{}, windows chan<- *window) error {
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(f.stopCtx, cancel)()
	r := f.s.NewReader(f.s.Delivered())
	defer r.Close()
	for {
		select {
		case slots <- struct{}{}:
		case <-readCtx.Done():
			return nil
		}
		entries, next, err := r.Next(readCtx, f.cfg.WindowBytes)
		if err != nil {
			if readCtx.Err() != nil || errors.Is(err, ErrClosed) {
				return nil
			}
			return &readError{err}
		}
		w := &window{recs: make([]event.Record, len(entries)), next: next, oldest: entries[0].AppendedAt.UnixNano()}
		for i := range entries {
			w.recs[i] = entries[i].Record
		}
		f.mu.Lock()
		if f.inflight == 0 {
			f.oldest.Store(w.oldest)
		}
		f.inflight++
		f.update()
		f.mu.Unlock()
		w.d, w.err = f.p.Produce(w.recs)
		windows <- w // never blocks: it holds as many windows as there are slots
		if w.err != nil {
			return nil
		}
	}
}

// deliver waits until Kafka acknowledged all of w, reporting StateStalled
// while that takes more than StallAfter.
func (f *Forwarder) deliver(ctx context.Context, w *window) error {
	f.mu.Lock()
	f.oldest.Store(w.oldest)
	f.wait++
	wait := f.wait
	f.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	stop := func() bool { return false }
	if f.cfg.StallAfter > 0 {
		stop = f.afterFunc(f.cfg.StallAfter, func() {
			f.mu.Lock()
			if f.wait == wait { // still waiting for w
				f.stalled = true
				f.update()
			}
			f.mu.Unlock()
		})
	}
	err := w.d.Wait(ctx)
	stop()
	f.mu.Lock()
	f.wait++ // a stall timer that fires now does nothing
	f.stalled = false
	f.update()
	f.mu.Unlock()
	return err
}

// record records the delivery of w in the spool, unless Stop gave up on
// the forwarder (false).
func (f *Forwarder) record(w *window) bool {
	f.ackMu.Lock()
	defer f.ackMu.Unlock()
	if f.abandoned {
		return false
	}
	if err := f.s.Ack(w.next); err != nil {
		f.ackLog.Log("err", err)
	}
	f.metrics.Forwarded.Add(float64(len(w.recs)))
	f.mu.Lock()
	f.inflight--
	if f.inflight == 0 {
		f.oldest.Store(0)
	}
	f.update()
	f.mu.Unlock()
	return true
}

// Stop stops the forwarder: it produces nothing more, lets the windows in
// flight be acknowledged until ctx ends, then abandons them (they are sent
// again on the next start); a failed window is not retried. It returns once
// the forwarder has stopped, and at the latest a fraction of a second after
// ctx ended, even if the producer's Produce does not return: the forwarder
// then records no delivery after Stop returned, so the spool may be closed,
// and its goroutine ends once Produce returns. It is safe to call more than
// once, and concurrently.
func (f *Forwarder) Stop(ctx context.Context) {
	f.stopOnce.Do(func() {
		f.stopRead()
		select {
		case <-f.done:
			return
		case <-ctx.Done():
		}
		f.cancelRun()
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-f.done:
			f.log.Warn("forwarder: shutdown deadline with windows in flight; they are sent again on the next start")
			return
		case <-t.C:
		}
		f.ackMu.Lock()
		f.abandoned = true
		f.ackMu.Unlock()
		f.mu.Lock()
		f.stopped = true
		f.update()
		f.mu.Unlock()
		f.log.Error("forwarder: the producer did not return by the shutdown deadline; leaving it behind; what it had is sent again on the next start")
	})
}
