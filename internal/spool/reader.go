package spool

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
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
	// free holds the memory of windows Kafka acknowledged whole, for
	// reuse (see recycle); nil: every window gets fresh memory.
	free chan *windowMem
	last *windowMem // what the entries of the last Next live in
}

// windowMem is the memory one window's records live in: the bytes read
// from the spool, the entries and headers decoded from them, and the
// records handed to the producer. Once Kafka acknowledged every record of
// the window, nothing holds any of it, and the next window is read into it
// (recycle): no allocation per record on the forwarder's path.
// Gain: 14.5 → 11.4 µs of CPU and 6.5 → 0.2 KB per request (BenchmarkSpoolPath -cpu 1, 2026-12-05).
type windowMem struct {
	buf  []byte
	ents []Entry
	hdrs []event.Header // the headers' slab
	recs []event.Record // for the producer: ents' records (see Forwarder.read)
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
	// Memory no window in flight uses: the producer may still hold the
	// records of the last windows (a cancelled wait leaves them in its
	// buffer), so only those Kafka acknowledged are reused.
	m := r.mem(int(n))
	b := m.buf
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
			b = make([]byte, size) // not kept: see recycle
			m.buf = b
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
	out := m.ents[:0]
	if cap(out) < frames {
		out = make([]Entry, 0, frames)
	}
	sh := shared{topic: r.topic, headers: m.hdrs[:0]}
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
	// The ids: one string for the window, cut per record. (Strings are
	// not reused: whoever took an id may keep it.)
	var ids strings.Builder
	nh := 0
	for i := range out {
		id, _ := eventID(&out[i].Record)
		if i == 0 {
			ids.Grow(len(out) * len(id))
		}
		ids.Write(id)
		nh += len(out[i].Record.Headers)
	}
	all, k := ids.String(), 0
	for i := range out {
		id, _ := eventID(&out[i].Record)
		out[i].Record.EventID = all[k : k+len(id)]
		k += len(id)
	}
	// The next window into this memory starts with a slab for as many
	// headers as this one had: the last slab cut if it holds them (it is
	// this window's alone), else a new one.
	m.ents, m.hdrs = out, sh.headers[:0]
	if cap(m.hdrs) < nh {
		m.hdrs = make([]event.Header, 0, nh)
	}
	r.topic = sh.topic
	r.pos = pos
	r.last = m
	return out, pos, nil
}

// mem returns the memory for a window of n bytes: a recycled one if there
// is one, with a buffer of at least n bytes.
func (r *Reader) mem(n int) *windowMem {
	var m *windowMem
	if r.free != nil {
		select {
		case m = <-r.free:
		default:
		}
	}
	if m == nil {
		m = new(windowMem)
	}
	if cap(m.buf) >= n {
		m.buf = m.buf[:n]
	} else {
		m.buf = r.buffer(n)
	}
	return m
}

// buffer returns a new buffer of n bytes for a window, with room for the
// next windows to reuse when the reader recycles.
func (r *Reader) buffer(n int) []byte {
	if r.free == nil {
		return make([]byte, n)
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

// recycle hands back to free the memory of a window whose records nobody
// holds any more (Kafka acknowledged every one of them), for the reader to
// read a next window into. It is safe to call from any goroutine; it drops
// m when free is full, and what of m is large.
func recycle(free chan<- *windowMem, m *windowMem) {
	if cap(m.buf) > maxRecycled {
		m.buf = nil // a window of a backlog: do not hold on to it
	}
	if cap(m.ents) > maxRecycledRecords || cap(m.recs) > maxRecycledRecords || cap(m.hdrs) > 4*maxRecycledRecords {
		// Many small records: their bytes are in the buffer, but their
		// entries would hold several times as much.
		m.ents, m.recs, m.hdrs = nil, nil, nil
	} else {
		// Nothing of the old window is kept alive by what the next one
		// does not overwrite.
		clear(m.ents[:cap(m.ents)])
		clear(m.recs[:cap(m.recs)])
		clear(m.hdrs[:cap(m.hdrs)])
	}
	select {
	case free <- m:
	default:
	}
}

// maxRecycled bounds the buffers a reader keeps for reuse: one larger (a
// WindowBytes above it, or a frame larger than the window) is not held on
// to. maxRecycledRecords bounds the entries and records kept (in make
// bench a window is about 250 records).
const (
	maxRecycled        = 512 << 10
	maxRecycledRecords = 2048
)

// after returns the segment after seg, or nil. s.mu must be held.
func (s *Spool) after(seg *segment) *segment {
	for i, sg := range s.segs {
		if sg == seg && i+1 < len(s.segs) {
			return s.segs[i+1]
		}
	}
	return nil
}
