// Package relay delivers batches of records from a Source to a Sink in
// order, at least once: several batches in flight, retired in the order
// sent; after a failure nothing more is sent until everything in flight is
// answered or abandoned, and then, after a backoff, everything not settled
// is sent again in order from the source, the failed batch first. Records
// the sink refuses for good are found by sending them one at a time and
// handed to a poison callback. It knows nothing of what the records are.
package relay

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Batch is records yielded together by a Source.
type Batch[R any] struct {
	Records []R
	// Meta is the source's own mark (a position, the memory the records
	// live in); the engine hands it back untouched.
	Meta any
	// Time is when the oldest record was made: Engine.Oldest reports it
	// while the batch is unsettled. Zero if unknown.
	Time time.Time
}

// Source yields batches in order and remembers what is settled.
//
// Next blocks until a batch is ready or ctx ends (then it returns ctx's
// error, or any error: the engine ignores it). io.EOF: nothing more will
// come; the engine returns once everything yielded is settled, and calls
// Next again after a Rewind. Any other error stops sending: once
// everything yielded before is answered, the engine reports StateStuck,
// waits MaxBackoff, rewinds and calls Next again. A batch with no records
// is a gap the source gives up (records it cannot read): it is sent
// nowhere and settled in order.
//
// Rewind makes the next Next yield again from the first record not
// settled. The engine calls it, never concurrently with Next, after a
// failure, once nothing is in flight (an error: as an error of Next).
//
// Settled reports that records [from, to) of b are settled: landed (err
// nil), or refused for good, with err saying why (an answer Dropped
// accepts, or the error a record sent alone was handed to Poison with). It
// is called in order, never after Stop returned, from one goroutine at a
// time, possibly while Next runs on another; it must not block.
type Source[R any] interface {
	Next(ctx context.Context) (Batch[R], error)
	Rewind() error
	Settled(b Batch[R], from, to int, err error)
}

// Sink takes batches and answers them in the order sent.
//
// Send hands recs over and returns without waiting for them to land,
// except while the sink's own bounded buffer is full (until ctx ends). ctx
// is the engine's: it ends at Stop's deadline, not before. The engine
// calls Send from one goroutine at a time. An error means recs were not
// taken: nothing is sent after it before the engine retries. A batch
// that fails must fail together with every batch sent after it that has
// not answered yet, or Config.Drain must be set.
type Sink[R any] interface {
	Send(ctx context.Context, recs []R) (Pending, error)
}

// Pending is the answer to one Send.
type Pending interface {
	// Wait blocks until every record landed (nil), one failed, or ctx
	// ends (it must then return). Once it returned nil the sink holds
	// none of the records' memory.
	Wait(ctx context.Context) error
}

// State is what the engine is doing.
type State uint8

const (
	StateIdle     State = iota // nothing in flight, and the source has nothing waiting (Config.Waiting)
	StateSending               // batches are in flight, or records wait to be sent
	StateStalled               // the oldest batch in flight has not been answered for StallAfter
	StateRetrying              // a batch failed: waiting to send it, and everything after it, again
	StateStuck                 // the source cannot yield the next batch, or Poison failed with a *StuckError
	StateStopped               // Run returned, or Stop gave up on it
)

var stateNames = [...]string{"idle", "sending", "stalled", "retrying", "stuck", "stopped"}

func (s State) String() string { return stateNames[s] }

// StuckError, returned by Poison, reports that the record can be put
// nowhere (the dead-letter path and its fallback failed): StateStuck, and
// retried after MaxBackoff.
type StuckError struct{ Err error }

func (e *StuckError) Error() string { return e.Err.Error() }
func (e *StuckError) Unwrap() error { return e.Err }

// Stop's results.
var (
	// ErrAbandoned: Stop's ctx ended with batches in flight; they were
	// abandoned (not settled: sent again on the next run).
	ErrAbandoned = errors.New("relay: stopped with batches in flight; they are not settled")
	// ErrLeftBehind: the sink did not return within StopGrace after
	// Stop's ctx ended; the engine settles nothing more, and its goroutines
	// end once the sink returns.
	ErrLeftBehind = errors.New("relay: the sink did not return by the stop deadline; left behind")
)

// Config configures an Engine. Every func is optional; those called with
// the engine's lock held say so, the others are called from the engine's
// goroutines, one at a time.
type Config[R any] struct {
	Windows    int           // batches in flight at once (at least 1)
	MinBackoff time.Duration // after a failure, doubling per failure in a row up to MaxBackoff
	MaxBackoff time.Duration
	StallAfter time.Duration // the oldest batch unanswered this long: StateStalled; 0: never
	StopGrace  time.Duration // how long Stop waits past its ctx for the sink; 0: 200ms
	// Drain: after a failure, wait for every batch in flight to answer
	// before sending again (for a sink whose batches may fail one by
	// one). Otherwise they are abandoned: their Wait's ctx ends.
	Drain bool

	// Permanent reports an error no retry fixes: the batch's records are
	// sent again one at a time, each alone in flight, and each refused
	// with such an error is handed to Poison.
	Permanent func(error) bool
	// Poison takes b.Records[i], refused for good with err, to a
	// dead-letter path and returns once it is there; Settled follows. An
	// error: the record is tried again later (a *StuckError: StateStuck).
	// Nil Poison: the record is settled with err (dropped). ctx ends at
	// Stop's deadline.
	Poison func(ctx context.Context, b Batch[R], i int, err error) error
	// Dropped reports an answer that settles the batch anyway: the sink
	// landed its records but some it refused for good, and counted them
	// (Settled gets err).
	Dropped func(error) bool
	// Landed reports how many leading records of a batch that failed with
	// err landed: they are settled and not sent again.
	Landed func(error) int
	// Fatal reports an answer that must stop the engine: Run returns it;
	// nothing of the batch is settled.
	Fatal func(error) bool
	// Resume is called with nothing in flight before the first Send after
	// a failed answer (a sink may refuse every Send after a failure until
	// then, so that nothing lands ahead of the resend).
	Resume func()

	// Waiting reports whether the source holds records not yet yielded:
	// the state is then StateSending rather than StateIdle. The engine's
	// lock is held.
	Waiting func() bool
	// OnState sees each new state. The engine's lock is held: it must not
	// call the engine.
	OnState func(State)
	// OnFail sees a batch that failed (not one of a record sent alone),
	// attempt counting the failures since a batch last landed.
	OnFail func(err error, records, attempt int)
	// OnRetry sees a failure the engine backs off after: the sink's, the
	// source's or Poison's (stuck: StateStuck, MaxBackoff).
	OnRetry func(err error, stuck bool)
	// OnRecover sees the first batch that landed after attempts failures.
	OnRecover func(attempts int)
	// OnIsolate sees a batch refused for good (err) being sent one record
	// at a time.
	OnIsolate func(records int, err error)
	// AfterFunc starts the stall timer: time.AfterFunc's, or a test's seam.
	AfterFunc func(d time.Duration, fn func()) (stop func() bool)
}

// Engine moves batches from a Source to a Sink. Start it with Run, stop it
// with Stop.
type Engine[R any] struct {
	src  Source[R]
	sink Sink[R]
	cfg  Config[R]

	stopCtx   context.Context // done once Stop is called: send nothing more
	stopSend  context.CancelFunc
	runCtx    context.Context // done at Stop's deadline: abandon what is in flight
	cancelRun context.CancelFunc
	done      chan struct{} // closed when Run returned
	stopOnce  sync.Once

	// Run's goroutine's own:
	attempts int  // failures since a batch last landed
	alone    int  // how many records from the first not settled are sent one at a time
	failed   bool // an answer failed since the last Send: Resume first

	oldest atomic.Int64 // unix ns of the oldest unsettled batch; 0 when none; written with mu held

	// mu guards what the state derives from. Lock order: settleMu, then
	// mu, then whatever Waiting and OnState take.
	mu       sync.Mutex
	state    State
	inflight int    // batches sent and not settled or abandoned
	wait     uint64 // counts the answers waited for; a late stall timer of an earlier one does nothing
	stalled  bool
	retrying bool
	stuck    bool
	stopped  bool

	// settleMu serializes Settled with Stop giving up on the engine: once
	// abandoned is set, nothing more is settled.
	settleMu  sync.Mutex
	abandoned bool
}

// New returns an engine; nothing runs before Run.
func New[R any](src Source[R], sink Sink[R], cfg Config[R]) *Engine[R] {
	cfg.Windows = max(cfg.Windows, 1)
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 200 * time.Millisecond
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop }
	}
	e := &Engine[R]{src: src, sink: sink, cfg: cfg, done: make(chan struct{}), state: StateStopped}
	e.stopCtx, e.stopSend = context.WithCancel(context.Background())
	e.runCtx, e.cancelRun = context.WithCancel(context.Background())
	e.set(func() {})
	return e
}

// State is the engine's state.
func (e *Engine[R]) State() State {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state
}

// Oldest is the Time of the oldest batch in flight or waiting to be sent
// again; zero when there is none.
func (e *Engine[R]) Oldest() time.Time {
	if ns := e.oldest.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// set changes what the state derives from (fn, with mu held) and updates
// the state.
func (e *Engine[R]) set(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn()
	st := StateIdle
	switch {
	case e.stopped:
		st = StateStopped
	case e.stuck:
		st = StateStuck
	case e.retrying:
		st = StateRetrying
	case e.stalled:
		st = StateStalled
	case e.inflight > 0 || e.cfg.Waiting != nil && e.cfg.Waiting():
		st = StateSending
	}
	if st == e.state {
		return
	}
	e.state = st
	if e.cfg.OnState != nil {
		e.cfg.OnState(st)
	}
}

func (e *Engine[R]) setOldest(t time.Time) {
	if t.IsZero() {
		e.oldest.Store(0)
		return
	}
	e.oldest.Store(t.UnixNano())
}

// failure is why sending stopped.
type failure struct {
	err     error
	records int  // of the batch that failed, not landed
	stuck   bool // the source's, or Poison's *StuckError
	fatal   bool
}

// Run sends until the source says io.EOF and everything it yielded is
// settled (nil), Stop is called (nil), or an answer Fatal accepts (that
// error). After a Stop that gave up on it (ErrLeftBehind), it returns once
// the sink does, settling nothing more.
func (e *Engine[R]) Run() error {
	defer close(e.done)
	defer e.set(func() {
		e.stopped, e.inflight, e.stalled, e.retrying, e.stuck = true, 0, false, false, false
		e.oldest.Store(0)
	})
	rewind := false
	for {
		var f *failure
		if rewind {
			if err := e.src.Rewind(); err != nil {
				f = &failure{err: err, stuck: true}
			}
			rewind = false
		}
		isolating := e.alone > 0
		if f == nil && isolating {
			f = e.sendAlone()
		} else if f == nil {
			f = e.epoch()
		}
		if e.stopCtx.Err() != nil && (f == nil || !f.fatal) {
			return nil
		}
		if f == nil {
			if isolating { // records sent one at a time are settled: on with the rest
				e.attempts, rewind = 0, true
				continue
			}
			return nil
		}
		if f.fatal {
			return f.err
		}
		rewind = true
		if !f.stuck && !isolating && e.cfg.Permanent != nil && e.cfg.Permanent(f.err) {
			e.alone = f.records
			if e.cfg.OnIsolate != nil {
				e.cfg.OnIsolate(f.records, f.err)
			}
			e.resume()
			continue // at once: what failed is found one record at a time
		}
		backoff := e.cfg.MaxBackoff
		if f.stuck {
			e.set(func() { e.stuck = true })
		} else {
			e.attempts++
			backoff = e.cfg.MinBackoff
			for i := 1; i < e.attempts && backoff < e.cfg.MaxBackoff; i++ {
				backoff *= 2
			}
			backoff = min(backoff, e.cfg.MaxBackoff)
		}
		if e.cfg.OnRetry != nil {
			e.cfg.OnRetry(f.err, f.stuck)
		}
		e.set(func() { e.retrying = true })
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-e.stopCtx.Done(): // nothing is in flight: stop at once
			t.Stop()
			return nil
		}
		e.set(func() { e.retrying = false })
		e.resume()
	}
}

// resume calls Resume if an answer failed since the last Send.
func (e *Engine[R]) resume() {
	if e.failed && e.cfg.Resume != nil {
		e.cfg.Resume()
	}
	e.failed = false
}

// flight is a batch sent and not yet settled.
type flight[R any] struct {
	b   Batch[R]
	p   Pending
	err error // of Send
}

// epoch sends batches from the source, at most Windows unsettled at once,
// and waits for their answers in order, settling each. It returns nil at
// Stop or once the source said io.EOF and all is settled, else why it
// stopped. Before it returns the sender has stopped: nothing was sent after
// a failed batch once its failure was seen, and nothing is in flight (the
// rest was answered, or abandoned).
func (e *Engine[R]) epoch() *failure {
	sendCtx, stopSending := context.WithCancel(e.stopCtx)
	slots := make(chan struct{}, e.cfg.Windows)
	flights := make(chan flight[R], e.cfg.Windows)
	var srcErr error
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		defer close(flights)
		srcErr = e.send(sendCtx, slots, flights)
	}()
	defer func() {
		stopSending()
		<-senderDone // a Send under way returns before the next epoch's first
		e.set(func() { e.inflight = 0 })
	}()
	for fl := range flights {
		err := e.answer(&fl)
		if err == nil || e.cfg.Dropped != nil && e.cfg.Dropped(err) {
			if !e.settle(fl.b, 0, len(fl.b.Records), err) {
				return nil
			}
			if err == nil && len(fl.b.Records) > 0 && e.attempts > 0 {
				if e.cfg.OnRecover != nil {
					e.cfg.OnRecover(e.attempts)
				}
				e.attempts = 0
			}
			<-slots
			continue
		}
		if e.runCtx.Err() != nil {
			return nil // abandoned at Stop's deadline
		}
		e.failed = true
		stopSending()
		if e.cfg.Fatal != nil && e.cfg.Fatal(err) {
			return &failure{err: err, fatal: true}
		}
		if e.cfg.OnFail != nil {
			e.cfg.OnFail(err, len(fl.b.Records), e.attempts+1)
		}
		n := 0 // leading records that landed before the batch failed
		if e.cfg.Landed != nil {
			n = min(max(e.cfg.Landed(err), 0), len(fl.b.Records))
		}
		if n > 0 && !e.settle(fl.b, 0, n, nil) {
			return nil
		}
		if e.cfg.Drain {
			for fl := range flights {
				if fl.p != nil {
					fl.p.Wait(e.runCtx)
				}
			}
		}
		return &failure{err: err, records: len(fl.b.Records) - n}
	}
	if srcErr != nil && !errors.Is(srcErr, io.EOF) {
		return &failure{err: srcErr, stuck: true}
	}
	return nil
}

// send takes batches from the source, sends them, and hands them to the
// epoch in order, taking a slot for each. It stops when ctx ends, at the
// source's error, or after a Send that failed: nothing newer may be sent
// before that one.
func (e *Engine[R]) send(ctx context.Context, slots chan<- struct{}, flights chan<- flight[R]) error {
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		b, err := e.src.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		fl := flight[R]{b: b}
		e.set(func() {
			if e.inflight == 0 {
				e.setOldest(b.Time)
			}
			e.inflight++
		})
		if len(b.Records) > 0 {
			fl.p, fl.err = e.sink.Send(e.runCtx, b.Records)
		}
		flights <- fl // never blocks: it holds as many flights as there are slots
		if fl.err != nil {
			return nil
		}
	}
}

// answer waits for fl's answer, reporting StateStalled while that takes
// more than StallAfter.
func (e *Engine[R]) answer(fl *flight[R]) error {
	var wait uint64
	e.mu.Lock()
	if !fl.b.Time.IsZero() {
		e.setOldest(fl.b.Time)
	}
	e.wait++
	wait = e.wait
	e.mu.Unlock()
	if fl.err != nil || fl.p == nil {
		return fl.err
	}
	stop := func() bool { return false }
	if e.cfg.StallAfter > 0 {
		stop = e.cfg.AfterFunc(e.cfg.StallAfter, func() {
			e.set(func() { e.stalled = e.stalled || e.wait == wait })
		})
	}
	err := fl.p.Wait(e.runCtx)
	stop()
	e.set(func() {
		e.wait++ // a stall timer that fires now does nothing
		e.stalled = false
	})
	return err
}

// settle reports records [from, to) of b settled to the source, unless
// Stop gave up on the engine (false).
func (e *Engine[R]) settle(b Batch[R], from, to int, err error) bool {
	e.settleMu.Lock()
	defer e.settleMu.Unlock()
	if e.abandoned {
		return false
	}
	e.src.Settled(b, from, to, err)
	if to == len(b.Records) {
		e.set(func() {
			e.inflight--
			e.stuck = false
			if e.inflight == 0 {
				e.oldest.Store(0)
			}
		})
	}
	return true
}

// sendAlone takes the next batch and sends its first records (up to
// alone) one at a time, each once the one before is settled; a record
// refused for good goes to Poison. It returns nil once they are settled (or
// at a gap, or at Stop), else why it stopped: the next try starts at the
// first record not settled.
func (e *Engine[R]) sendAlone() *failure {
	b, err := e.src.Next(e.stopCtx)
	if e.stopCtx.Err() != nil {
		return nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return &failure{err: err, stuck: true}
	}
	if err != nil || len(b.Records) == 0 {
		if err == nil {
			e.set(func() { e.inflight = 1 })
			e.settle(b, 0, 0, nil)
		} else {
			e.alone = 0
		}
		return nil
	}
	defer e.set(func() { e.inflight = 0 })
	e.set(func() { e.inflight = 1; e.setOldest(b.Time) })
	for i := range b.Records[:min(e.alone, len(b.Records))] {
		if e.stopCtx.Err() != nil {
			return nil
		}
		e.resume()
		p, err := e.sink.Send(e.runCtx, b.Records[i:i+1])
		if err == nil {
			err = p.Wait(e.runCtx)
		}
		if err != nil {
			if e.runCtx.Err() != nil {
				return nil
			}
			e.failed = true
		}
		switch {
		case err == nil, e.cfg.Dropped != nil && e.cfg.Dropped(err):
		case e.cfg.Fatal != nil && e.cfg.Fatal(err):
			return &failure{err: err, fatal: true}
		case e.cfg.Permanent == nil || !e.cfg.Permanent(err):
			return &failure{err: err}
		case e.cfg.Poison != nil:
			if perr := e.cfg.Poison(e.runCtx, b, i, err); perr != nil {
				if e.runCtx.Err() != nil {
					return nil
				}
				var se *StuckError
				return &failure{err: perr, stuck: errors.As(perr, &se)}
			}
		}
		if !e.settle(b, i, i+1, err) {
			return nil
		}
		e.alone--
	}
	e.resume() // the last one's refusal must not fail the batches after
	return nil
}

// Stop stops the engine: it sends nothing more, lets the batches in flight
// be answered until ctx ends, then abandons them (they are not settled,
// and a failed batch is not retried). It returns once Run returned, or at
// the latest StopGrace after ctx ended even if the sink does not return:
// then nothing is settled after Stop returned. nil: Run returned before
// ctx ended; else ErrAbandoned or ErrLeftBehind. Safe to call more than
// once, and concurrently (only the first call reports).
func (e *Engine[R]) Stop(ctx context.Context) error {
	var err error
	e.stopOnce.Do(func() {
		e.stopSend()
		select {
		case <-e.done:
			return
		case <-ctx.Done():
		}
		e.cancelRun()
		t := time.NewTimer(e.cfg.StopGrace)
		defer t.Stop()
		select {
		case <-e.done:
			err = ErrAbandoned
			return
		case <-t.C:
		}
		e.settleMu.Lock()
		e.abandoned = true
		e.settleMu.Unlock()
		e.set(func() { e.stopped = true })
		err = ErrLeftBehind
	})
	return err
}

// Drain lets the engine go on sending until Run returns (nil) or ctx
// ends, and then stops it as Stop(ctx) does: what is in flight is
// abandoned.
func (e *Engine[R]) Drain(ctx context.Context) error {
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return e.Stop(ctx)
	}
}

// Done is closed once Run returned.
func (e *Engine[R]) Done() <-chan struct{} { return e.done }
