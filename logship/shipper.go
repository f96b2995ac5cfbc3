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
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a record was dropped, the keys of Stats.Dropped.
const (
	DropSpillFull = "spill_full" // the spill file was at MaxSpillBytes
	DropQueueFull = "queue_full" // the queue was full and there is no SpillDir
	DropRejected  = "rejected"   // the sink refused it for good
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
}

// shipper owns the queue, the spill file and the goroutines that deliver
// them. Lock order: the JSONHandler's mutex (in enc.Write), writeMu, mu.
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

	readOff int64 // next byte to replay; only the run goroutine uses it

	syncNow  chan struct{}
	writeNow chan struct{}
	stopRun  chan struct{} // closed by close: drain and return
	abort    chan struct{} // closed when close's context is done
	runDone  chan struct{}
	syncer   chan struct{}
	once     sync.Once
	lastErr  atomic.Value // error

	handled, sent, spilled, replayed, retried atomic.Int64
	dropped                                   sync.Map // reason → *atomic.Int64
	droppedSinceReport                        atomic.Int64
}

const spillName = "logship.spill"

func newShipper(sink Sink, o Options) (*shipper, error) {
	s := &shipper{sink: sink, opts: o, queue: make(chan []byte, o.QueueSize),
		syncNow: make(chan struct{}, 1), writeNow: make(chan struct{}, 1), stopRun: make(chan struct{}), abort: make(chan struct{}),
		runDone: make(chan struct{}), syncer: make(chan struct{})}
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
	s.file, s.size, s.flushed = f, size, size
	if size > 0 {
		s.spilling.Store(true) // replay what an earlier handler left, first
	}
	return s, nil
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
		s.kick(urgent)
	}
}

func (s *shipper) kick(urgent bool) {
	c := s.writeNow
	if urgent {
		c = s.syncNow
	}
	select {
	case c <- struct{}{}:
	default:
	}
}

// syncLoop writes spilled records to the file when enough are pending,
// and writes and fsyncs them every SyncInterval and when an ERROR record
// asks.
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

// run is the delivery goroutine: the batch that failed first, then the
// queue, then the spill file, in that order, which is the order of
// handling.
func (s *shipper) run() {
	defer close(s.runDone)
	var linger *time.Timer
	stopping := false
	for {
		batch := s.takeQueue()
		if len(batch) == 0 && s.spilling.Load() && s.file != nil {
			if s.replay() {
				continue
			}
			if s.aborted() {
				return
			}
		}
		if len(batch) == 0 {
			if stopping || s.aborted() {
				return
			}
			select {
			case ev := <-s.queue:
				batch = append(batch, ev)
			case <-s.stopRun:
				stopping = true
				continue
			case <-s.syncNow:
				continue
			case <-time.After(s.opts.SyncInterval):
				continue
			}
			if !stopping && len(batch) < s.opts.BatchSize {
				if linger == nil {
					linger = time.NewTimer(s.opts.Linger)
				} else {
					linger.Reset(s.opts.Linger)
				}
				select {
				case <-linger.C:
				case <-s.stopRun:
					stopping = true
				}
				batch = append(batch, s.takeQueueN(s.opts.BatchSize-1)...)
			}
		}
		if !s.deliver(batch, false) {
			s.leave(batch)
			return
		}
		if !s.spilling.Load() {
			s.reportDrops()
		}
	}
}

func (s *shipper) aborted() bool {
	select {
	case <-s.abort:
		return true
	default:
		return false
	}
}

func (s *shipper) takeQueue() [][]byte { return s.takeQueueN(s.opts.BatchSize) }

func (s *shipper) takeQueueN(n int) [][]byte {
	var batch [][]byte
	for len(batch) < n {
		select {
		case ev := <-s.queue:
			batch = append(batch, ev)
		default:
			return batch
		}
	}
	return batch
}

// deliver writes batch to the sink until it is acknowledged, rejected, or
// close's context is done (false). While the sink fails, new records spill.
func (s *shipper) deliver(batch [][]byte, replay bool) bool {
	backoff := s.opts.RetryBackoff
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.SendTimeout)
		go func() {
			select {
			case <-s.abort:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := s.sink.Write(ctx, batch)
		cancel()
		var rej *RejectedError
		switch {
		case err == nil:
		case errors.As(err, &rej):
			s.drop(DropRejected, int64(rej.N))
			s.lastErr.Store(err)
			err = nil
		}
		if err == nil {
			n := int64(len(batch))
			if rej != nil {
				n -= int64(rej.N)
			}
			s.sent.Add(n)
			if replay {
				s.replayed.Add(n)
			}
			return true
		}
		s.lastErr.Store(err)
		s.retried.Add(1)
		if s.file != nil {
			s.spilling.Store(true) // the sink is down: keep new records on disk, not in memory
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.abort:
			t.Stop()
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// replay delivers the next batch of spilled records; when it caught up, it
// empties the file and turns spilling off. It reports whether it sent.
func (s *shipper) replay() bool {
	s.writeMu.Lock()
	s.writeOut()
	avail := s.flushed
	if s.readOff >= avail {
		s.mu.Lock()
		if len(s.pending) > 0 { // spilled meanwhile
			s.mu.Unlock()
			s.writeMu.Unlock()
			return true
		}
		// Caught up, and nothing spills while mu is held.
		if err := s.file.Truncate(0); err != nil {
			s.lastErr.Store(err)
			s.mu.Unlock()
			s.writeMu.Unlock()
			return false
		}
		s.size, s.flushed, s.readOff, s.dirty = 0, 0, 0, false
		s.spilling.Store(false)
		s.mu.Unlock()
		s.writeMu.Unlock()
		s.reportDrops()
		return false
	}
	s.writeMu.Unlock()
	var batch [][]byte
	used := 0
	for want := min(avail-s.readOff, 512<<10); len(batch) == 0; want = min(2*want, avail-s.readOff) {
		buf := make([]byte, want)
		n, err := s.file.ReadAt(buf, s.readOff)
		if err != nil && !errors.Is(err, io.EOF) {
			s.lastErr.Store(err)
			return false
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
			return false // cannot happen: the file ends with a newline once flushed
		}
	}
	if !s.deliver(batch, true) {
		return false
	}
	s.readOff += int64(used)
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

// leave keeps what close's context left no time for: in the spill file
// for the next handler, or counted as dropped.
func (s *shipper) leave(batch [][]byte) {
	batch = append(batch, s.takeQueueN(len(s.queue))...)
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
		close(s.abort)
		<-s.runDone
	}
	<-s.syncer
	// A record handled while Close began may have reached the queue after
	// run returned: keep it like the rest of what is left.
	if rest := s.takeQueueN(len(s.queue)); len(rest) > 0 {
		s.leave(rest)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	left := int64(0)
	if s.file != nil {
		s.sync()
		left = s.flushed - s.readOff
		if left == 0 {
			s.file.Truncate(0)
		}
		s.file.Close()
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
