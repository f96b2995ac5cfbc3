package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

type request struct {
	frames []byte
	count  int
	done   chan error // buffered: the writer never blocks on it
}

// roll seals the active segment, if any, and starts a new one at nextSeq.
// Only Open and the writer call it. A failed fsync of the active segment
// stops the spool for good (see syncActive); a failure to create the new
// segment or to sync the directory (EMFILE, ENOSPC, EIO) is only that
// request's: the active segment stays, and the next write tries again. The
// error wraps ErrWrite.
func (s *Spool) roll() error {
	if s.active != nil {
		if err := s.syncActive(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	base := s.nextSeq
	s.mu.Unlock()
	path := filepath.Join(s.cfg.Dir, segName(base))
	f, err := s.fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%w: creating segment: %w", ErrWrite, err)
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		f.Close() // an empty segment, replaced by the next roll or removed on open
		return fmt.Errorf("%w: syncing directory %s: %w", ErrWrite, s.cfg.Dir, err)
	}
	if s.active != nil {
		// Synced above: a failed close loses nothing.
		if err := s.active.Close(); err != nil {
			s.log.Warn("spool: closing a full segment", "err", err)
		}
	}
	s.active = f
	s.mu.Lock()
	if n := len(s.segs); n > 0 {
		s.segs[n-1].sealed = true
		if s.segs[n-1].base == base { // an empty active segment, replaced
			s.segs = s.segs[:n-1]
		}
	}
	s.segs = append(s.segs, &segment{base: base, path: path})
	s.readable = 0
	s.wake()
	s.mu.Unlock()
	return nil
}

// wake tells waiting readers that something changed. s.mu must be held.
func (s *Spool) wake() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// Append stores recs and returns nil once they are durable (by the sync
// mode). Concurrent appends share one write and one fsync. It fails at once
// with ErrFull when the spool holds MaxBytes, and with ErrWrite when the
// disk refused the write. If ctx ends while the write is under way, Append
// returns ctx's error but the records may still be stored and delivered.
func (s *Spool) Append(ctx context.Context, recs []event.Record) error {
	if len(recs) == 0 {
		return nil
	}
	start := time.Now()
	size := 0
	for i := range recs {
		if err := fits(&recs[i]); err != nil {
			return err
		}
		size += frameHeader + 24 + recs[i].Size() + 6*len(recs[i].Headers)
	}
	req := newRequest(size)
	for i := range recs {
		req.frames = appendFrame(req.frames, &recs[i], start)
	}
	req.count = len(recs)
	n := int64(len(req.frames))
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		req.free()
		return ErrClosed
	case s.failed != nil:
		err := s.failed
		s.mu.Unlock()
		req.free()
		return err
	case s.held()+n > s.cfg.MaxBytes:
		s.mu.Unlock()
		req.free()
		if !s.recount() {
			s.metrics.Full.Inc()
			return ErrFull
		}
		return s.Append(ctx, recs)
	}
	if t, unknown := s.unknownTopic(recs, start); unknown {
		s.mu.Unlock()
		req.free()
		if err := s.register(t); err != nil {
			return err
		}
		return s.Append(ctx, recs)
	}
	s.reserved += n
	s.mu.Unlock()

	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.unreserve(n)
		req.free()
		return ctx.Err()
	case <-s.stop:
		s.unreserve(n)
		req.free()
		return ErrClosed
	}
	// The writer owns req until it answers; if we stop waiting first, req
	// is left to the garbage collector.
	select {
	case err := <-req.done:
		if err == nil {
			s.metrics.AppendLatency.Observe(time.Since(start).Seconds())
		}
		req.free()
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.writerDone:
		select {
		case err := <-req.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// requests recycles requests, their answer channels and their frames'
// buffers: an append then allocates nothing in the steady state.
// Gain: 12.7 → 11.4 µs of CPU and 4 → 0 allocations per request (BenchmarkSpoolPath -cpu 1, 2026-12-05).
var requests sync.Pool

// maxPooledFrames bounds the buffer a recycled request keeps.
const maxPooledFrames = 64 << 10

// newRequest returns an empty request with room for size bytes of frames.
func newRequest(size int) *request {
	r, _ := requests.Get().(*request)
	if r == nil {
		r = &request{done: make(chan error, 1)}
	}
	if cap(r.frames) < size {
		r.frames = make([]byte, 0, size)
	}
	return r
}

// free recycles r, which nobody may use after: its answer was received, or
// it was never queued.
func (r *request) free() {
	r.frames, r.count = r.frames[:0], 0
	if cap(r.frames) > maxPooledFrames {
		r.frames = nil
	}
	requests.Put(r)
}

func (s *Spool) unreserve(n int64) {
	s.mu.Lock()
	s.reserved -= n
	s.mu.Unlock()
}

// writer writes and syncs appends in groups until the spool is closed.
func (s *Spool) writer() {
	defer close(s.writerDone)
	var tick <-chan time.Time
	if s.cfg.Sync == SyncInterval {
		t := time.NewTicker(s.cfg.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case r := <-s.reqs:
			s.group(r)
		case <-tick:
			s.syncDirty()
		case <-s.stop:
			// Write what was accepted before the close.
			for {
				select {
				case r := <-s.reqs:
					s.group(r)
					continue
				default:
				}
				break
			}
			s.syncDirty()
			if s.active != nil {
				_ = s.active.Close()
			}
			return
		}
	}
}

// group writes first and whatever else is queued, up to MaxGroupBytes, with
// one write and (SyncAlways) one fsync, then answers them all.
//
// Before writing it yields while more appends keep arriving: the scheduler
// runs a goroutine woken by a channel send next, so without the yield the
// writer would take each append alone the moment it is queued, and the
// requests being parsed behind it would each wait for an fsync of their own.
// With nothing else runnable the yield returns at once.
//
// With one P (GOMAXPROCS=1), it also waits for syncPause first: an fsync
// holds the P that parses requests, and fsyncs back to back, each taking
// one or two requests, would hold it nearly all the time under a moderate
// load. The pause lets the requests that came meanwhile be read and join
// the group.
// Gain of the yield, with the forwarder's 4 windows: 1.08 → 60 requests per fsync, 2,144 → 12,216 req/s (BENCHMARKS.md).
func (s *Spool) group(first *request) {
	batch := []*request{first}
	size := len(first.frames)
	if s.cfg.Sync == SyncAlways {
		if d := syncPause(runtime.GOMAXPROCS(0), s.syncTook, time.Since(s.syncEnd)); d > 0 {
			time.Sleep(d)
		}
	}
	for yields := 0; yields < 8 && size < s.cfg.MaxGroupBytes; yields++ {
		before := len(batch)
		if yields > 0 || len(s.reqs) == 0 {
			runtime.Gosched()
		}
	drain:
		for size < s.cfg.MaxGroupBytes {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
				size += len(r.frames)
			default:
				break drain
			}
		}
		if len(batch) == before {
			break
		}
	}
	err := s.write(batch, size)
	for _, r := range batch {
		r.done <- err
	}
}

func (s *Spool) write(batch []*request, size int) error {
	s.mu.Lock()
	failed := s.failed
	seg := s.segs[len(s.segs)-1]
	noRoom := s.noRoom != nil
	s.mu.Unlock()
	if failed != nil {
		s.unreserve(int64(size))
		return failed
	}
	// On a full disk the active segment is sealed as it is: its records,
	// once delivered, can then be deleted to make room. (A segment is
	// otherwise sealed only once full; on a disk smaller than a segment,
	// or with little room left, it never would be.)
	if seg.size >= s.cfg.SegmentBytes || noRoom && seg.size > 0 {
		if err := s.roll(); err != nil {
			s.unreserve(int64(size))
			if !s.Failed() {
				s.metrics.WriteErrors.Inc()
				s.writeLog.Log("err", err, "bytes", size)
				s.refused(err, size)
			}
			return err
		}
		s.mu.Lock()
		seg = s.segs[len(s.segs)-1]
		s.mu.Unlock()
	}
	s.wbuf = s.wbuf[:0]
	count := 0
	for _, r := range batch {
		s.wbuf = append(s.wbuf, r.frames...)
		count += r.count
	}
	if _, err := s.active.Write(s.wbuf); err != nil {
		s.metrics.WriteErrors.Inc()
		s.unreserve(int64(size))
		// Cut what part of the group made it, so the next group follows
		// whole frames; if even that fails, stop writing.
		if terr := s.active.Truncate(seg.size); terr != nil {
			return s.fail(fmt.Errorf("writing: %w; then truncating: %w", err, terr))
		}
		s.writeLog.Log("err", err, "bytes", size)
		err = fmt.Errorf("%w: %w", ErrWrite, err)
		s.refused(err, size)
		if noSpace(err) && seg.size > 0 {
			// Sealed now, not at the next write (above), which may not
			// come: with every record delivered, tidy can then delete it.
			_ = s.roll()
		}
		return err
	}
	if cap(s.wbuf) > 2*s.cfg.MaxGroupBytes {
		s.wbuf = nil // do not keep a buffer one huge group grew
	}
	if s.cfg.Sync == SyncAlways {
		if err := s.syncActive(); err != nil {
			s.unreserve(int64(size))
			return err
		}
	} else {
		s.dirty = true
	}
	s.metrics.GroupSize.Observe(float64(len(batch)))
	s.mu.Lock()
	seg.size += int64(size)
	seg.count += uint64(count)
	s.nextSeq += uint64(count)
	s.bytes += int64(size)
	s.reserved -= int64(size)
	s.readable = seg.size
	s.noRoom = nil
	s.wake()
	s.mu.Unlock()
	return nil
}

// refused records that an append of size bytes failed with err: if for
// lack of disk space, the spool says so (Stats().DiskFull) until an append
// succeeds or tidy finds that much room.
func (s *Spool) refused(err error, size int) {
	if !noSpace(err) {
		return
	}
	s.mu.Lock()
	s.noRoom, s.noRoomNeed = err, int64(size)
	s.mu.Unlock()
}

// maxSyncPause bounds syncPause.
const maxSyncPause = time.Millisecond

// syncPause is how long the writer waits, with procs Ps, before it writes
// and fsyncs the next group, since the last fsync ended since ago and took
// took: with one P, until as long as that fsync took has passed, at most
// maxSyncPause, so that fsyncs hold the only P at most about half the time
// under a steady load. Measured (BENCHMARKS.md, 2026-12-05): at 5,000
// requests/s, 1,584 fsyncs a second, half of them for one or two requests,
// held the P about 70% of the time; at 2,000 requests/s the pause cut the
// p99 from 8.8-9.2 ms to 2.6-4.3 ms. With more Ps, other Ps read requests
// during an fsync, and there is no pause. A request alone, after a quiet
// spell, waits for nothing.
func syncPause(procs int, took, since time.Duration) time.Duration {
	if procs > 1 {
		return 0
	}
	return min(took, maxSyncPause) - since
}

// syncActive fsyncs the active segment. A failed fsync leaves the file's
// state unknown, so the spool stops writing (every later Append gets
// ErrWrite) rather than acknowledge events that may not be on disk.
func (s *Spool) syncActive() error {
	start := time.Now()
	if err := s.active.Sync(); err != nil {
		s.metrics.WriteErrors.Inc()
		return s.fail(fmt.Errorf("fsync: %w", err))
	}
	s.syncEnd = time.Now()
	s.syncTook = s.syncEnd.Sub(start)
	s.metrics.Fsyncs.Inc()
	s.metrics.FsyncLatency.Observe(s.syncTook.Seconds())
	s.dirty = false
	return nil
}

func (s *Spool) syncDirty() {
	if s.dirty && s.active != nil {
		_ = s.syncActive()
	}
}

// fail stops the spool from writing for good and returns the error Append
// reports: it wraps both ErrWrite and err. It logs once.
func (s *Spool) fail(err error) error {
	err = fmt.Errorf("%w: %w (restart inlet once the disk is fixed)", ErrWrite, err)
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
		s.log.Error("spool: stopped writing", "err", err)
	}
	s.mu.Unlock()
	return err
}
