package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

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
	for _, tp := range s.topics {
		if tp.pos.Seq < p.Seq {
			tp.pos = p
		}
	}
	s.topicsDirty = true
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
	s.saveTopics(false)
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
