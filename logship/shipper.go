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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/relay"
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
// them: it is the relay Source of its engine. Lock order: the JSONHandler's
// mutex (in enc.Write), writeMu, mu, srcMu.
// Callers of Handle take only mu, and never make a system call: spilled
// records are appended to pending, which the syncLoop goroutine writes.
type shipper struct {
	sink Sink
	opts Options
	enc  *encoder

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

	eng *relay.Engine[[]byte]
	src relay.Replay[[]byte] // the engine's source: read and done below

	unsettled  atomic.Int64 // batches read and not settled
	replayLeft atomic.Int64 // records replayed from the spill file and not settled

	// srcMu guards what read (on the engine's sending goroutine) shares
	// with done (on its answering one): ackOff, savedOff, pos.
	srcMu    sync.Mutex
	readOff  int64    // next byte of the spill file to replay; read's own
	ackOff   int64    // the spill file's bytes before it are acknowledged
	savedOff int64    // what pos says
	pos      *os.File // the checkpoint: ackOff, so that a restart does not replay what was acknowledged

	full     chan struct{} // the queue holds a batch
	settled  chan struct{} // a chunk was settled
	syncNow  chan struct{}
	writeNow chan struct{}
	posNow   chan struct{} // the checkpoint was written: fsync it
	stopRun  chan struct{} // closed by close: yield what is left, then io.EOF
	stopSync chan struct{}
	syncer   chan struct{}
	once     sync.Once
	lastErr  errValue

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

// spillEnd is the Meta of a batch replayed from the spill file: the
// file's offset after its last record.
type spillEnd int64

// source is a shipper's Replay, counting the batches sent again.
type source struct {
	*relay.Replay[[]byte]
	s *shipper
}

func (r source) Rewind() error {
	r.s.retried.Add(r.s.unsettled.Load())
	return r.Replay.Rewind()
}

const (
	spillName = "logship.spill"
	posName   = "logship.spill.pos"
)

func newShipper(sink Sink, o Options) (*shipper, error) {
	s := &shipper{sink: sink, opts: o, queue: make(chan []byte, o.QueueSize),
		full: make(chan struct{}, 1), settled: make(chan struct{}, 1), syncNow: make(chan struct{}, 1),
		writeNow: make(chan struct{}, 1), posNow: make(chan struct{}, 1),
		stopRun: make(chan struct{}), stopSync: make(chan struct{}), syncer: make(chan struct{})}
	rs, cfg := relaySink(sink, o)
	cfg.MinBackoff = o.RetryBackoff
	cfg.OnFail = func(err error, _, _ int) {
		s.lastErr.Store(err)
		if s.file != nil {
			s.spilling.Store(true) // the sink is down: keep new records on disk, not in memory
		}
	}
	s.src = relay.Replay[[]byte]{Read: s.read, Done: s.done}
	s.eng = relay.New[[]byte](source{&s.src, s}, rs, cfg)
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
// fsynced soon (by syncLoop), or now with sync. s.srcMu must be held once
// the engine runs.
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
	go s.eng.Run() // no error: nothing is Fatal to a handler
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
	if urgent {
		s.kick(s.syncNow)
	} else if len(s.pending) >= kickBytes {
		s.kick(s.writeNow)
	}
}

func (s *shipper) kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// syncLoop writes spilled records to the file when enough are pending,
// and writes and fsyncs them every SyncInterval and when an ERROR record
// asks; it fsyncs the checkpoint soon after Settled wrote it.
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
		case <-s.stopSync:
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

// read yields the next batch to send, in the order records were handled:
// the queue, then the spill file (the queue holds records only while
// nothing is spilled). Once Close began, it yields what is left, then
// io.EOF. A batch taken when ctx ends is yielded all the same: the
// engine keeps it for its next attempt, or leaves it at Stop.
func (s *shipper) read(ctx context.Context) (relay.Batch[[]byte], error) {
	idle := time.NewTimer(s.opts.SyncInterval)
	defer idle.Stop()
	for {
		stopping := s.stopping()
		if batch := s.takeQueue(nil); len(batch) > 0 {
			if s.unsettled.Load() > 0 && !stopping {
				// The sink is busy with earlier batches: a full batch
				// costs no more time than a short one.
				batch = s.fill(ctx, batch)
			}
			return s.yield(relay.Batch[[]byte]{Records: batch}), nil
		}
		if s.spilling.Load() && s.file != nil {
			if b := s.replayNext(); len(b.Records) > 0 {
				s.replayLeft.Add(int64(len(b.Records)))
				return s.yield(b), nil
			}
			if s.caughtUp() && s.catchUp() {
				continue
			}
		}
		if stopping {
			return relay.Batch[[]byte]{}, io.EOF
		}
		idle.Reset(s.opts.SyncInterval)
		select {
		case ev := <-s.queue:
			batch := s.fill(ctx, append(make([][]byte, 0, s.opts.BatchSize), ev))
			return s.yield(relay.Batch[[]byte]{Records: batch}), nil
		case <-s.settled: // the spill file may be caught up
		case <-s.stopRun:
		case <-idle.C:
		case <-ctx.Done():
			return relay.Batch[[]byte]{}, ctx.Err()
		}
	}
}

func (s *shipper) yield(b relay.Batch[[]byte]) relay.Batch[[]byte] {
	s.unsettled.Add(1)
	return b
}

// done counts records [from, to) of b as sent, or dropped when err says
// the sink refused them for good, and moves the checkpoint past a batch
// replayed from the spill file once all of it is settled.
func (s *shipper) done(b relay.Batch[[]byte], from, to int, err error) {
	n := int64(to - from)
	if err != nil {
		reason, dropped := DropRejected, n
		var rej *RejectedError
		if errors.As(err, &rej) {
			dropped = min(int64(rej.N), n)
		}
		if errors.Is(err, ErrTooLarge) {
			reason = DropTooLarge
		}
		s.drop(reason, dropped)
		s.lastErr.Store(err)
		n -= dropped
	}
	s.sent.Add(n)
	end, replay := b.Meta.(spillEnd)
	if replay {
		s.replayed.Add(n)
		s.replayLeft.Add(int64(from - to))
	}
	if to == len(b.Records) {
		s.unsettled.Add(-1)
		if replay {
			s.srcMu.Lock()
			s.ackOff = int64(end)
			s.savePos(false)
			s.srcMu.Unlock()
			s.kick(s.settled)
		}
	}
	if !s.spilling.Load() {
		s.reportDrops()
	}
}

func (s *shipper) stopping() bool {
	select {
	case <-s.stopRun:
		return true
	default:
		return false
	}
}

// fill adds queued records to batch once the queue holds a batch, Linger
// passed, Close began or ctx ended. It waits on a timer, not on the
// queue: a goroutine waiting on the queue would be woken by every record,
// at the caller's cost.
func (s *shipper) fill(ctx context.Context, batch [][]byte) [][]byte {
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
		case <-s.stopRun:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return s.takeQueue(batch)
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

// replayNext reads the next batch of spilled records at readOff. It
// returns no records when every record written to the file was read, or
// when the file cannot be read (lastErr says why).
func (s *shipper) replayNext() relay.Batch[[]byte] {
	s.writeMu.Lock()
	s.writeOut()
	avail := s.flushed
	s.writeMu.Unlock()
	if s.readOff >= avail {
		return relay.Batch[[]byte]{}
	}
	var batch [][]byte
	used := 0
	first := min(avail-s.readOff, int64(min(max(s.opts.BatchSize*512, 64<<10), 4<<20)))
	for want := first; len(batch) == 0; want = min(2*want, avail-s.readOff) {
		buf := make([]byte, want)
		n, err := s.file.ReadAt(buf, s.readOff)
		if err != nil && !errors.Is(err, io.EOF) {
			s.lastErr.Store(fmt.Errorf("logship: reading spill file: %w", err))
			return relay.Batch[[]byte]{}
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
			return relay.Batch[[]byte]{} // cannot happen: the file ends with a newline once flushed
		}
	}
	s.readOff += int64(used)
	return relay.Batch[[]byte]{Records: batch, Meta: spillEnd(s.readOff)}
}

// caughtUp reports whether every record replayed was settled.
func (s *shipper) caughtUp() bool {
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	return s.readOff == s.ackOff
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
	s.size, s.flushed, s.dirty = 0, 0, false
	s.spilling.Store(false)
	s.mu.Unlock()
	s.srcMu.Lock()
	s.readOff, s.ackOff = 0, 0
	s.savePos(true)
	s.srcMu.Unlock()
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

// leave keeps what close's context left no time for, the batches not
// settled and the queue: in the spill file for the next handler, or
// counted as dropped. The records replayed from the spill file, last
// among those not settled (the queue is used only while nothing is
// spilled), are in it still, after the checkpoint.
func (s *shipper) leave() {
	recs := s.src.Unsettled()
	recs = recs[:len(recs)-int(s.replayLeft.Load())]
	for b := s.takeQueue(nil); len(b) > 0; b = s.takeQueue(nil) {
		recs = append(recs, b...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		s.drop(DropClosed, int64(len(recs)))
		return
	}
	for _, ev := range recs {
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
	s.eng.Drain(ctx) // abandons what is in flight when ctx ends
	close(s.stopSync)
	<-s.syncer
	// What ctx left no time for, and a record handled while Close began
	// that reached the queue after the engine returned.
	s.leave()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	left := int64(0)
	if s.file != nil {
		s.sync()
		s.srcMu.Lock()
		defer s.srcMu.Unlock()
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
