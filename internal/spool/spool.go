// Package spool is inlet's local write-ahead log: a request's events are
// appended and fsynced (group commit: concurrent requests share one fsync)
// before the request is answered, and a forwarder sends them to Kafka
// later, deleting a segment only once Kafka acknowledged all its records.
//
// Files under Config.Dir:
//
//	<base>.seg   segments, named by the sequence number of their first record
//	cursor       where delivery stands, rewritten in place (cursor.go); an
//	             optimization (a lost or stale cursor only means records
//	             are sent again, never skipped)
//	lock         held (flock) by the one process using the spool
//	<base>.seg.corrupt[.N]
//	             a damaged segment as it was before the spool cut the damage
//	             out (on open) or gave up its records (the forwarder)
//	parked/records
//	             records Kafka refused for good, and the dead-letter path too
//	             (segment format, the reason in a header)
//
// Delivery is at-least-once: a crash re-sends what Kafka may already have.
// Damage costs only the records it hit: a bad frame inside a segment is cut
// out and the records after it kept; they are counted
// (inlet_spool_quarantined_records_total) and logged with their number.
package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Sync modes.
const (
	// SyncAlways fsyncs before any append is acknowledged: an acknowledged
	// event survives a crash of the process and of the machine.
	SyncAlways = "always"
	// SyncInterval acknowledges once the events are written to the OS and
	// fsyncs every SyncInterval: an acknowledged event survives a crash of
	// the process, but a machine crash may lose the last interval.
	SyncInterval = "interval"
)

// Config configures a spool.
type Config struct {
	Dir          string
	FS           FileSystem // nil: the operating system (OS)
	SegmentBytes int64      // a segment is closed once it reaches this size
	MaxBytes     int64      // Append fails with ErrFull past this many bytes on disk
	Sync         string
	SyncInterval time.Duration // with SyncInterval
	// MaxGroupBytes bounds the bytes one group commit writes at once.
	MaxGroupBytes int
	// QueueLength bounds the appends waiting for the writer.
	QueueLength int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:  16 << 20,
		MaxBytes:      1 << 30,
		Sync:          SyncAlways,
		SyncInterval:  10 * time.Millisecond,
		MaxGroupBytes: 4 << 20,
		QueueLength:   4096,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("spool: no directory")
	case c.SegmentBytes < 4<<10:
		return errors.New("spool: segment size must be at least 4 KiB")
	case c.MaxBytes < c.SegmentBytes:
		return fmt.Errorf("spool: max bytes (%d) is below the segment size (%d)", c.MaxBytes, c.SegmentBytes)
	case c.Sync != SyncAlways && c.Sync != SyncInterval:
		return fmt.Errorf("spool: sync %q: want always or interval", c.Sync)
	case c.Sync == SyncInterval && (c.SyncInterval <= 0 || c.SyncInterval > time.Second):
		return fmt.Errorf("spool: sync interval %v: want more than 0 and at most 1s", c.SyncInterval)
	case c.MaxGroupBytes <= 0 || c.QueueLength <= 0:
		return errors.New("spool: group bytes and queue length must be positive")
	}
	return nil
}

// Errors of Append. Match them with errors.Is.
var (
	// ErrFull: the spool holds MaxBytes; retry once the forwarder drained it.
	ErrFull = errors.New("spool: full")
	// ErrClosed: the spool is closed.
	ErrClosed = errors.New("spool: closed")
	// ErrWrite: writing to disk failed; the events were not stored. The
	// error wraps the operating system's too (errors.Is(err,
	// syscall.ENOSPC) holds on a full disk). A failed write, or a failed
	// start of the next segment (EMFILE, ENOSPC), fails only its request:
	// the next Append tries again. After a failed fsync, or a failed write
	// that could not be cut back, every later Append fails with it, and
	// Stats().Failed (and Failed) say why: only a restart helps.
	ErrWrite = errors.New("spool: write failed")
	// ErrTooLarge: a record does not fit a frame of the spool (a payload
	// over 64 MiB, a topic or header name over 65,535 bytes, more than
	// 65,535 headers); nothing of the request was stored.
	ErrTooLarge = errors.New("spool: record too large")
)

// Pos is a position in the spool: before the record at byte Off of the
// segment whose first record is Seg; Seq is that record's sequence number.
type Pos struct {
	Seg uint64
	Off int64
	Seq uint64
}

type segment struct {
	base   uint64
	path   string
	size   int64  // bytes of whole frames
	count  uint64 // records
	sealed bool   // no more writes
	// missing: the file is gone from disk (found by recount or the
	// forwarder); its bytes no longer count in Spool.bytes.
	missing bool
}

type request struct {
	frames []byte
	count  int
	done   chan error // buffered: the writer never blocks on it
}

// Spool is a write-ahead log. It is safe for concurrent use: appends share
// one writer goroutine, and acknowledgements (Ack) are applied one at a time.
type Spool struct {
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	fs       FileSystem
	lock     *os.File
	writeLog *ratelog.Limiter // a failing disk fails every request

	reqs       chan *request
	stop       chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once

	// deletes queues delivered segments, renamed to <segment>.del, for
	// the deleter goroutine, which frees them a step at a time.
	deletes     chan deletion
	deletePause time.Duration // deletePause; tests lengthen it
	deleterDone chan struct{}

	// The writer goroutine alone uses these.
	syncEnd  time.Time     // when the last fsync of a segment ended
	syncTook time.Duration // and how long it took
	active   File
	wbuf     []byte
	dirty    bool

	// parkMu guards parked, the open parked file (park.go); nil until a
	// record is parked.
	parkMu sync.Mutex
	parked File

	quarantined, parkedN atomic.Uint64 // for Stats

	// ackMu serializes Ack, tidy and the cursor write of Close: the cursor
	// file and the deletion of delivered segments. It is taken before mu.
	ackMu     sync.Mutex
	cur       cursorFile
	cursorLog *ratelog.Limiter
	tidyLog   *ratelog.Limiter

	// mu guards what follows. Nothing slow (no I/O) happens while it is
	// held.
	mu       sync.Mutex
	segs     []*segment // by base; the last is the active one
	readable int64      // bytes of the active segment readers may read
	nextSeq  uint64
	bytes    int64 // on disk, all segments
	deleting int64 // on disk, delivered segments the deleter has not freed yet
	reserved int64 // accepted appends not yet written
	acked    Pos   // everything before it is delivered
	failed   error // once set, the spool no longer writes
	closed   bool
	notify   chan struct{} // closed and replaced when readable data grows
	cursorAt time.Time     // when the cursor was last written
	counted  time.Time     // when recount last looked at the disk
	// cursorErr: the last cursor write failed (tidy tries again).
	cursorErr error
	// noRoom: the last append failed for lack of disk space (ENOSPC,
	// EDQUOT), and noRoomNeed bytes were refused; nil once an append
	// succeeds or tidy finds that much room free.
	noRoom     error
	noRoomNeed int64
}

// Open opens (creating if needed) the spool in cfg.Dir, recovers what is
// there — a torn or corrupt tail is cut at the last good record, a bad frame
// inside a segment is cut out, each logged, the segment quarantined first —
// and starts its writer. metrics may be nil.
func Open(cfg Config, log *slog.Logger, metrics *Metrics) (*Spool, error) {
	fsys := cfg.FS
	if fsys == nil {
		fsys = OS
	}
	return openFS(cfg, log, metrics, fsys)
}

// openFS is Open on the file system fsys.
func openFS(cfg Config, log *slog.Logger, metrics *Metrics, fsys FileSystem) (*Spool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool: creating %s: %w", cfg.Dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("spool: opening lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool: %s is in use by another process: %w", cfg.Dir, err)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	s := &Spool{
		cfg: cfg, log: log, metrics: metrics, fs: fsys, lock: lock,
		writeLog: ratelog.New(log, slog.LevelError, "spool: write failed; the requests are answered 503", 10*time.Second),
		cursorLog: ratelog.New(log, slog.LevelWarn,
			"spool: writing the cursor failed; delivered segments are deleted all the same, and it is tried again every second (a restart meanwhile sends some delivered records again)", 10*time.Second),
		tidyLog:    ratelog.New(log, slog.LevelWarn, "spool: deleting delivered segments failed; tried again every second", 10*time.Second),
		reqs:       make(chan *request, cfg.QueueLength),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		notify:     make(chan struct{}),

		deletes:     make(chan deletion, maxDeleting),
		deletePause: deletePause,
		deleterDone: make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		s.closeCursor()
		lock.Close()
		return nil, err
	}
	if err := s.roll(); err != nil {
		s.closeCursor()
		lock.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	metrics.observe(s)
	go s.writer()
	go s.deleter()
	return s, nil
}

func segName(base uint64) string { return fmt.Sprintf("%020d.seg", base) }

// recover scans the segments on disk, repairs damaged ones, and loads the
// cursor, checked against the frames of its segment.
func (s *Spool) recover() error {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("spool: reading %s: %w", s.cfg.Dir, err)
	}
	cur, haveCur, err := s.openCursor()
	if err != nil {
		return err
	}
	var atCur *scanned
	for _, e := range entries {
		name := e.Name()
		if name == cursorName+".tmp" {
			// What an older version wrote its cursor to before renaming it.
			s.remove(filepath.Join(s.cfg.Dir, name))
			continue
		}
		if strings.HasSuffix(name, deletingSuffix) {
			// Delivered, and being deleted when the process stopped.
			s.remove(filepath.Join(s.cfg.Dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".seg") {
			continue
		}
		base, err := strconv.ParseUint(strings.TrimSuffix(name, ".seg"), 10, 64)
		if err != nil {
			s.log.Warn("spool: ignoring a file that is not a segment", "file", name)
			continue
		}
		seg := &segment{base: base, path: filepath.Join(s.cfg.Dir, name), sealed: true}
		curOff := int64(-1)
		if haveCur && cur.Seg == base {
			curOff = cur.Off
		}
		sc, err := s.scan(seg, curOff)
		if err != nil {
			return err
		}
		if curOff >= 0 || haveCur && cur.Seg == base {
			atCur = &sc
		}
		if seg.size == 0 {
			_ = s.fs.Remove(seg.path)
			continue
		}
		s.segs = append(s.segs, seg)
	}
	sort.Slice(s.segs, func(i, j int) bool { return s.segs[i].base < s.segs[j].base })
	s.nextSeq = 1
	for _, seg := range s.segs {
		s.bytes += seg.size
		if end := seg.base + seg.count; end > s.nextSeq {
			s.nextSeq = end
		}
	}
	s.acked = s.checkCursor(cur, haveCur, atCur)
	// Segments wholly before the position checked were delivered: a crash
	// came between the cursor write and their deletion, or their deletion
	// went on without a cursor write that failed. Removed first, as the
	// room may be needed; a crash before the cursor write below finds the
	// same cursor, its segments gone, which checkCursor takes for
	// delivered.
	for len(s.segs) > 0 && s.before(s.segs[0], s.acked) {
		seg := s.segs[0]
		if err := s.fs.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: removing delivered segment: %w", err)
		}
		s.bytes -= seg.size
		s.segs = s.segs[1:]
	}
	if !haveCur || s.acked != cur || !s.cur.laid {
		// The cursor file must say what the spool now goes by before
		// anything is appended: it is otherwise rewritten only on the next
		// delivery or Close, and a crash before either would leave a
		// cursor that new records can come to match. With every segment
		// delivered and the active one empty (so removed above), numbering
		// starts again from the first free number, behind an old cursor:
		// the next start would take the new records for delivered and
		// delete them unsent. A cursor that was judged wrong can likewise
		// come to look right. An old line is rewritten in the slots'
		// layout. (A new cursor file's name is made durable by Open's
		// roll, which syncs the directory before any record is taken.)
		if err := s.saveCursor(s.acked, true); err != nil {
			return err
		}
	}
	if n := s.unforwarded(); n > 0 {
		s.log.Info("spool: recovered records not yet delivered; they will be sent (again)",
			"records", n, "segments", len(s.segs), "bytes", s.bytes)
	}
	return nil
}

// unforwarded counts the records at or after the delivered position.
// Sequence numbers may have gaps where damage was cut out. s.mu must be
// held (or the spool not yet shared).
func (s *Spool) unforwarded() uint64 {
	var n uint64
	for _, seg := range s.segs {
		if end, from := seg.base+seg.count, max(seg.base, s.acked.Seq); end > from {
			n += end - from
		}
	}
	return n
}

// pending reports whether any record is not yet delivered.
func (s *Spool) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unforwarded() > 0
}

// before reports whether every record of seg lies before p.
func (s *Spool) before(seg *segment, p Pos) bool {
	return seg.base < p.Seg || (seg.base == p.Seg && seg.sealed && p.Off >= seg.size)
}

// scanned is what scan found out about a segment's frames at the cursor's
// offset (curOff, or -1 when the cursor names another segment).
type scanned struct {
	atCursor  bool   // curOff is where a frame starts, or the end
	cursorSeq uint64 // the sequence number of the record there
	repaired  bool   // damage before the end was cut out: offsets after it moved
}

// scan checks every frame of seg and sets its size and count. A bad frame
// followed by good ones is cut out (the segment is rewritten without it); a
// bad tail is cut. Either way the segment is first copied to .corrupt, and
// the records lost are counted (metrics.Quarantined) and logged.
func (s *Spool) scan(seg *segment, curOff int64) (scanned, error) {
	var sc scanned
	f, err := s.fs.OpenFile(seg.path, os.O_RDWR, 0)
	if err != nil {
		return sc, fmt.Errorf("spool: opening %s: %w", seg.path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return sc, fmt.Errorf("spool: %s: %w", seg.path, err)
	}
	var (
		off  int64
		hdr  [frameHeader]byte
		buf  []byte
		why  error
		full = fi.Size()
	)
	for off < full {
		if off == curOff {
			sc.atCursor, sc.cursorSeq = true, seg.base+seg.count
		}
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			why = fmt.Errorf("%w: torn frame header", errCorrupt)
			break
		}
		size := int64(binary.LittleEndian.Uint32(hdr[:]))
		if size == 0 || size > maxPayloadBytes || off+frameHeader+size > full {
			why = fmt.Errorf("%w: frame of %d bytes at %d runs past the end (%d)", errCorrupt, size, off, full)
			break
		}
		if int64(cap(buf)) < frameHeader+size {
			buf = make([]byte, frameHeader+size)
		}
		b := buf[:frameHeader+size]
		if _, err := f.ReadAt(b, off); err != nil {
			why = fmt.Errorf("reading: %w", err)
			break
		}
		p, n, err := nextFrame(b)
		if err == nil {
			_, _, err = decodePayload(p)
		}
		if err != nil {
			why = err
			break
		}
		off += int64(n)
		seg.count++
	}
	seg.size = off
	if why == nil {
		if off == curOff {
			sc.atCursor, sc.cursorSeq = true, seg.base+seg.count
		}
		return sc, nil
	}
	if off == curOff {
		sc.atCursor, sc.cursorSeq = true, seg.base+seg.count
	}
	return sc, s.repair(f, seg, full, why, &sc)
}

// repair cuts the damage scan found at seg.size out of seg, whose file f
// holds full bytes: it quarantines the file, then keeps every frame that
// verifies, resyncing after each bad one, and cuts what follows the last.
func (s *Spool) repair(f File, seg *segment, full int64, why error, sc *scanned) error {
	data := make([]byte, full)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("spool: reading damaged segment %s: %w", seg.path, err)
	}
	name := filepath.Base(seg.path)
	kept := data[:seg.size:seg.size] // copied on the first append below
	var lost, ranges uint64
	tail := false
	for pos := int(seg.size); pos < len(data); {
		if n, ok := goodFrame(data[pos:]); ok {
			kept = append(kept, data[pos:pos+n]...)
			seg.count++
			pos += n
			continue
		}
		next := resync(data, pos)
		if next < 0 {
			// A frame the file ends inside is a write a crash cut short:
			// never acknowledged (with --spool-sync always), so not lost.
			if !torn(data[pos:]) {
				lost += damagedRecords(data[pos:])
			}
			tail = true
			break
		}
		lost += damagedRecords(data[pos:next])
		ranges++
		pos = next
	}
	q, err := s.quarantine(seg.path, data)
	switch {
	case err == nil:
		q = filepath.Base(q)
	case ranges == 0 && noSpace(err):
		// A tail is cut in place, which needs no room: a start on a full
		// disk (a crash between a short write and its cut) goes on
		// without the copy rather than not at all.
		q = "none: " + err.Error()
	default:
		return fmt.Errorf("spool: %w", err)
	}
	s.metrics.Recovered.Inc()
	s.lose(lost)
	if ranges == 0 {
		s.log.Error("spool: corrupt or torn segment tail; cutting it at the last good record",
			"segment", name, "good_records", seg.count, "records_lost", lost, "good_bytes", seg.size,
			"dropped_bytes", full-seg.size, "quarantined", q, "reason", why)
		if err := f.Truncate(seg.size); err != nil {
			return fmt.Errorf("spool: truncating %s: %w", seg.path, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("spool: syncing %s: %w", seg.path, err)
		}
		return nil
	}
	sc.repaired = true
	s.log.Error("spool: corrupt frames inside a segment; cutting them out and keeping the records after them",
		"segment", name, "damaged_ranges", ranges, "tail_cut", tail, "records_lost", lost, "good_records", seg.count,
		"good_bytes", len(kept), "dropped_bytes", full-int64(len(kept)), "quarantined", q, "reason", why)
	tmp := seg.path + ".tmp"
	t, err := s.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("spool: rewriting %s: %w", name, err)
	}
	_, err = t.Write(kept)
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, seg.path)
	}
	if err == nil {
		err = s.fs.SyncDir(s.cfg.Dir)
	}
	if err != nil {
		return fmt.Errorf("spool: rewriting %s: %w", name, err)
	}
	seg.size = int64(len(kept))
	return nil
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

// Failed reports whether the spool stopped writing for good (after a
// failed fsync, or a failed write it could not cut back): it then needs a
// restart, and Stats().Failed says why.
func (s *Spool) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed != nil
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.cfg.Dir }

// Stats is a snapshot of the spool's state.
type Stats struct {
	Bytes       int64  // on disk, with delivered segments not yet deleted
	MaxBytes    int64  // the limit
	Segments    int    // files
	Unforwarded uint64 // records not yet acknowledged by Kafka
	Failed      string // why the spool stopped writing, if it did
	// DiskFull is why appends fail for lack of disk space (ENOSPC,
	// EDQUOT), while they do: until one succeeds, or the disk has room
	// for the one refused.
	DiskFull string
	// Quarantined counts the records given up since Open because their
	// frames were damaged or their segment was gone (see .corrupt files).
	Quarantined uint64
	// Parked counts the records Kafka refused for good, and the
	// dead-letter path too, written to parked/ since Open.
	Parked uint64
}

// Stats returns a snapshot of the spool's state.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Bytes: s.bytes + s.deleting, MaxBytes: s.cfg.MaxBytes, Segments: len(s.segs), Unforwarded: s.unforwarded()}
	if s.failed != nil {
		st.Failed = s.failed.Error()
	}
	if s.noRoom != nil {
		st.DiskFull = s.noRoom.Error()
	}
	st.Quarantined, st.Parked = s.quarantined.Load(), s.parkedN.Load()
	return st
}

// Delivered returns the position before which every record was delivered.
func (s *Spool) Delivered() Pos {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Ack records that every record before p was delivered, writes the cursor
// and deletes the segments wholly before it (settle). A crash at any point
// leads to records being sent again, never skipped. It is safe for
// concurrent use: acks are applied one at a time, and one behind the
// delivered position does nothing. A failed cursor write does not fail
// Ack (see settle); a segment that could not be renamed for deletion
// fails it, and is tried again by the next Ack or tidy. After Close it
// returns ErrClosed.
func (s *Spool) Ack(p Pos) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if p.Seq < s.acked.Seq {
		s.mu.Unlock()
		return nil
	}
	s.acked = p
	s.mu.Unlock()
	return s.settle()
}

// settle writes the cursor at the delivered position (at most every 50 ms,
// durably when a segment is to be deleted) and deletes the segments wholly
// before it. The deletion does not wait on the cursor write: were it to,
// a cursor that cannot be written (a full copy-on-write disk, an I/O
// error) would keep the room that delivery frees, and the spool full. A
// crash after the deletion, with the cursor on disk behind it, is safe:
// Open takes a cursor whose segment is gone for one at the next segment
// (checkCursor). A failed cursor write is logged, counted, and tried again
// by tidy. s.ackMu must be held.
func (s *Spool) settle() error {
	s.mu.Lock()
	p := s.acked
	var del []*segment
	for _, seg := range s.segs[:len(s.segs)-1] { // never the active one
		if !s.before(seg, p) {
			break
		}
		del = append(del, seg)
	}
	retry := s.cursorErr != nil
	write := len(del) > 0 || retry || time.Since(s.cursorAt) > 50*time.Millisecond
	s.mu.Unlock()
	if write {
		err := s.saveCursor(p, len(del) > 0 || retry)
		if err != nil {
			s.metrics.CursorErrors.Inc()
			s.cursorLog.Log("err", err)
		} else if retry {
			s.log.Info("spool: the cursor is written again")
		}
		s.mu.Lock()
		s.cursorErr = err
		s.mu.Unlock()
	}
	for _, seg := range del {
		size := seg.size
		if seg.missing {
			size = 0
		}
		if err := s.retire(seg.path, size); err != nil {
			return fmt.Errorf("spool: deleting delivered segment %s: %w", filepath.Base(seg.path), err)
		}
		s.mu.Lock()
		// Only settle removes segments, in order, under ackMu: seg is the
		// first.
		s.segs = s.segs[1:]
		s.mu.Unlock()
	}
	return nil
}

// tidyEvery is how often tidy runs.
const tidyEvery = time.Second

// tidy does what nothing else would do until the next delivery, which may
// never come (the backlog is delivered, or Kafka is down): it writes a
// cursor whose write failed, deletes delivered segments whose deletion
// failed or that a roll sealed after their delivery (a full disk seals the
// active segment), and clears Stats().DiskFull once the disk has room for
// the append it refused (that file system's free space, as statfs says:
// the room may come from elsewhere, and with a load balancer keeping
// clients away while the spool is unready, no append may come to find
// out). The deleter calls it every tidyEvery.
func (s *Spool) tidy() {
	s.mu.Lock()
	due := !s.closed && (s.cursorErr != nil || len(s.segs) > 1 && s.before(s.segs[0], s.acked))
	noRoom, need := s.noRoom != nil, s.noRoomNeed
	s.mu.Unlock()
	if due {
		s.ackMu.Lock()
		if err := s.settle(); err != nil {
			s.tidyLog.Log("err", err)
		}
		s.ackMu.Unlock()
	}
	if noRoom {
		if free, err := diskFree(s.cfg.Dir); err == nil && free >= need {
			s.mu.Lock()
			if s.noRoomNeed == need {
				s.noRoom = nil
			}
			s.mu.Unlock()
		}
	}
}

// Deleting a delivered segment. unlink(2) of a whole 16 MiB segment took
// 9-16 ms on ext4 here, the file system's work of freeing its blocks, and
// with GOMAXPROCS=1 the call holds the only P until the runtime's sysmon
// hands it on: once a second under load, the open loop's p99 carried it
// (BENCHMARKS.md, 2026-12-05).
// So a delivered segment is renamed out of the spool's way at once, then
// truncated deleteChunk bytes at a time, deletePause apart, and unlinked
// when empty (RocksDB's DeleteScheduler frees large files in chunks for
// the same reason).
const (
	deletingSuffix = ".del" // <segment>.del: delivered, being deleted
	deleteChunk    = 1 << 20
	deletePause    = 5 * time.Millisecond
	// maxDeleting bounds the segments queued for the deleter; past it,
	// Ack deletes a segment at once.
	maxDeleting = 64
)

// deletion is a delivered segment handed to the deleter: its file, and
// the bytes of it the spool counts (in Spool.deleting) until it is freed.
type deletion struct {
	path string
	size int64
}

// retire takes a delivered segment of size counted bytes out of the
// spool: renamed to <path>.del (a name recover deletes, should the process
// stop before the deleter did) and handed to the deleter. Until the
// deleter frees them, its bytes still count against MaxBytes, as what is
// on disk. Once renamed, the segment is out of the spool whatever follows:
// a failed removal is logged, and the next Open removes the file.
// s.ackMu must be held.
func (s *Spool) retire(path string, size int64) error {
	gone := path + deletingSuffix
	err := s.fs.Rename(path, gone)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.mu.Lock()
	s.bytes -= size
	if err == nil {
		s.deleting += size
	}
	s.mu.Unlock()
	if err != nil { // already gone
		return nil
	}
	select {
	case s.deletes <- deletion{gone, size}:
	default:
		s.remove(gone)
		s.freed(size)
	}
	return nil
}

// deleter deletes the segments retire hands it, and calls tidy every
// tidyEvery, until the spool is closed; then those still queued are
// deleted at once.
func (s *Spool) deleter() {
	defer close(s.deleterDone)
	t := time.NewTicker(tidyEvery)
	defer t.Stop()
	for {
		select {
		case d := <-s.deletes:
			s.deleteInSteps(d)
		case <-t.C:
			s.tidy()
		case <-s.stop:
			for {
				select {
				case d := <-s.deletes:
					s.remove(d.path)
					s.freed(d.size)
				default:
					return
				}
			}
		}
	}
}

// deleteInSteps truncates d's file deleteChunk bytes at a time,
// deletePause apart, then removes it; once the spool is closing, at once.
// The bytes it counted are released as they are freed.
func (s *Spool) deleteInSteps(d deletion) {
	counted := d.size
	if f, err := s.fs.OpenFile(d.path, os.O_WRONLY, 0); err == nil {
		size := int64(0)
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		for first := true; size > 0; first = false {
			if !first && !s.pause() {
				break
			}
			size = max(0, (size-1)/deleteChunk*deleteChunk)
			if f.Truncate(size) != nil {
				break // remove says what is wrong, if anything
			}
			if counted > size {
				s.freed(counted - size)
				counted = size
			}
		}
		f.Close()
	}
	s.remove(d.path)
	s.freed(counted)
}

// held is what counts against MaxBytes: the segments, those being
// deleted, and the appends accepted but not yet written. s.mu must be held.
func (s *Spool) held() int64 { return s.bytes + s.deleting + s.reserved }

// freed stops counting n bytes of a segment being deleted.
func (s *Spool) freed(n int64) {
	s.mu.Lock()
	s.deleting -= n
	s.mu.Unlock()
}

// pause waits deletePause and reports whether deleteInSteps is to go on:
// false once the spool is closing. With less than a segment of room left,
// or the disk full, it does not wait: the deletion goes on at once, as the
// room is needed.
func (s *Spool) pause() bool {
	s.mu.Lock()
	tight := s.held() > s.cfg.MaxBytes-s.cfg.SegmentBytes || s.noRoom != nil
	s.mu.Unlock()
	if tight {
		select {
		case <-s.stop:
			return false
		default:
			return true
		}
	}
	select {
	case <-time.After(s.deletePause):
		return true
	case <-s.stop:
		return false
	}
}

func (s *Spool) remove(path string) {
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("spool: deleting a delivered segment; the next start tries again", "file", filepath.Base(path), "err", err)
	}
}

// recount checks, at most once a second, that the sealed segments the
// spool counts are on disk, and stops counting those that are not, so that
// "full" follows what is on disk: a segment removed by hand (or lost) does
// not keep the spool full. It reports whether it freed any room.
func (s *Spool) recount() bool {
	if !s.ackMu.TryLock() { // an Ack is under way: it frees room itself
		return false
	}
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if time.Since(s.counted) < time.Second {
		s.mu.Unlock()
		return false
	}
	s.counted = time.Now()
	var sealed []*segment
	for _, seg := range s.segs {
		if seg.sealed && !seg.missing {
			sealed = append(sealed, seg)
		}
	}
	s.mu.Unlock()
	var gone []*segment
	for _, seg := range sealed {
		if _, err := os.Stat(seg.path); errors.Is(err, fs.ErrNotExist) {
			gone = append(gone, seg)
		}
	}
	if len(gone) == 0 {
		return false
	}
	s.mu.Lock()
	for _, seg := range gone {
		seg.missing = true
		s.bytes -= seg.size
	}
	s.mu.Unlock()
	s.log.Error("spool: segments gone from disk; their records cannot be sent (the forwarder counts them as quarantined)",
		"segments", len(gone), "first", filepath.Base(gone[0].path))
	return true
}

// checkCursor returns the delivered position the cursor p stands for, once
// checked against the segments on disk (at: what scan found at p.Off in
// p's segment). A cursor that does not match them is replaced by the start
// of its segment, or of the spool: records are sent again, never skipped.
func (s *Spool) checkCursor(p Pos, have bool, at *scanned) Pos {
	start := Pos{Seg: s.nextSeq, Seq: s.nextSeq}
	if len(s.segs) > 0 {
		start = Pos{Seg: s.segs[0].base, Seq: s.segs[0].base}
	}
	if !have {
		return start
	}
	bad := func(why string, from Pos) Pos {
		s.log.Warn("spool: the cursor does not match the segments on disk; sending from the start of its segment again (duplicates, nothing skipped)",
			"reason", why, "cursor", fmt.Sprintf("%d %d %d", p.Seg, p.Off, p.Seq), "from_seq", from.Seq)
		return from
	}
	for i, seg := range s.segs {
		segStart := Pos{Seg: seg.base, Seq: seg.base}
		switch {
		case seg.base == p.Seg:
			switch {
			case p.Off < 0:
				return bad("negative offset", segStart)
			case at != nil && at.repaired:
				return bad("its segment was repaired", segStart)
			case at == nil || !at.atCursor:
				return bad("not on a frame boundary of its segment", segStart)
			case at.cursorSeq != p.Seq:
				return bad(fmt.Sprintf("sequence %d, but the frame there is record %d", p.Seq, at.cursorSeq), segStart)
			}
			return p
		case seg.base > p.Seg:
			// The cursor's segment is gone: delivered and deleted (the
			// cursor is then at its end, where this one starts), or lost.
			if i > 0 && s.segs[i-1].base+s.segs[i-1].count > p.Seg {
				return bad("its segment is inside another", Pos{Seg: s.segs[i-1].base, Seq: s.segs[i-1].base})
			}
			if p.Off < 0 || p.Seq > seg.base {
				return bad("its segment is gone and it lies past the next one", segStart)
			}
			return segStart
		}
	}
	if len(s.segs) == 0 {
		return start
	}
	if last := s.segs[len(s.segs)-1]; p.Seg < last.base+last.count {
		return bad("its segment is inside another", Pos{Seg: last.base, Seq: last.base})
	}
	if p.Seg == s.nextSeq && p.Off == 0 && p.Seq == s.nextSeq { // everything was delivered
		return p
	}
	return bad("past the end of the spool", start)
}

// Close writes what was accepted, syncs it, writes the cursor, and closes
// the spool. Appends after Close fail with ErrClosed. A cursor it cannot
// write is logged, not returned: nothing is lost, the next start sends
// again what was delivered since the last one. It is safe to call more
// than once.
func (s *Spool) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.wake()
		s.mu.Unlock()
		close(s.stop)
		<-s.writerDone
		<-s.deleterDone
		s.ackMu.Lock()
		if cerr := s.saveCursor(s.Delivered(), true); cerr != nil {
			s.metrics.CursorErrors.Inc()
			s.log.Warn("spool: writing the cursor at close; the next start sends again what was delivered since it was last written (duplicates, nothing lost)",
				"err", cerr)
		}
		s.closeCursor()
		s.ackMu.Unlock()
		s.parkMu.Lock()
		if s.parked != nil {
			s.parked.Close()
			s.parked = nil
		}
		s.parkMu.Unlock()
		s.lock.Close()
	})
	return nil
}
