package spool

import (
	"context"
	"encoding/binary"
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
	// topic is the last record's, kept so that a window of one topic
	// shares its string.
	topic string
	// free holds buffers of windows Kafka acknowledged whole, for reuse
	// (see recycle); nil: every window gets a fresh one.
	free chan []byte
	last []byte // the buffer the entries of the last Next alias
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
	n := min(avail, int64(maxBytes))
	if n < frameHeader {
		n = frameHeader
	}
	// A buffer no window in flight uses: the producer may still hold the
	// records of the last windows (a cancelled wait leaves them in its
	// buffer), so only those Kafka acknowledged are reused.
	b := r.buffer(int(n))
	b0 := b
	if _, err := r.f.ReadAt(b, r.pos.Off); err != nil {
		return nil, r.pos, fmt.Errorf("spool: reading segment %d at %d: %w", seg.base, r.pos.Off, err)
	}
	// First the whole frames that verify, so that the entries take one
	// allocation.
	frames, bad := 0, error(nil)
	for rest := b; len(rest) > 0; {
		_, fn, err := nextFrame(rest)
		if err == errShort && frames == 0 {
			if len(rest) < frameHeader {
				return nil, r.pos, fmt.Errorf("spool: segment %d: torn frame header at %d", seg.base, r.pos.Off)
			}
			// One frame larger than maxBytes: read it whole.
			size := int64(frameHeader) + int64(binary.LittleEndian.Uint32(rest))
			if size > avail {
				return nil, r.pos, fmt.Errorf("spool: segment %d: frame at %d runs past the written end", seg.base, r.pos.Off)
			}
			recycle(r.free, b0)
			b = make([]byte, size)
			b0 = b
			if _, err := r.f.ReadAt(b, r.pos.Off); err != nil {
				return nil, r.pos, fmt.Errorf("spool: reading segment %d at %d: %w", seg.base, r.pos.Off, err)
			}
			rest = b
			continue
		}
		if err != nil {
			if err != errShort {
				bad = err
			}
			break
		}
		frames++
		rest = rest[fn:]
	}
	if frames == 0 {
		return nil, r.pos, fmt.Errorf("spool: segment %d at %d: %w", seg.base, r.pos.Off, bad)
	}
	out := make([]Entry, 0, frames)
	sh := shared{topic: r.topic}
	var idBuf []byte
	pos := r.pos
	for i := range frames {
		size := int(binary.LittleEndian.Uint32(b)) // verified above
		p, fn := b[frameHeader:frameHeader+size], frameHeader+size
		sh.left = frames - i
		rec, at, err := decodeShared(p, &sh)
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
	// The ids: one string for the window, cut per record.
	for i := range out {
		id, _ := eventID(&out[i].Record)
		if idBuf == nil {
			idBuf = make([]byte, 0, len(out)*len(id))
		}
		idBuf = append(idBuf, id...)
	}
	all, k := string(idBuf), 0
	for i := range out {
		id, _ := eventID(&out[i].Record)
		out[i].Record.EventID = all[k : k+len(id)]
		k += len(id)
	}
	r.topic = sh.topic
	r.pos = pos
	r.last = b0
	return out, pos, nil
}

// buffer returns n bytes for a window: a recycled buffer if one is large
// enough, else a new one, with room for the next windows to reuse when
// the reader recycles.
func (r *Reader) buffer(n int) []byte {
	if r.free == nil {
		return make([]byte, n)
	}
	select {
	case b := <-r.free:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return make([]byte, n, windowBufferCap(n))
}

// windowBufferCap is the capacity of a new buffer for a window of n bytes:
// the power of two of at least minWindowBuffer that holds it, so that the
// recycled buffers settle on the size of the gateway's windows (a recycled
// buffer too small for a window is left to the GC); exactly n for a window
// too large to be recycled.
func windowBufferCap(n int) int {
	if n > maxRecycled {
		return n
	}
	c := minWindowBuffer
	for c < n {
		c <<= 1
	}
	return c
}

// minWindowBuffer is the smallest buffer a window is read into. Under load
// the forwarder reads what the group commits appended since its last read
// (in make bench a group commit is about 50 requests, 30 KiB): at 256 KiB
// the buffers in flight and free (Windows of each) held 2-3 MiB of the
// heap of inlet serve.
const minWindowBuffer = 64 << 10

// recycle hands back to free the buffer of a window whose records nobody
// holds any more (Kafka acknowledged every one of them), for the reader to
// read a next window into. It is safe to call from any goroutine, and
// drops b when free is full or b is large.
func recycle(free chan<- []byte, b []byte) {
	if cap(b) > maxRecycled {
		return // a window of a backlog: do not hold on to it
	}
	select {
	case free <- b:
	default:
	}
}

// maxRecycled bounds the buffers a reader keeps for reuse: one larger (a
// WindowBytes above it, or a frame larger than the window) is not held on
// to.
const maxRecycled = 512 << 10

// after returns the segment after seg, or nil. s.mu must be held.
func (s *Spool) after(seg *segment) *segment {
	for i, sg := range s.segs {
		if sg == seg && i+1 < len(s.segs) {
			return s.segs[i+1]
		}
	}
	return nil
}
