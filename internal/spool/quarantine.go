package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Damage inside a segment is cut out, not followed to the end: after a bad
// frame the spool looks for the next offset where a frame's length, CRC and
// record all verify (resync) and carries on from there. A false match needs
// a CRC32C collision and a record that decodes, so it is not a concern.
//
// Before anything is changed, the damaged segment is copied whole to
// <segment>.corrupt (then .corrupt.1, ...) next to it: the bytes the spool
// gives up stay on disk for an operator.

// goodFrame reports whether b starts with a whole frame that verifies, and
// its length.
func goodFrame(b []byte) (int, bool) {
	p, n, err := nextFrame(b)
	if err != nil {
		return 0, false
	}
	if _, _, err := decodePayload(p); err != nil {
		return 0, false
	}
	return n, true
}

// resync returns the offset in b, after from, of the first frame that
// verifies; -1 when there is none. The frame the bad frame's length points
// to is tried first: a flipped bit in a payload leaves the length intact.
func resync(b []byte, from int) int {
	if from+frameHeader <= len(b) {
		if size := int(binary.LittleEndian.Uint32(b[from:])); size > 0 && size <= maxPayloadBytes {
			if next := from + frameHeader + size; next < len(b) {
				if _, ok := goodFrame(b[next:]); ok {
					return next
				}
			}
		}
	}
	for off := from + 1; off+frameHeader < len(b); off++ {
		size := binary.LittleEndian.Uint32(b[off:])
		if size == 0 || size > maxPayloadBytes || off+frameHeader+int(size) > len(b) {
			continue
		}
		if _, ok := goodFrame(b[off:]); ok {
			return off
		}
	}
	return -1
}

// damagedRecords estimates the records in the damaged bytes b: the frames
// their lengths chain through when the chain ends exactly at the end of b,
// else one.
func damagedRecords(b []byte) uint64 {
	var n uint64
	for off := 0; off+frameHeader <= len(b); n++ {
		size := int(binary.LittleEndian.Uint32(b[off:]))
		if size == 0 || size > maxPayloadBytes {
			return 1
		}
		off += frameHeader + size
		if off == len(b) {
			return n + 1
		}
	}
	return 1
}

// torn reports whether b, the damaged end of a segment, is what a crash
// leaves of a write it cut short: one frame the file ends inside, or zeros
// (the file's size was extended, its data not yet written; ext4 can leave
// that).
func torn(b []byte) bool {
	if len(b) < frameHeader || !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		return true
	}
	size := int(binary.LittleEndian.Uint32(b))
	return size > 0 && size <= maxPayloadBytes && frameHeader+size > len(b)
}

// countFrames counts the frames that verify from the start of b, and says
// whether they reach its end.
func countFrames(b []byte) (n uint64, clean bool) {
	for len(b) > 0 {
		fn, ok := goodFrame(b)
		if !ok {
			return n, false
		}
		n++
		b = b[fn:]
	}
	return n, true
}

// quarantine writes data, the bytes of the damaged segment path, to
// path.corrupt (or .corrupt.N when that exists) durably, and returns its
// name.
func (s *Spool) quarantine(path string, data []byte) (string, error) {
	name := path + ".corrupt"
	for i := 1; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			break
		}
		name = fmt.Sprintf("%s.corrupt.%d", path, i)
	}
	f, err := s.fs.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("quarantining %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.SyncDir(s.cfg.Dir)
	}
	if err != nil {
		_ = s.fs.Remove(name) // a part of a copy (a full disk) holds room and tells nothing
		return "", fmt.Errorf("quarantining %s: %w", filepath.Base(path), err)
	}
	return name, nil
}

// skipDamaged gives up the records at p that cannot be read — a damaged
// frame, or a segment gone from disk — and returns the position of the
// next record that can be, and how many records it gave up. It copies a
// damaged segment to .corrupt before the caller moves past it. Only the
// forwarder calls it, once reading at p failed several times.
func (s *Spool) skipDamaged(p Pos, cause error) (Pos, uint64, error) {
	s.mu.Lock()
	var seg, after *segment
	for i, sg := range s.segs {
		if sg.base >= p.Seg {
			seg = sg
			if i+1 < len(s.segs) {
				after = s.segs[i+1]
			}
			break
		}
	}
	if seg == nil {
		s.mu.Unlock()
		return p, 0, fmt.Errorf("spool: no segment at %d to skip", p.Seg)
	}
	if seg.base != p.Seg {
		p = Pos{Seg: seg.base, Seq: seg.base}
	}
	end, count := seg.size, seg.count
	if !seg.sealed {
		end = s.readable
	}
	s.mu.Unlock()
	name := filepath.Base(seg.path)
	// What follows the segment's last record: the next segment, or (the
	// active one) its written end.
	toEnd := Pos{Seg: seg.base, Off: end, Seq: seg.base + count}
	if after != nil {
		toEnd = Pos{Seg: after.base, Seq: after.base}
	}
	var restLost uint64
	if e := seg.base + count; e > p.Seq {
		restLost = e - p.Seq
	}
	data, err := s.readSegment(seg.path, end)
	if exhausted(err) {
		return p, 0, fmt.Errorf("spool: reading %s to skip damage: %w", name, err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		s.mu.Lock()
		if !seg.missing {
			seg.missing = true
			s.bytes -= seg.size
		}
		s.mu.Unlock()
		s.lose(restLost)
		s.log.Error("spool: a segment is gone from disk; its records cannot be sent, delivery goes on after it",
			"segment", name, "records_lost", restLost, "reason", cause)
		return toEnd, restLost, nil
	}
	if err != nil {
		// Unreadable, not damaged: nothing to resync on.
		s.lose(restLost)
		s.log.Error("spool: a segment cannot be read; its records from here on cannot be sent, delivery goes on after it",
			"segment", name, "offset", p.Off, "records_lost", restLost, "reason", cause, "err", err)
		return toEnd, restLost, nil
	}
	q, err := s.quarantine(seg.path, data)
	if err != nil {
		return p, 0, fmt.Errorf("spool: %w", err)
	}
	next, lost := toEnd, restLost
	if p.Off >= 0 && p.Off < int64(len(data)) {
		if r := resync(data, int(p.Off)); r >= 0 {
			lost = damagedRecords(data[p.Off:r])
			// The segment's record count says exactly how many frames the
			// damage held, if the rest of the segment is whole.
			if m, clean := countFrames(data[r:]); clean && seg.base+count > p.Seq+m {
				lost = seg.base + count - p.Seq - m
			}
			next = Pos{Seg: seg.base, Off: int64(r), Seq: p.Seq + lost}
		}
	}
	s.metrics.Recovered.Inc()
	s.lose(lost)
	s.log.Error("spool: a damaged frame cannot be sent; giving it up, delivery goes on after it",
		"segment", name, "offset", p.Off, "records_lost", lost, "resume_offset", next.Off, "quarantined", filepath.Base(q), "reason", cause)
	return next, lost, nil
}

// exhausted reports whether err says the process or the system is short
// of file descriptors (a descriptor flood) or memory: no sign of damage,
// and over once the shortage is.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM)
}

// readSegment reads the first n bytes of the segment path.
func (s *Spool) readSegment(path string, n int64) ([]byte, error) {
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// lose counts n records given up.
func (s *Spool) lose(n uint64) {
	s.quarantined.Add(n)
	s.metrics.Quarantined.Add(float64(n))
}
