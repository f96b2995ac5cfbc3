package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The cursor file says where delivery stands. It is an optimization: a
// stale cursor only means records are sent again (checkCursor judges it
// against the segments on disk), so nothing waits on it but the next
// start's duplicates.
//
// It is rewritten in place, never replaced: two slots of cursorSlot bytes,
// each write going to the slot that does not hold the newest cursor, with a
// generation one higher and a CRC32C. A write cut short (a crash, a failing
// disk) spoils at most the slot it wrote; the other still holds the cursor
// before it. The file keeps its size and stays open while the spool is, so a
// cursor write needs neither free space (an overwrite of blocks the file
// has, on ext4, xfs or tmpfs) nor a file descriptor: a full disk or a
// descriptor flood cannot keep delivered segments from being deleted. Where
// an overwrite does need room (btrfs, ZFS) or the write fails for another
// reason, deletion goes on all the same and the write is tried again
// (settle, tidy).
//
// A slot, little-endian: "icur", generation u64, Seg u64, Off i64, Seq u64,
// CRC32C (Castagnoli) of the 36 bytes before it.
//
// Older versions wrote a line "seg off seq\n" to cursor.tmp and renamed it
// over the cursor: such a file is still read, and Open rewrites it in the
// slots' layout, in place (a line is shorter than a block, so the file
// already has the room).
const (
	cursorName  = "cursor"
	cursorMagic = "icur"
	cursorSlot  = 40
	cursorSize  = 2 * cursorSlot
)

// cursorFile is the open cursor file. s.ackMu guards it (Open and Close
// use it alone).
type cursorFile struct {
	f    File
	gen  uint64 // of the newest cursor written or read
	slot int    // where the next write goes
	laid bool   // the file has the slots' layout (else an old line, or nothing)
}

// openCursor opens (creating) the cursor file and reads it: the cursor,
// and false when there is none or it cannot be read (every slot torn or
// damaged, or a line that does not parse), which is then logged.
func (s *Spool) openCursor() (Pos, bool, error) {
	path := filepath.Join(s.cfg.Dir, cursorName)
	f, err := s.fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Pos{}, false, fmt.Errorf("spool: opening the cursor: %w", err)
	}
	s.cur = cursorFile{f: f}
	b := make([]byte, 128) // more than either layout: a longer file is not a cursor
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		s.log.Warn("spool: unreadable cursor; sending everything in the spool", "err", err)
		return Pos{}, false, nil
	}
	b = b[:n]
	if n == 0 {
		return Pos{}, false, nil
	}
	if p, gen, slot, ok := parseSlots(b); ok {
		s.cur.gen, s.cur.slot, s.cur.laid = gen, slot, true
		return p, true, nil
	}
	var p Pos
	if _, err := fmt.Sscanf(string(b), "%d %d %d\n", &p.Seg, &p.Off, &p.Seq); err != nil {
		s.log.Warn("spool: unreadable cursor; sending everything in the spool", "err", "neither slot holds a valid cursor, and it is not a cursor line either")
		return Pos{}, false, nil
	}
	return p, true, nil
}

// parseSlots returns the newest valid cursor of the slots' layout in b, its
// generation, and the slot the next write goes to (the other one).
func parseSlots(b []byte) (p Pos, gen uint64, next int, ok bool) {
	if len(b) != cursorSize {
		return Pos{}, 0, 0, false
	}
	for i := range 2 {
		sb := b[i*cursorSlot : (i+1)*cursorSlot]
		if !bytes.Equal(sb[:4], []byte(cursorMagic)) ||
			crc32.Checksum(sb[:36], castagnoli) != binary.LittleEndian.Uint32(sb[36:]) {
			continue
		}
		g := binary.LittleEndian.Uint64(sb[4:])
		if ok && g <= gen {
			continue
		}
		p = Pos{Seg: binary.LittleEndian.Uint64(sb[12:]), Off: int64(binary.LittleEndian.Uint64(sb[20:])), Seq: binary.LittleEndian.Uint64(sb[28:])}
		gen, next, ok = g, 1-i, true
	}
	return p, gen, next, ok
}

// putSlot encodes p with generation gen into b, a slot.
func putSlot(b []byte, gen uint64, p Pos) {
	copy(b, cursorMagic)
	binary.LittleEndian.PutUint64(b[4:], gen)
	binary.LittleEndian.PutUint64(b[12:], p.Seg)
	binary.LittleEndian.PutUint64(b[20:], uint64(p.Off))
	binary.LittleEndian.PutUint64(b[28:], p.Seq)
	binary.LittleEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
}

// saveCursor writes p to the cursor file, in place, and fsyncs it if
// durable. On failure the slot it wrote may be spoiled, the other one is
// not, and the next write goes to the same slot again. s.ackMu must be
// held.
func (s *Spool) saveCursor(p Pos, durable bool) error {
	c := &s.cur
	var b [cursorSize]byte
	gen := c.gen + 1
	c.gen = gen // a retry after a failure writes a newer generation
	buf, off := b[c.slot*cursorSlot:(c.slot+1)*cursorSlot], int64(c.slot*cursorSlot)
	putSlot(buf, gen, p)
	if !c.laid {
		// The first write in the slots' layout: both slots at once, over
		// an old line (in the block it has) or an empty file.
		buf, off = b[:], 0
	}
	_, err := c.f.WriteAt(buf, off)
	if err == nil && !c.laid {
		if fi, serr := c.f.Stat(); serr == nil && fi.Size() > cursorSize {
			err = c.f.Truncate(cursorSize) // a longer file that was not a cursor
		}
	}
	if err == nil && durable {
		err = c.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("spool: writing cursor: %w", err)
	}
	c.slot, c.laid = 1-c.slot, true
	s.mu.Lock()
	s.cursorAt = time.Now()
	s.mu.Unlock()
	return nil
}

// closeCursor closes the cursor file. s.ackMu must be held.
func (s *Spool) closeCursor() {
	if s.cur.f != nil {
		s.cur.f.Close()
		s.cur.f = nil
	}
}

// noSpace reports whether err says the disk (or the user's quota) is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFree returns the bytes an unprivileged process may still write to
// the file system of dir.
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
