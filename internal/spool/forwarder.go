package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
	"github.com/inlet-dev/inlet/internal/relay"
)

// Producer hands records to Kafka in order and returns at once; the
// Delivery tells when Kafka acknowledged all of them. The forwarder calls
// Produce from one goroutine at a time. A Produce that does not return
// holds the forwarder back, but not Stop (see Forwarder.Stop).
type Producer interface {
	Produce(recs []event.Record) (Delivery, error)
}

// Delivery is the pending acknowledgement of one Produce call. Once Wait
// returned nil, the producer holds neither the slice given to Produce nor
// any of the records' bytes or headers: the forwarder reads the next
// records into them.
type Delivery = relay.Pending

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

// stateNames maps the engine's states to the forwarder's.
var stateNames = [...]string{relay.StateIdle: StateIdle, relay.StateSending: StateForwarding, relay.StateStalled: StateStalled,
	relay.StateRetrying: StateRetrying, relay.StateStuck: StateStuck, relay.StateStopped: StateStopped}

var states = stateNames[:]

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
// only once Kafka acknowledged all of it (and all before it). It is the
// spool's side of a relay.Engine: the spool is its source, read from the
// delivered position, the producer its sink.
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
	cfg     ForwarderConfig
	log     *slog.Logger
	metrics *Metrics
	e       *relay.Engine[event.Record]
	src     *source
	// afterFunc starts the stall timer: time.AfterFunc, or a test's seam.
	afterFunc func(d time.Duration, fn func()) (stop func() bool)
	// stateHook, a test's seam, sees each new state; the engine's lock is held.
	stateHook func(string)

	retryLog, recoverLog, readLog, ackLog, poisonLog, parkLog *ratelog.Limiter

	done chan struct{} // closed once the engine returned and the reader is closed

	// poisonFails counts Poison's transient failures in a row for the
	// record poisonSeq; the engine's goroutine's alone.
	poisonSeq   uint64
	poisonFails int
	lastAt      atomic.Int64 // unix ns appended-at of the last record read
	stuckAt     atomic.Int64 // unix ns when the state last became stuck; 0 when not stuck
	state       atomic.Value // string
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
		s: s, cfg: cfg, log: log, metrics: s.metrics, done: make(chan struct{}),
		afterFunc:  func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop },
		retryLog:   ratelog.New(log, slog.LevelWarn, "forwarder: kafka did not take the records; sending them again", 10*time.Second),
		recoverLog: ratelog.New(log, slog.LevelInfo, "forwarder: kafka acknowledged again", 10*time.Second),
		readLog:    ratelog.New(log, slog.LevelError, "spool: reading for the forwarder", 10*time.Second),
		ackLog:     ratelog.New(log, slog.LevelError, "spool: recording delivery", 10*time.Second),
		poisonLog:  ratelog.New(log, slog.LevelWarn, "forwarder: kafka refused records for good; sent them to the dead-letter path", 10*time.Second),
		parkLog:    ratelog.New(log, slog.LevelError, "forwarder: kafka refused records for good, and the dead-letter path too; parked them under the spool's parked/ directory", 10*time.Second),
	}
	f.src = &source{f: f, free: make(chan *windowMem, max(cfg.Windows, 1))}
	f.e = relay.New[event.Record](f.src, producerSink{p}, relay.Config[event.Record]{
		Windows: cfg.Windows, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff,
		StallAfter: cfg.StallAfter, StopGrace: stopGrace,
		Permanent: cfg.Permanent,
		Poison:    f.poison,
		Waiting:   s.pending, // between windows, and between a failed epoch and its retry, records may wait
		OnState:   f.setState,
		AfterFunc: func(d time.Duration, fn func()) func() bool { return f.afterFunc(d, fn) },
		OnFail: func(err error, records, attempt int) {
			f.retryLog.Log("records", records, "attempt", attempt, "err", err)
		},
		OnRetry: func(err error, stuck bool) {
			if !stuck {
				f.metrics.ForwardErrors.Inc()
			}
		},
		OnRecover: func(attempts int) { f.recoverLog.Log("attempts", attempts+1) },
		OnIsolate: func(records int, err error) {
			f.log.Warn("forwarder: kafka refused a window for good; sending its records one at a time to find those it refuses",
				"records", records, "err", err)
		},
	})
	return f
}

func (f *Forwarder) start() {
	if reg := f.metrics.reg; reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_spool_oldest_unforwarded_seconds",
			Help: "Age of the oldest spooled record Kafka has not acknowledged (0 when none).",
		}, func() float64 { return f.OldestAge().Seconds() }))
	}
	go func() {
		defer close(f.done)
		defer f.src.close()
		f.e.Run()
	}()
}

// State is the forwarder's state: idle, forwarding, stalled, retrying, stuck or stopped.
func (f *Forwarder) State() string { return f.state.Load().(string) }

// OldestAge is the age of the oldest record not yet acknowledged by Kafka
// that the forwarder is sending (or waiting to send again); 0 when it sends
// nothing. While stuck, the age of the record that waits: the last one
// read before it (the one that waits was appended no earlier), or when it
// first could not be sent.
func (f *Forwarder) OldestAge() time.Duration {
	if f.State() == StateStuck {
		ns := f.lastAt.Load()
		if ns == 0 {
			ns = f.stuckAt.Load()
		}
		return time.Since(time.Unix(0, ns))
	}
	if t := f.e.Oldest(); !t.IsZero() {
		return time.Since(t)
	}
	return 0
}

// setState records the engine's new state and its metric; the engine's
// lock is held.
func (f *Forwarder) setState(rs relay.State) {
	st := stateNames[rs]
	switch {
	case st != StateStuck:
		f.stuckAt.Store(0)
	case f.stuckAt.Load() == 0:
		f.stuckAt.Store(time.Now().UnixNano())
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

// producerSink is the engine's sink: the producer.
type producerSink struct{ p Producer }

func (k producerSink) Send(_ context.Context, recs []event.Record) (relay.Pending, error) {
	return k.p.Produce(recs)
}

// window is records read together, on their way to Kafka; the Meta of
// their relay.Batch.
type window struct {
	ents []Entry    // the batch's records, with their positions and times; none: a gap
	mem  *windowMem // what the records and ents live in
	next Pos        // the position after them
}

// source is the engine's source: the spool, read from the delivered
// position in windows of WindowBytes.
type source struct {
	f *Forwarder
	r *Reader // nil: the next Next reads from the delivered position
	// free holds the memory of windows Kafka acknowledged, for the reader
	// to read the next windows into (recycle); bounded by Windows.
	free chan *windowMem
	// readFails counts the failures in a row to read at readAt.
	readFails int
	readAt    Pos
}

func (src *source) Next(ctx context.Context) (relay.Batch[event.Record], error) {
	f := src.f
	if src.r == nil {
		src.open(f.s.Delivered())
	}
	entries, next, err := src.r.Next(ctx, f.cfg.WindowBytes)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, ErrClosed) {
			err = io.EOF
		} else if ctx.Err() == nil {
			return src.unreadable(err, next)
		}
		return relay.Batch[event.Record]{}, err
	}
	f.lastAt.Store(entries[len(entries)-1].AppendedAt.UnixNano())
	m := src.r.last
	if cap(m.recs) < len(entries) {
		m.recs = make([]event.Record, len(entries))
	}
	m.recs = m.recs[:len(entries)]
	for i := range entries {
		m.recs[i] = entries[i].Record
	}
	return relay.Batch[event.Record]{Records: m.recs, Meta: &window{ents: entries, mem: m, next: next}, Time: entries[0].AppendedAt}, nil
}

func (src *source) open(at Pos) {
	src.close()
	src.r = src.f.s.NewReader(at)
	src.r.free = src.free
}

func (src *source) close() {
	if src.r != nil {
		src.r.Close()
		src.r = nil
	}
}

// unreadable counts a failure to read the spool at pos (a damaged disk, or
// a bug): the engine reports StateStuck and tries again. At the
// QuarantineAfter-th in a row, once everything before pos is delivered (a
// window in flight before it could fail and be read again), it gives up
// the records that cannot be read there and yields them as a gap, settled
// in order. A failure for want of a file descriptor or memory is not
// counted: it says nothing of the records, which are read once the
// shortage ends.
func (src *source) unreadable(err error, pos Pos) (relay.Batch[event.Record], error) {
	f := src.f
	if exhausted(err) {
		f.readLog.Log("err", err, "attempt", "until the shortage ends")
		return relay.Batch[event.Record]{}, err
	}
	if src.readFails == 0 || pos != src.readAt {
		src.readFails, src.readAt = 0, pos
	}
	src.readFails++
	f.readLog.Log("err", err, "attempt", src.readFails, "of", max(f.cfg.QuarantineAfter, 1))
	if src.readFails < max(f.cfg.QuarantineAfter, 1) || f.s.Delivered().Seq < pos.Seq {
		return relay.Batch[event.Record]{}, err
	}
	next, _, serr := f.s.skipDamaged(pos, err)
	if serr != nil {
		f.readLog.Log("err", serr)
		return relay.Batch[event.Record]{}, serr
	}
	src.readFails = 0
	src.open(next)
	return relay.Batch[event.Record]{Meta: &window{next: next}}, nil
}

// Rewind makes the next Next read from the delivered position.
func (src *source) Rewind() error {
	src.close()
	return nil
}

// Settled records the delivery of records [from, to) of b in the spool
// (those settled with err were parked or dead-lettered, not counted as
// forwarded), and recycles the memory of a window Kafka acknowledged whole.
func (src *source) Settled(b relay.Batch[event.Record], from, to int, err error) {
	f := src.f
	w := b.Meta.(*window)
	next := w.next
	if to > 0 {
		next = w.ents[to-1].Next
	}
	if aerr := f.s.Ack(next); aerr != nil {
		f.ackLog.Log("err", aerr)
	}
	if err == nil {
		f.metrics.Forwarded.Add(float64(to - from))
		if from == 0 && to == len(w.ents) && to > 0 {
			// The producer holds none of the window's memory: the next
			// windows may be read into it.
			recycle(src.free, w.mem)
		}
	}
}

// poison hands the i-th record of b, refused for good with cause, to
// Poison, and parks it if Poison refuses it for good too (or there is no
// Poison). It returns an error when the record is in neither place: a
// transient failure of Poison, or parking failed (a *relay.StuckError).
func (f *Forwarder) poison(ctx context.Context, b relay.Batch[event.Record], i int, cause error) error {
	e := b.Meta.(*window).ents[i]
	reason := cause.Error()
	if f.cfg.Poison != nil {
		perr := f.cfg.Poison(ctx, e, cause)
		if perr == nil {
			f.poisonLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "err", cause)
			return nil
		}
		if ctx.Err() != nil {
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
		f.readLog.Log("err", err)
		return &relay.StuckError{Err: err}
	}
	f.parkLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "reason", reason,
		"file", filepath.Join(f.s.Dir(), parkedFile))
	return nil
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
	switch f.e.Stop(ctx) {
	case relay.ErrAbandoned:
		f.log.Warn("forwarder: shutdown deadline with windows in flight; they are sent again on the next start")
	case relay.ErrLeftBehind:
		f.log.Error("forwarder: the producer did not return by the shutdown deadline; leaving it behind; what it had is sent again on the next start")
	}
}
