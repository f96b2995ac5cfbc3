package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/internal/ratelog"
)

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
		topicsLog: ratelog.New(log, slog.LevelWarn,
			"spool: writing the topics file failed; tried again every second (a restart meanwhile sends again what topics delivered since it was last written)", 10*time.Second),
		tidyLog:    ratelog.New(log, slog.LevelWarn, "spool: deleting delivered segments failed; tried again every second", 10*time.Second),
		reqs:       make(chan *request, cfg.QueueLength),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		notify:     make(chan struct{}),

		topicsChanged: make(chan struct{}, 1),

		deletes:     make(chan deletion, maxDeleting),
		deletePause: deletePause,
		deleterDone: make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		s.closeCursor()
		lock.Close()
		return nil, err
	}
	if err := s.loadTopics(); err != nil {
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
		if sc.repaired && (s.repairedBase == 0 || base < s.repairedBase) {
			s.repairedBase = base
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
