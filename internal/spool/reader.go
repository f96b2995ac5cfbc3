package spool

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// Entry is one stored record.
type Entry struct {
	Seq        uint64
	AppendedAt time.Time
	Record     event.Record
	Next       Pos // the position after the record
}

// Reader reads the spool's records in order, from a position on. It is not
// safe for concurrent use; one forwarder owns it.
type Reader struct {
	s    *Spool
	pos  Pos
	f    File
	fseg uint64
	buf  []byte
}

// NewReader returns a reader starting at from (usually Delivered()).
func (s *Spool) NewReader(from Pos) *Reader { return &Reader{s: s, pos: from} }

// Close releases the reader's file.
func (r *Reader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// Next blocks until there are records after the reader's position (or ctx
// ends, or the spool is closed and drained: ErrClosed), and returns at most
// about maxBytes of them (at least one) with the position after them. The
// entries alias a buffer of their own, which the next call does not reuse.
func (r *Reader) Next(ctx context.Context, maxBytes int) ([]Entry, Pos, error) {
	var (
		seg   *segment
		avail int64
	)
	for {
		s := r.s
		s.mu.Lock()
		seg = nil
		for _, sg := range s.segs {
			if sg.base >= r.pos.Seg {
				seg = sg
				break
			}
		}
		if seg != nil && seg.base != r.pos.Seg { // ours was deleted: skip to the next
			r.pos = Pos{Seg: seg.base, Seq: seg.base}
		}
		end := int64(0)
		if seg != nil {
			end = seg.size
			if !seg.sealed {
				end = s.readable
			}
		}
		if seg != nil && r.pos.Off < end {
			avail = end - r.pos.Off
			s.mu.Unlock()
			break
		}
		if seg != nil && seg.sealed && r.pos.Off >= seg.size {
			if next := s.after(seg); next != nil {
				r.pos = Pos{Seg: next.base, Seq: next.base}
				s.mu.Unlock()
				continue
			}
		}
		if s.closed {
			s.mu.Unlock()
			return nil, r.pos, ErrClosed
		}
		wait := s.notify
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, r.pos, ctx.Err()
		}
	}
	if r.f == nil || r.fseg != seg.base {
		r.Close()
		f, err := r.s.fs.OpenFile(seg.path, os.O_RDONLY, 0)
		if err != nil {
			return nil, r.pos, fmt.Errorf("spool: opening segment for reading: %w", err)
		}
		r.f, r.fseg = f, seg.base
	}
	n := avail
	if n > int64(maxBytes) {
		n = int64(maxBytes)
	}
	if n < frameHeader {
		n = frameHeader
	}
	// A fresh buffer each time: the producer may still hold the records of
	// the last window (a cancelled wait leaves them in its buffer).
	r.buf = make([]byte, n)
	b := r.buf
	if _, err := r.f.ReadAt(b, r.pos.Off); err != nil {
		return nil, r.pos, fmt.Errorf("spool: reading segment %d at %d: %w", seg.base, r.pos.Off, err)
	}
	var out []Entry
	pos := r.pos
	for len(b) > 0 {
		p, fn, err := nextFrame(b)
		if err == errShort {
			if len(out) > 0 {
				break
			}
			if len(b) < frameHeader {
				return nil, r.pos, fmt.Errorf("spool: segment %d: torn frame header at %d", seg.base, pos.Off)
			}
			// One frame larger than maxBytes: read it whole.
			size := int64(frameHeader) + int64(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)
			if size > avail {
				return nil, r.pos, fmt.Errorf("spool: segment %d: frame at %d runs past the written end", seg.base, pos.Off)
			}
			r.buf = make([]byte, size)
			b = r.buf
			if _, err := r.f.ReadAt(b, pos.Off); err != nil {
				return nil, r.pos, fmt.Errorf("spool: reading segment %d at %d: %w", seg.base, pos.Off, err)
			}
			continue
		}
		var (
			rec event.Record
			at  time.Time
		)
		if err == nil {
			rec, at, err = decodePayload(p)
		}
		if err != nil {
			if len(out) > 0 { // the good records first; the next call fails here
				break
			}
			return nil, r.pos, fmt.Errorf("spool: segment %d at %d: %w", seg.base, pos.Off, err)
		}
		seq := pos.Seq
		pos.Off += int64(fn)
		pos.Seq++
		out = append(out, Entry{Seq: seq, AppendedAt: at, Record: rec, Next: pos})
		b = b[fn:]
	}
	r.pos = pos
	return out, pos, nil
}

// after returns the segment after seg, or nil. s.mu must be held.
func (s *Spool) after(seg *segment) *segment {
	for i, sg := range s.segs {
		if sg == seg && i+1 < len(s.segs) {
			return s.segs[i+1]
		}
	}
	return nil
}
