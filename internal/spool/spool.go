// Package spool is inlet's local write-ahead log: a request's events are
// appended and fsynced (group commit: concurrent requests share one fsync)
// before the request is answered, and a forwarder sends them to Kafka
// later, each topic on its own from its own position (topics.go: a topic
// Kafka does not take holds back only its own records), deleting a segment
// only once Kafka acknowledged all its records, of every topic.
//
// Files under Config.Dir:
//
//	<base>.seg   segments, named by the sequence number of their first record
//	cursor       where delivery stands for every topic, rewritten in place
//	             (cursor.go); an optimization (a lost or stale cursor only
//	             means records are sent again, never skipped)
//	topics       each topic and where its delivery stands (topics.go);
//	             written before a new topic's first record is accepted
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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

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
	// MaxTopics bounds the topics known at once (topics.go); 0:
	// DefaultMaxTopics.
	MaxTopics int
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
	topicsLog *ratelog.Limiter

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

	// topics: each topic's delivery position (topics.go); acked is the
	// lowest of them. topicsDirty: a position moved since the topics
	// file was written.
	topics      map[string]*topicPos
	topicsDirty bool
	// repairedBase: the first segment recover cut damage out of (0:
	// none); numbers after a cut move, so the topics file is not trusted
	// past it.
	repairedBase uint64

	// topicsMu serializes adding and forgetting topics and writes of the
	// topics file. It is taken before mu.
	topicsMu sync.Mutex
	// topicsChanged is signalled when a topic is added.
	topicsChanged chan struct{}
}

// unforwarded counts the records at or after the delivered position.
// Sequence numbers may have gaps where damage was cut out. s.mu must be
// held (or the spool not yet shared).
func (s *Spool) unforwarded() uint64 { return s.unforwardedFrom(s.acked.Seq) }

// unforwardedFrom counts the records numbered seq or more. s.mu must be
// held.
func (s *Spool) unforwardedFrom(seq uint64) uint64 {
	var n uint64
	for _, seg := range s.segs {
		if end, from := seg.base+seg.count, max(seg.base, seq); end > from {
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

// held is what counts against MaxBytes: the segments, those being
// deleted, and the appends accepted but not yet written. s.mu must be held.
func (s *Spool) held() int64 { return s.bytes + s.deleting + s.reserved }

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
		s.saveTopics(false)
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
