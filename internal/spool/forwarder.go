package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
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
	// or ctx is done (it must then return). Once it returned nil, the
	// producer holds neither the slice given to Produce nor any of the
	// records' bytes or headers: the forwarder reads the next records into
	// them.
	Wait(ctx context.Context) error
}

// Forwarder states.
const (
	StateIdle       = "idle"       // everything spooled was delivered
	StateForwarding = "forwarding" // windows are on their way to Kafka
	StateStalled    = "stalled"    // Kafka has not acknowledged the oldest window for StallAfter
	StateRetrying   = "retrying"   // a window failed; waiting to send it, and those after it, again
	// StateStuck: the next record cannot be read (a damaged frame, a
	// segment gone from disk), or a record Kafka refused for good can be
	// neither dead-lettered nor parked; nothing after it is delivered.
	// OldestAge says how long it has waited. An unreadable record is given
	// up after QuarantineAfter tries.
	StateStuck   = "stuck"
	StateStopped = "stopped"
)

var states = []string{StateIdle, StateForwarding, StateStalled, StateRetrying, StateStuck, StateStopped}

// ForwarderConfig configures a forwarder.
type ForwarderConfig struct {
	// WindowBytes is the most bytes of spool frames read, sent and
	// acknowledged together, and Windows how many windows are in flight at
	// once. Their product bounds what the forwarder holds while it drains
	// a backlog, in frames: in memory about 6 times that (each record's
	// entry, its copy for the producer, franz-go's record and batch).
	WindowBytes int
	Windows     int
	MinBackoff  time.Duration // after a failed window, doubling up to MaxBackoff
	MaxBackoff  time.Duration
	StallAfter  time.Duration // a window unacknowledged this long reports StateStalled
	// QuarantineAfter is how many times in a row reading the same record
	// may fail (StateStuck meanwhile, MaxBackoff apart) before it is given
	// up: the damaged segment is copied to <segment>.corrupt, the records
	// lost are counted (inlet_spool_quarantined_records_total) and logged,
	// and delivery goes on after them.
	QuarantineAfter int

	// Permanent, if set, reports whether a delivery error is one no retry
	// can fix (a record too large for the topic, an invalid record, no
	// authorization). A window failing with one is sent again one record
	// at a time, in order, to find the records Kafka refuses; each of
	// those is handed to Poison, and delivery goes on after it. Nil: every
	// error is retried.
	Permanent func(error) bool
	// Poison, if set, hands e's record, refused for good with err, to a
	// dead-letter path (e.g. a dead-letter topic) and returns once it is
	// there. If it fails with an error Permanent accepts, or is nil, the
	// record is parked in the spool's parked/ file
	// (inlet_spool_parked_records_total); a transient error is retried like
	// a failed window, and the record parked at the QuarantineAfter-th in a
	// row. It is called from the forwarder's goroutine, one
	// record at a time, and must return once ctx is done.
	Poison func(ctx context.Context, e Entry, err error) error
}

// DefaultForwarderConfig returns the documented defaults.
func DefaultForwarderConfig() ForwarderConfig {
	// 256 KiB windows drain a backlog as fast as 1 MiB ones did
	// (200,000 records of 250 B to a real broker on one core: 0.6-0.95 s
	// for both), with 6 MB of live heap at most instead of 19-24 MB.
	return ForwarderConfig{WindowBytes: 256 << 10, Windows: 4, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, StallAfter: 5 * time.Second, QuarantineAfter: 3}
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
	// stateHook, a test's seam, sees each new state; f.mu is held.
	stateHook func(string)

	retryLog, recoverLog, readLog, ackLog, poisonLog, parkLog *ratelog.Limiter

	// free holds the memory of windows Kafka acknowledged, for the reader
	// to read the next windows into (recycle); bounded by Windows.
	free chan *windowMem

	stopCtx   context.Context // done once Stop is called: produce nothing more
	stopRead  context.CancelFunc
	runCtx    context.Context // done at Stop's deadline: abandon what is in flight
	cancelRun context.CancelFunc
	done      chan struct{} // closed when run returned
	stopOnce  sync.Once

	attempts int // failed epochs since a window was acknowledged; run's alone
	// readFails counts the failures in a row to read at readAt; run's alone.
	readFails int
	readAt    Pos
	stuckAt   time.Time // when reading at readAt first failed; run's alone
	// poisonFails counts Poison's transient failures in a row for the
	// record poisonSeq; run's alone.
	poisonSeq   uint64
	poisonFails int
	lastAt      atomic.Int64 // unix ns appended-at of the last record read

	state  atomic.Value // string; written with mu held
	oldest atomic.Int64 // unix ns of the oldest record in flight; 0 when none; written with mu held

	// mu guards what the state derives from, so that each change of state
	// and its metric is one step. Lock order: ackMu, then mu, then the
	// spool's mu (update reads whether records wait).
	mu       sync.Mutex
	inflight int    // windows produced and not yet acknowledged or abandoned
	wait     uint64 // counts the deliveries waited for; a late stall timer of an earlier one does nothing
	stalled  bool
	retrying bool
	stuck    bool
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
		free:       make(chan *windowMem, max(cfg.Windows, 1)),
		afterFunc:  func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop },
		retryLog:   ratelog.New(log, slog.LevelWarn, "forwarder: kafka did not take the records; sending them again", 10*time.Second),
		recoverLog: ratelog.New(log, slog.LevelInfo, "forwarder: kafka acknowledged again", 10*time.Second),
		readLog:    ratelog.New(log, slog.LevelError, "spool: reading for the forwarder", 10*time.Second),
		ackLog:     ratelog.New(log, slog.LevelError, "spool: recording delivery", 10*time.Second),
		poisonLog:  ratelog.New(log, slog.LevelWarn, "forwarder: kafka refused records for good; sent them to the dead-letter path", 10*time.Second),
		parkLog:    ratelog.New(log, slog.LevelError, "forwarder: kafka refused records for good, and the dead-letter path too; parked them under the spool's parked/ directory", 10*time.Second),
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

// State is the forwarder's state: idle, forwarding, stalled, retrying, stuck or stopped.
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

// update derives the state from what it depends on. f.mu must be held; it
// takes the spool's lock (lock order: f.mu, then s.mu).
func (f *Forwarder) update() {
	st := StateIdle
	switch {
	case f.stopped:
		st = StateStopped
	case f.stuck:
		st = StateStuck
	case f.retrying:
		st = StateRetrying
	case f.stalled:
		st = StateStalled
	case f.inflight > 0 || f.s.pending():
		// Between windows, and between a failed epoch and its retry,
		// records may wait: the state is idle only once none does.
		st = StateForwarding
	}
	if old, _ := f.state.Load().(string); old == st {
		return
	}
	f.state.Store(st)
	if f.stateHook != nil {
		f.stateHook(st)
	}
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
	ents   []Entry    // recs, with their positions and times
	mem    *windowMem // what recs and ents live in
	next   Pos        // the position after them
	oldest int64
	d      Delivery
	err    error // of Produce
}

// readError is a failure to read the spool at pos, as opposed to Kafka's.
type readError struct {
	err error
	pos Pos
}

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// poisonError is a window Kafka refused with an error Permanent accepts.
type poisonError struct {
	w   *window
	err error
}

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// parkError is a failure to park a poison record.
type parkError struct{ err error }

func (e *parkError) Error() string { return e.err.Error() }
func (e *parkError) Unwrap() error { return e.err }

// run runs epochs until the forwarder stops, backing off after each failed
// one.
func (f *Forwarder) run() {
	defer close(f.done)
	defer func() {
		f.mu.Lock()
		f.stopped, f.inflight, f.stalled, f.retrying, f.stuck = true, 0, false, false, false
		f.oldest.Store(0)
		f.update()
		f.mu.Unlock()
	}()
	for {
		err := f.epoch()
		if err == nil || f.stopCtx.Err() != nil {
			return
		}
		if pe := (*poisonError)(nil); errors.As(err, &pe) {
			if err = f.isolate(pe); err == nil || f.stopCtx.Err() != nil {
				f.attempts = 0
				continue // the next epoch returns at once after Stop
			}
		}
		backoff := f.cfg.MaxBackoff
		var (
			re *readError
			pe *parkError
		)
		switch {
		case errors.As(err, &re):
			// A damaged disk, or a bug: say so, try again a few times,
			// then give the record up rather than block what follows.
			if f.unreadable(re) {
				continue
			}
		case errors.As(err, &pe):
			f.readLog.Log("err", err)
			f.setStuck()
		default:
			f.attempts++
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

// setStuck reports StateStuck, with the age of the record that waits: the
// last one read before it (the one that waits was appended no earlier), or
// when it first could not be sent.
func (f *Forwarder) setStuck() {
	if f.stuckAt.IsZero() {
		f.stuckAt = time.Now()
	}
	oldest := f.lastAt.Load()
	if oldest == 0 {
		oldest = f.stuckAt.UnixNano()
	}
	f.mu.Lock()
	f.stuck = true
	f.oldest.Store(oldest)
	f.update()
	f.mu.Unlock()
}

// unreadable counts a failure to read the spool at re.pos; at the
// QuarantineAfter-th in a row it gives up the records that cannot be read
// there and records the position after them as delivered (true). A
// failure for want of a file descriptor or memory is not counted: it says
// nothing of the records, which are read once the shortage ends.
func (f *Forwarder) unreadable(re *readError) bool {
	if exhausted(re.err) {
		f.readLog.Log("err", re.err, "attempt", "until the shortage ends")
		f.setStuck()
		return false
	}
	if f.readFails == 0 || re.pos != f.readAt {
		f.readFails, f.readAt = 0, re.pos
	}
	f.readFails++
	f.readLog.Log("err", re.err, "attempt", f.readFails, "of", max(f.cfg.QuarantineAfter, 1))
	f.setStuck()
	if f.readFails < max(f.cfg.QuarantineAfter, 1) {
		return false
	}
	next, _, err := f.s.skipDamaged(re.pos, re.err)
	if err != nil {
		f.readLog.Log("err", err)
		return false
	}
	if !f.ack(next, 0) {
		return false
	}
	f.readFails, f.stuckAt = 0, time.Time{}
	f.mu.Lock()
	f.stuck = false
	f.oldest.Store(0)
	f.update()
	f.mu.Unlock()
	return true
}

// isolate sends the records of pe's window again one at a time, in order,
// each once Kafka acknowledged the one before, and hands those it refuses
// for good to poison, recording each record settled as delivered. It
// returns nil once past the window (or stopping), else the error that
// stopped it: the next epoch starts from the delivered position.
func (f *Forwarder) isolate(pe *poisonError) error {
	f.log.Warn("forwarder: kafka refused a window for good; sending its records one at a time to find those it refuses",
		"records", len(pe.w.ents), "err", pe.err)
	defer func() {
		f.mu.Lock()
		f.inflight = 0
		f.update()
		f.mu.Unlock()
	}()
	for _, e := range pe.w.ents {
		if f.stopCtx.Err() != nil {
			return nil
		}
		if e.Seq < f.s.Delivered().Seq {
			continue
		}
		f.mu.Lock()
		f.inflight = 1
		f.oldest.Store(e.AppendedAt.UnixNano())
		f.update()
		f.mu.Unlock()
		n := 1.0
		if err := f.produceOne(e.Record); err != nil {
			if f.runCtx.Err() != nil || !f.cfg.Permanent(err) {
				return err
			}
			if err := f.poison(e, err); err != nil {
				return err
			}
			n = 0
		}
		if !f.ack(e.Next, n) {
			return nil
		}
	}
	f.oldest.Store(0)
	return nil
}

// produceOne sends rec alone and waits for Kafka's acknowledgement.
func (f *Forwarder) produceOne(rec event.Record) error {
	d, err := f.p.Produce([]event.Record{rec})
	if err != nil {
		return err
	}
	return d.Wait(f.runCtx)
}

// poison hands e, refused for good with cause, to Poison, and parks it if
// Poison refuses it for good too (or there is no Poison). It returns an
// error when e is in neither place: a transient failure of Poison, or
// parking failed (a *parkError).
func (f *Forwarder) poison(e Entry, cause error) error {
	reason := cause.Error()
	if f.cfg.Poison != nil {
		perr := f.cfg.Poison(f.runCtx, e, cause)
		if perr == nil {
			f.poisonLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "err", cause)
			return nil
		}
		if f.runCtx.Err() != nil {
			return perr
		}
		if !f.cfg.Permanent(perr) {
			// Retried, but not for ever: a dead-letter topic that is
			// missing must not block what follows.
			if f.poisonSeq != e.Seq {
				f.poisonSeq, f.poisonFails = e.Seq, 0
			}
			if f.poisonFails++; f.poisonFails < max(f.cfg.QuarantineAfter, 1) {
				return fmt.Errorf("handing a record kafka refused for good (%w) to the dead-letter path: %w", cause, perr)
			}
			reason = fmt.Sprintf("%v; the dead-letter path failed %d times: %v", cause, f.poisonFails, perr)
		} else {
			reason = fmt.Sprintf("%v; the dead-letter path refused it too: %v", cause, perr)
		}
	}
	if err := f.s.park(e.Record, e.AppendedAt, reason); err != nil {
		return &parkError{err}
	}
	f.parkLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "reason", reason,
		"file", filepath.Join(f.s.Dir(), parkedFile))
	return nil
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
			if f.cfg.Permanent != nil && f.cfg.Permanent(err) {
				return &poisonError{w: w, err: err}
			}
			return err
		}
		if f.attempts > 0 {
			f.recoverLog.Log("attempts", f.attempts+1)
			f.attempts = 0
		}
		if !f.record(w) {
			return nil
		}
		// Kafka acknowledged every record of w: the producer holds none
		// of its memory, so the next windows may be read into it.
		recycle(f.free, w.mem)
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
	r.free = f.free
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
			return &readError{err: err, pos: next}
		}
		f.lastAt.Store(entries[len(entries)-1].AppendedAt.UnixNano())
		m := r.last
		if cap(m.recs) < len(entries) {
			m.recs = make([]event.Record, len(entries))
		}
		m.recs = m.recs[:len(entries)]
		for i := range entries {
			m.recs[i] = entries[i].Record
		}
		w := &window{recs: m.recs, ents: entries, mem: m, next: next, oldest: entries[0].AppendedAt.UnixNano()}
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
	if !f.ack(w.next, float64(len(w.recs))) {
		return false
	}
	f.readFails, f.stuckAt = 0, time.Time{}
	f.mu.Lock()
	f.inflight--
	f.stuck = false
	if f.inflight == 0 {
		f.oldest.Store(0)
	}
	f.update()
	f.mu.Unlock()
	return true
}

// ack records that everything before next is settled (n records of it
// delivered), unless Stop gave up on the forwarder (false).
func (f *Forwarder) ack(next Pos, n float64) bool {
	f.ackMu.Lock()
	defer f.ackMu.Unlock()
	if f.abandoned {
		return false
	}
	if err := f.s.Ack(next); err != nil {
		f.ackLog.Log("err", err)
	}
	f.metrics.Forwarded.Add(n)
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
