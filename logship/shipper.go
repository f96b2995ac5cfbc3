package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a record was dropped, the keys of Stats.Dropped.
const (
	DropSpillFull = "spill_full" // the spill file was at MaxSpillBytes
	DropQueueFull = "queue_full" // the queue was full and there is no SpillDir
	DropRejected  = "rejected"   // the sink refused it for good
	DropTooLarge  = "too_large"  // Kafka refused it for good: alone, over the topic's max.message.bytes
	DropClosed    = "closed"     // handled after Close, or left when Close's context was done without a SpillDir
	DropSpillIO   = "spill_io"   // the spill file could not be written
)

// Stats are a Handler's counters since it was made.
type Stats struct {
	Handled  int64 // records encoded
	Sent     int64 // records the sink acknowledged
	Spilled  int64 // records written to the spill file
	Replayed int64 // spilled records the sink acknowledged
	Retried  int64 // failed writes to the sink, written again
	Queued   int   // records in memory now
	Dropped  map[string]int64
	// LastError is the last failure of the sink or of the spill file,
	// "" while there was none: why records are retried or spilled.
	LastError string
}

// shipper owns the queue, the spill file and the goroutines that deliver
// them. Lock order: the JSONHandler's mutex (in enc.Write), writeMu, mu.
// Callers of Handle take only mu, and never make a system call: spilled
// records are appended to pending, which the syncLoop goroutine writes.
type shipper struct {
	sink       Sink
	pl         pipeliner // sink, or sink wrapped to answer each send at once
	maxFlights int       // batches in flight at most: 1 unless sink pipelines
	opts       Options
	enc        *encoder

	queue    chan []byte
	spilling atomic.Bool // new records go to the spill file, after those in it
	closing  atomic.Bool // Close was called: records are refused

	mu      sync.Mutex // guards pending, size, closed and turning spilling off
	file    *os.File   // nil without SpillDir
	pending []byte     // spilled records not yet written to the file
	size    int64      // the spill file's length once pending is written
	closed  bool

	writeMu sync.Mutex // guards writing the file, flushed, spare and dirty
	flushed int64      // bytes written to the file
	spare   []byte
	dirty   bool // written since the last fsync

	// Only the run goroutine (and close, once it returned) uses these.
	readOff  int64    // next byte of the spill file to replay
	ackOff   int64    // the spill file's bytes before it are acknowledged
	savedOff int64    // what pos says
	pos      *os.File // the checkpoint: ackOff, so that a restart does not replay what was acknowledged

	acks      chan *flight // answered flights; room for maxFlights, so a sink never waits
	runCtx    context.Context
	cancelRun context.CancelFunc // close's context is done: stop delivering
	full      chan struct{}      // the queue holds a batch
	syncNow   chan struct{}
	writeNow  chan struct{}
	posNow    chan struct{} // the checkpoint was written: fsync it
	stopRun   chan struct{} // closed by close: drain and return
	runDone   chan struct{}
	syncer    chan struct{}
	once      sync.Once
	lastErr   errValue

	handled, sent, spilled, replayed, retried atomic.Int64
	dropped                                   sync.Map // reason → *atomic.Int64
	droppedSinceReport                        atomic.Int64
}

// errValue keeps the last error. atomic.Value alone panics when errors of
// two concrete types are stored in turn.
type errValue struct{ v atomic.Value }

type errBox struct{ err error }

func (e *errValue) Store(err error) { e.v.Store(errBox{err}) }

// Load returns the last error stored, nil if none.
func (e *errValue) Load() error {
	b, _ := e.v.Load().(errBox)
	return b.err
}

// flight is a batch handed to the sink and not yet settled.
type flight struct {
	recs   [][]byte
	replay bool  // read from the spill file
	end    int64 // with replay: the spill file's offset after its last record
	err    error // the sink's answer, set before the flight is sent on acks
	done   bool  // answered; the run goroutine's own
	// isolate: Kafka refused a batch holding these records as too large;
	// they are sent again one at a time, with nothing else in flight, so
	// that only a record too large alone is dropped.
	isolate bool
}

// pipeliner is a Sink that takes the next batch while earlier ones are in
// flight (KafkaSink). send hands records over and returns without waiting
// for the sink, except while the sink's own bounded buffer is full (until
// ctx is done); done is called once, with what Write would have returned,
// and must not block. A batch fails only together with every batch sent
// after it that is not yet answered (franz-go fails every buffered record
// of a partition at once), so sending them again in order keeps the order.
// records are the sink's until done is called.
type pipeliner interface {
	send(ctx context.Context, records [][]byte, done func(error))
	// buffered is how many records the sink holds without send waiting.
	buffered() int
	// resume is called, with nothing in flight, before the batches that
	// failed are sent again: a sink may refuse (fail at once) every send
	// after a failure until then, so that none lands ahead of the resend.
	resume()
}

// oneAtATime pipelines a plain Sink: send waits for Write.
type oneAtATime struct{ Sink }

func (s oneAtATime) send(ctx context.Context, records [][]byte, done func(error)) {
	done(s.Write(ctx, records))
}

func (s oneAtATime) buffered() int { return 0 }

func (s oneAtATime) resume() {}

const (
	spillName = "logship.spill"
	posName   = "logship.spill.pos"
	// maxFlights bounds the batches in flight to a sink that pipelines:
	// with BatchSize records each, enough to keep Kafka busy across its
	// round trips, and a bound on the memory they hold.
	maxFlights = 16
)

func newShipper(sink Sink, o Options) (*shipper, error) {
	s := &shipper{sink: sink, opts: o, queue: make(chan []byte, o.QueueSize),
		full: make(chan struct{}, 1), syncNow: make(chan struct{}, 1), writeNow: make(chan struct{}, 1), posNow: make(chan struct{}, 1),
		stopRun: make(chan struct{}), runDone: make(chan struct{}), syncer: make(chan struct{})}
	s.pl, s.maxFlights = oneAtATime{sink}, 1
	if pl, ok := sink.(pipeliner); ok {
		// Within what the sink buffers: a send that waited for room could
		// fail on its own after later ones got in.
		s.pl, s.maxFlights = pl, min(maxFlights, max(1, pl.buffered()/o.BatchSize))
	}
	s.acks = make(chan *flight, s.maxFlights)
	s.runCtx, s.cancelRun = context.WithCancel(context.Background())
	if o.SpillDir == "" {
		return s, nil
	}
	if err := os.MkdirAll(o.SpillDir, 0o755); err != nil {
		return nil, fmt.Errorf("logship: creating spill directory: %w", err)
	}
	path := filepath.Join(o.SpillDir, spillName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("logship: opening spill file: %w", err)
	}
	size, err := cutTornTail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("logship: reading spill file %s: %w", path, err)
	}
	pos, off, err := openPos(filepath.Join(o.SpillDir, posName))
	if err != nil {
		f.Close()
		return nil, err
	}
	s.file, s.size, s.flushed = f, size, size
	// A checkpoint past the end: the file was emptied (or lost its
	// unsynced tail) after the checkpoint was written. It is corrected
	// before the file grows past it.
	s.pos, s.savedOff = pos, off
	s.readOff, s.ackOff = min(off, size), min(off, size)
	if s.ackOff != off {
		s.savePos(true)
	}
	if size > 0 {
		s.spilling.Store(true) // replay what an earlier handler left, first
	}
	return s, nil
}

// openPos opens the checkpoint file and reads the offset it holds: the
// decimal bytes of the spill file already acknowledged. One it cannot
// read is 0: the spill file is replayed from its start (duplicates, no loss).
func openPos(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("logship: opening spill checkpoint: %w", err)
	}
	var buf [posLen]byte
	n, _ := f.ReadAt(buf[:], 0)
	off, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil || off < 0 {
		off = 0
	}
	return f, off, nil
}

const posLen = 21 // 20 digits and a newline: every write replaces the whole

// savePos writes ackOff to the checkpoint file if it moved, and has it
// fsynced soon (by syncLoop), or now with sync.
func (s *shipper) savePos(sync bool) {
	if s.pos == nil || (s.ackOff == s.savedOff && !sync) {
		return
	}
	buf := fmt.Appendf(make([]byte, 0, posLen), "%020d\n", s.ackOff)
	_, err := s.pos.WriteAt(buf, 0)
	if err == nil && sync {
		err = s.pos.Sync()
	}
	if err != nil {
		s.lastErr.Store(fmt.Errorf("logship: writing spill checkpoint: %w", err))
		return
	}
	s.savedOff = s.ackOff
	if !sync {
		select {
		case s.posNow <- struct{}{}:
		default:
		}
	}
}

// cutTornTail truncates f after its last newline (a crash may have left a
// partial record) and returns its length.
func cutTornTail(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			cut := start + int64(i) + 1
			if cut != size {
				return cut, f.Truncate(cut)
			}
			return size, nil
		}
		end = start
	}
	return 0, f.Truncate(0)
}

// writeOut writes pending to the file; s.writeMu must be held.
func (s *shipper) writeOut() error {
	s.mu.Lock()
	buf := s.pending
	s.pending = s.spare[:0]
	s.mu.Unlock()
	s.spare = buf
	if len(buf) == 0 {
		return nil
	}
	n, err := s.file.Write(buf)
	s.flushed += int64(n)
	s.dirty = true
	if err != nil {
		s.lastErr.Store(err)
	}
	return err
}

const (
	kickBytes       = 64 << 10 // pending this large wakes the writer
	maxPendingBytes = 8 << 20  // pending this large is written by the caller itself
)

func (s *shipper) start() {
	go s.run()
	go s.syncLoop()
}

func (s *shipper) drop(reason string, n int64) {
	v, _ := s.dropped.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
	if reason != DropClosed {
		s.droppedSinceReport.Add(n)
	}
}

// put is called by enc.Write, one record at a time.
func (s *shipper) put(ev []byte, urgent bool) {
	s.handled.Add(1)
	if s.closing.Load() {
		s.drop(DropClosed, 1)
		return
	}
	if !s.spilling.Load() {
		select {
		case s.queue <- ev:
			if len(s.queue) >= s.opts.BatchSize {
				s.kick(s.full) // once a batch, not once a record: a wake-up costs the caller
			}
			return
		default:
		}
	}
	s.spill(ev, urgent)
}

func (s *shipper) spill(ev []byte, urgent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.drop(DropClosed, 1)
		return
	}
	if !s.spilling.Load() { // replay caught up meanwhile
		select {
		case s.queue <- ev:
			return
		default:
		}
	}
	if s.file == nil {
		s.drop(DropQueueFull, 1)
		return
	}
	s.spilling.Store(true)
	if s.size+int64(len(ev))+1 > s.opts.MaxSpillBytes {
		s.drop(DropSpillFull, 1)
		return
	}
	if len(s.pending) >= maxPendingBytes { // the writer is stuck: do not grow memory further
		s.mu.Unlock()
		s.writeMu.Lock()
		err := s.writeOut()
		s.writeMu.Unlock()
		s.mu.Lock()
		if err != nil {
			s.drop(DropSpillIO, 1)
			return
		}
	}
	s.pending = append(s.pending, ev...)
	s.pending = append(s.pending, '\n')
	s.size += int64(len(ev)) + 1
	s.spilled.Add(1)
	if urgent || len(s.pending) >= kickBytes {
		s.kickWriter(urgent)
	}
}

func (s *shipper) kickWriter(urgent bool) {
	c := s.writeNow
	if urgent {
		c = s.syncNow
	}
	s.kick(c)
}

func (s *shipper) kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// syncLoop writes spilled records to the file when enough are pending,
// and writes and fsyncs them every SyncInterval and when an ERROR record
// asks; it fsyncs the checkpoint soon after the run goroutine wrote it.
func (s *shipper) syncLoop() {
	defer close(s.syncer)
	if s.file == nil {
		return
	}
	t := time.NewTicker(s.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.writeNow:
			s.writeMu.Lock()
			s.writeOut()
			s.writeMu.Unlock()
			continue
		case <-s.posNow:
			if err := s.pos.Sync(); err != nil {
				s.lastErr.Store(fmt.Errorf("logship: syncing spill checkpoint: %w", err))
			}
			continue
		case <-t.C:
		case <-s.syncNow:
		case <-s.runDone:
			return
		}
		s.sync()
	}
}

// sync writes pending out and fsyncs the file.
func (s *shipper) sync() {
	s.writeMu.Lock()
	err := s.writeOut()
	dirty := s.dirty
	s.dirty = false
	s.writeMu.Unlock()
	if err == nil && dirty {
		err = s.file.Sync() // outside the locks: records may spill meanwhile
	}
	if err != nil {
		s.lastErr.Store(err)
	}
}

// run is the delivery goroutine. It sends, in the order they were
// handled, the batches that failed first, then the queue, then the spill
// file, with up to maxFlights batches in flight. When one fails, it waits
// for the others in flight, and after a backoff sends them all again, in
// order; meanwhile new records spill.
func (s *shipper) run() {
	defer close(s.runDone)
	var (
		window  []*flight // in flight, in the order they were sent
		redo    []*flight // failed: sent again before anything else
		failing bool      // a flight failed: wait for the rest of the window, then back off
		failed  int       // flights at the head of redo that failed since failing began
		backoff = s.opts.RetryBackoff
		stop    = s.stopRun // nil once Close began
		idle    = time.NewTimer(s.opts.SyncInterval)
		abort   = s.runCtx.Done()
	)
	defer idle.Stop()
	send := func(f *flight) {
		f.err, f.done = nil, false
		window = append(window, f)
		if f.isolate {
			f.err = s.writeEach(f.recs)
			s.acks <- f // never waits: room for every flight
			return
		}
		// A sink that pipelines (KafkaSink) is not timed out per batch:
		// franz-go fails a record whose context ends, and a batch sent
		// after it, before the handler heard of the failure, could then
		// land ahead of it. Without a deadline franz-go retries in order
		// until the sink is back; meanwhile the window stays full and new
		// records spill. Close's deadline (runCtx) still ends them.
		ctx, cancel := s.runCtx, context.CancelFunc(func() {})
		if s.maxFlights == 1 {
			ctx, cancel = context.WithTimeout(s.runCtx, s.opts.SendTimeout)
		}
		s.pl.send(ctx, f.recs, func(err error) {
			cancel()
			f.err = err
			s.acks <- f // never waits: room for every flight
		})
	}
	// settle takes an answer, then retires the answered flights at the
	// head of the window, in order.
	settle := func(answered *flight) {
		answered.done = true
		for len(window) > 0 && window[0].done {
			f := window[0]
			window[0] = nil
			window = window[1:]
			var rej *RejectedError
			if failing || (f.err != nil && !errors.As(f.err, &rej)) {
				// Failed, or after one that failed: sent again after it
				// (as if failed even if not, so nothing overtakes it).
				if f.err != nil {
					s.lastErr.Store(f.err)
					s.retried.Add(1)
				}
				if !failing && len(redo) == 0 {
					// Everything sent before it was acknowledged: its
					// first records that landed are not sent again.
					if n := Landed(f.err); n > 0 {
						f.recs = f.recs[n:]
						s.sent.Add(int64(n))
						if f.replay {
							s.replayed.Add(int64(n))
						}
					}
				}
				if s.file != nil {
					s.spilling.Store(true) // the sink is down: keep new records on disk, not in memory
				}
				// Refused as too large: sent again one record at a
				// time. The batch Kafka refused (franz-go's, which may
				// span several of ours; franz-go then fails all it
				// buffered) need not hold a record too large alone, but
				// tried again whole it could fail again, for ever.
				if errors.Is(f.err, ErrTooLarge) {
					f.isolate = true
				}
				// Ahead of those of redo not sent again yet: these were
				// sent before them.
				failing = true
				redo = slices.Insert(redo, failed, f)
				failed++
				continue
			}
			n := int64(len(f.recs))
			if rej != nil {
				reason := DropRejected
				if errors.Is(rej.Err, ErrTooLarge) {
					reason = DropTooLarge
				}
				s.drop(reason, int64(rej.N))
				s.lastErr.Store(f.err)
				n -= int64(rej.N)
			}
			s.sent.Add(n)
			if f.replay {
				s.replayed.Add(n)
				s.ackOff = f.end
			}
			backoff = s.opts.RetryBackoff
			if !s.spilling.Load() {
				s.reportDrops()
			}
		}
	}
	for {
		for drained := false; !drained; {
			select {
			case f := <-s.acks:
				settle(f)
			default:
				drained = true
			}
		}
		s.savePos(false)
		select {
		case <-abort:
			s.leave(redo[:failed], window, redo[failed:]) // in the order they were handled
			return
		default:
		}
		if len(window) > 0 && (failing || len(window) >= s.maxFlights) {
			select {
			case f := <-s.acks:
				settle(f)
			case <-abort:
			}
			continue
		}
		if failing { // every flight after the failed one is back
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-abort:
			}
			t.Stop()
			backoff = min(2*backoff, 5*time.Second)
			failing, failed = false, 0
			s.pl.resume()
			continue
		}
		if len(redo) > 0 {
			if redo[0].isolate && len(window) > 0 {
				select { // it goes alone
				case f := <-s.acks:
					settle(f)
				case <-abort:
				}
				continue
			}
			f := redo[0]
			redo[0] = nil
			redo = redo[1:]
			send(f)
			continue
		}
		if batch := s.takeQueue(nil); len(batch) > 0 {
			if len(window) > 0 && stop != nil {
				// The sink is busy with earlier batches: a full batch
				// costs no more time than a short one.
				var stopped bool
				if batch, stopped = s.fill(batch, stop); stopped {
					stop = nil
				}
			}
			send(&flight{recs: batch})
			continue
		}
		if s.spilling.Load() && s.file != nil {
			if f := s.replayNext(); f != nil {
				send(f)
				continue
			}
			if s.readOff == s.ackOff && s.catchUp() {
				continue
			}
		}
		if stop == nil && len(window) == 0 && !s.spilling.Load() {
			return
		}
		var queue <-chan []byte = s.queue
		if stop == nil {
			queue = nil // takeQueue above takes what is left
		}
		idle.Reset(s.opts.SyncInterval)
		select {
		case ev := <-queue:
			batch, stopped := s.fill(append(make([][]byte, 0, s.opts.BatchSize), ev), stop)
			if stopped {
				stop = nil
			}
			send(&flight{recs: batch})
		case f := <-s.acks:
			settle(f)
		case <-stop:
			stop = nil
		case <-idle.C:
		case <-abort:
		}
		idle.Stop()
	}
}

// writeEach writes records one at a time, and reports those the sink
// refused alone as too large as rejected. It returns at the first other
// failure: the records are all sent again (the first ones twice).
func (s *shipper) writeEach(recs [][]byte) error {
	var (
		rejected int
		first    error
	)
	for _, r := range recs {
		err := s.sink.Write(s.runCtx, [][]byte{r})
		var rej *RejectedError
		switch {
		case err == nil:
			continue
		case errors.As(err, &rej):
			rejected += rej.N
		case errors.Is(err, ErrTooLarge):
			rejected++ // alone: for good
		default:
			return err
		}
		if first == nil {
			first = err
		}
	}
	// Every record was heard of, and those refused for good are counted:
	// a failure of the last one must not fail the next batch.
	s.pl.resume()
	if rejected > 0 {
		return &RejectedError{N: rejected, Err: first}
	}
	return nil
}

// fill adds queued records to batch once the queue holds a batch, Linger
// passed, or stop is closed (then it says so). It waits on a timer, not
// on the queue: a goroutine waiting on the queue would be woken by every
// record, at the caller's cost.
func (s *shipper) fill(batch [][]byte, stop <-chan struct{}) ([][]byte, bool) {
	stopped := false
	// A kick left from a batch taken earlier without waiting would end
	// this wait at once, with a short batch. A kick sent after this is
	// for records already queued: the check below sees them.
	select {
	case <-s.full:
	default:
	}
	if len(batch)+len(s.queue) < s.opts.BatchSize {
		t := time.NewTimer(s.opts.Linger)
		select {
		case <-t.C:
		case <-s.full:
		case <-stop:
			stopped = true
		case <-s.runCtx.Done():
		}
		t.Stop()
	}
	return s.takeQueue(batch), stopped
}

// takeQueue appends queued records to batch, without waiting, until it
// holds BatchSize.
func (s *shipper) takeQueue(batch [][]byte) [][]byte {
	for len(batch) < s.opts.BatchSize {
		select {
		case ev := <-s.queue:
			if batch == nil {
				batch = make([][]byte, 0, min(s.opts.BatchSize, len(s.queue)+1))
			}
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}

// takeAll takes every queued record, without waiting.
func (s *shipper) takeAll() [][]byte {
	var batch [][]byte
	for {
		select {
		case ev := <-s.queue:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
}

// replayNext reads the next batch of spilled records at readOff. It
// returns nil when every record written to the file was read, or when the
// file cannot be read (lastErr says why).
func (s *shipper) replayNext() *flight {
	s.writeMu.Lock()
	s.writeOut()
	avail := s.flushed
	s.writeMu.Unlock()
	if s.readOff >= avail {
		return nil
	}
	var batch [][]byte
	used := 0
	first := min(avail-s.readOff, int64(min(max(s.opts.BatchSize*512, 64<<10), 4<<20)))
	for want := first; len(batch) == 0; want = min(2*want, avail-s.readOff) {
		buf := make([]byte, want)
		n, err := s.file.ReadAt(buf, s.readOff)
		if err != nil && !errors.Is(err, io.EOF) {
			s.lastErr.Store(fmt.Errorf("logship: reading spill file: %w", err))
			return nil
		}
		buf = buf[:n]
		for len(batch) < s.opts.BatchSize {
			i := bytes.IndexByte(buf[used:], '\n')
			if i < 0 {
				break
			}
			batch = append(batch, buf[used:used+i])
			used += i + 1
		}
		if len(batch) == 0 && want == avail-s.readOff {
			return nil // cannot happen: the file ends with a newline once flushed
		}
	}
	f := &flight{recs: batch, replay: true, end: s.readOff + int64(used)}
	s.readOff = f.end
	return f
}

// catchUp, once every spilled record was acknowledged, empties the spill
// file and turns spilling off. It reports false if it could not (lastErr
// says why). It holds writeMu from the truncation until the checkpoint
// says 0 on disk, so that the file does not grow before: a checkpoint
// that counted old bytes would skip new ones after a crash.
func (s *shipper) catchUp() bool {
	s.writeMu.Lock()
	s.writeOut()
	s.mu.Lock()
	if len(s.pending) > 0 || s.flushed > s.readOff { // spilled meanwhile
		s.mu.Unlock()
		s.writeMu.Unlock()
		return true
	}
	if err := s.file.Truncate(0); err != nil {
		s.lastErr.Store(fmt.Errorf("logship: emptying spill file: %w", err))
		s.mu.Unlock()
		s.writeMu.Unlock()
		return false
	}
	s.size, s.flushed, s.readOff, s.ackOff, s.dirty = 0, 0, 0, 0, false
	s.spilling.Store(false)
	s.mu.Unlock()
	s.savePos(true)
	s.writeMu.Unlock()
	s.reportDrops()
	return true
}

// reportDrops logs, through the sink, how many records were dropped since
// the last report.
func (s *shipper) reportDrops() {
	if n := s.droppedSinceReport.Swap(0); n > 0 {
		s.enc.notice(slog.LevelWarn, "logship: log records were dropped while the sink was unreachable or too slow",
			slog.Int64("dropped", n), slog.Any("dropped_by_reason", s.stats().Dropped))
	}
}

// leave keeps what close's context left no time for, the flights not
// acknowledged and the queue: in the spill file for the next handler, or
// counted as dropped. Flights read from the spill file are in it still,
// after the checkpoint.
func (s *shipper) leave(flights ...[]*flight) {
	var batch [][]byte
	for _, fs := range flights {
		for _, f := range fs {
			if !f.replay {
				batch = append(batch, f.recs...)
			}
		}
	}
	s.leaveRecords(append(batch, s.takeAll()...))
}

func (s *shipper) leaveRecords(batch [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		s.drop(DropClosed, int64(len(batch)))
		return
	}
	for _, ev := range batch {
		s.pending = append(s.pending, ev...)
		s.pending = append(s.pending, '\n')
		s.size += int64(len(ev)) + 1
	}
}

func (s *shipper) stats() Stats {
	st := Stats{Handled: s.handled.Load(), Sent: s.sent.Load(), Spilled: s.spilled.Load(),
		Replayed: s.replayed.Load(), Retried: s.retried.Load(), Queued: len(s.queue), Dropped: map[string]int64{}}
	if err := s.lastErr.Load(); err != nil {
		st.LastError = err.Error()
	}
	s.dropped.Range(func(k, v any) bool {
		st.Dropped[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return st
}

func (s *shipper) close(ctx context.Context) error {
	first := false
	s.once.Do(func() { first = true; s.closing.Store(true); close(s.stopRun) })
	if !first {
		return errors.New("logship: already closed")
	}
	select {
	case <-s.runDone:
	case <-ctx.Done():
		s.cancelRun()
		<-s.runDone
	}
	s.cancelRun()
	<-s.syncer
	// A record handled while Close began may have reached the queue after
	// run returned: keep it like the rest of what is left.
	if rest := s.takeAll(); len(rest) > 0 {
		s.leaveRecords(rest)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	left := int64(0)
	if s.file != nil {
		s.sync()
		left = s.flushed - s.ackOff
		if left == 0 {
			if err := s.file.Truncate(0); err == nil {
				s.ackOff = 0
			}
		}
		s.savePos(true)
		s.file.Close()
		s.pos.Close()
	}
	// The handler may still be called after Close: those records are counted as closed.
	sctx, cancel := context.WithCancel(ctx)
	if ctx.Err() != nil {
		sctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	}
	defer cancel()
	err := s.sink.Close(sctx)
	if left > 0 {
		return fmt.Errorf("logship: closing: %d bytes of records left in the spill file %s", left, filepath.Join(s.opts.SpillDir, spillName))
	}
	if n := s.stats().Dropped[DropClosed]; n > 0 {
		return fmt.Errorf("logship: closing: %d records not delivered", n)
	}
	return err
}
