package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// On disk a segment is a sequence of frames:
//
//	[u32 LE payload length][u32 LE CRC32C of payload][payload]
//
// and a payload is one record:
//
//	[i64 appended-at, unix ns][u16 topic len][topic][u32 key len][key]
//	[u32 value len][value][u16 header count]{[u16 key len][key][u32 value len][value]}
//
// A record's sequence number is not stored: it is the segment's base (in
// its file name) plus the record's index in the segment.
const (
	frameHeader     = 8
	maxPayloadBytes = 64 << 20 // anything larger is corruption
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a frame that fails its checks.
var errCorrupt = errors.New("spool: corrupt frame")

// appendFrame appends the frame of r, appended at t, to b.
// fits says why r cannot be written as a frame (ErrTooLarge), or nil: the
// reader takes a payload of more than maxPayloadBytes for corruption, and
// the lengths of the topic, the header names and the header count are
// written in 16 bits.
func fits(r *event.Record) error {
	n := payloadSize(r)
	switch {
	case n > maxPayloadBytes:
		return fmt.Errorf("%w: a record of %d bytes; the limit is %d", ErrTooLarge, n, maxPayloadBytes)
	case len(r.Topic) > math.MaxUint16:
		return fmt.Errorf("%w: a topic name of %d bytes", ErrTooLarge, len(r.Topic))
	case len(r.Headers) > math.MaxUint16:
		return fmt.Errorf("%w: a record with %d headers", ErrTooLarge, len(r.Headers))
	}
	for _, h := range r.Headers {
		if len(h.Key) > math.MaxUint16 {
			return fmt.Errorf("%w: a header name of %d bytes", ErrTooLarge, len(h.Key))
		}
	}
	return nil
}

// payloadSize is the size of r's frame without its header.
func payloadSize(r *event.Record) int {
	n := 8 + 2 + len(r.Topic) + 4 + len(r.Key) + 4 + len(r.Value) + 2
	for _, h := range r.Headers {
		n += 2 + len(h.Key) + 4 + len(h.Value)
	}
	return n
}

func appendFrame(b []byte, r *event.Record, t time.Time) []byte {
	n := payloadSize(r)
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = binary.LittleEndian.AppendUint32(b, 0) // CRC, below
	p := len(b)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.UnixNano()))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Topic)))
	b = append(b, r.Topic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Key)))
	b = append(b, r.Key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Value)))
	b = append(b, r.Value...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Value)))
		b = append(b, h.Value...)
	}
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[p:], castagnoli))
	return b
}

// nextFrame checks the frame at the start of b and returns its payload and
// total length. It returns errShort when b holds only part of a frame, and
// errCorrupt (wrapped) when the frame is bad.
func nextFrame(b []byte) (payload []byte, n int, err error) {
	if len(b) < frameHeader {
		return nil, 0, errShort
	}
	size := binary.LittleEndian.Uint32(b)
	if size == 0 || size > maxPayloadBytes {
		return nil, 0, fmt.Errorf("%w: payload length %d", errCorrupt, size)
	}
	if len(b) < frameHeader+int(size) {
		return nil, 0, errShort
	}
	payload = b[frameHeader : frameHeader+int(size)]
	if got, want := crc32.Checksum(payload, castagnoli), binary.LittleEndian.Uint32(b[4:]); got != want {
		return nil, 0, fmt.Errorf("%w: CRC32C %08x, want %08x", errCorrupt, got, want)
	}
	return payload, frameHeader + int(size), nil
}

var errShort = errors.New("spool: short frame")

// decodePayload decodes a record payload. The record's slices alias p.
func decodePayload(p []byte) (event.Record, time.Time, error) {
	return decodeShared(p, nil)
}

// shared is what the records decoded by one read share, so that a window
// of records costs a few allocations rather than several per record: the
// topic (most records repeat the last one), the header keys inlet writes
// (constants), and a slab the records' headers are cut from.
type shared struct {
	topic   string
	headers []event.Header // len: used; cap: the slab
	left    int            // records left to decode, this one included: the next slab's size
}

// str returns b as a string, without allocating when it is the last topic
// or a header key inlet writes.
func (sh *shared) str(b []byte, topic bool) string {
	if topic && string(b) == sh.topic { // compared without a conversion
		return sh.topic
	}
	var s string
	switch string(b) {
	case event.HeaderEventID:
		s = event.HeaderEventID
	case event.HeaderEventName:
		s = event.HeaderEventName
	case event.HeaderContentType:
		s = event.HeaderContentType
	case event.HeaderEventCode:
		s = event.HeaderEventCode
	default:
		s = string(b)
	}
	if topic {
		sh.topic = s
	}
	return s
}

// decodeShared is decodePayload, cutting the headers from sh's slab (nil:
// allocating them) and leaving Record.EventID to the caller when sh is not
// nil (Reader.Next sets the ids of a window with one allocation).
func decodeShared(p []byte, sh *shared) (event.Record, time.Time, error) {
	var r event.Record
	d := decoder{b: p}
	at := time.Unix(0, int64(d.u64()))
	if sh != nil {
		r.Topic = sh.str(d.bytes(int(d.u16())), true)
	} else {
		r.Topic = string(d.bytes(int(d.u16())))
	}
	r.Key = d.bytes(int(d.u32()))
	r.Value = d.bytes(int(d.u32()))
	if nh := int(d.u16()); nh > 0 && d.err == nil {
		if sh != nil {
			if cap(sh.headers)-len(sh.headers) < nh {
				// Room for the records left, if they have as many
				// headers as this one (inlet's all have the same).
				sh.headers = make([]event.Header, 0, nh*max(sh.left, 1))
			}
			n := len(sh.headers)
			r.Headers = sh.headers[n : n : n+nh] // its own capacity: an append copies
			sh.headers = sh.headers[:n+nh]
		} else {
			r.Headers = make([]event.Header, 0, nh)
		}
		for i := 0; i < nh && d.err == nil; i++ {
			kb := d.bytes(int(d.u16()))
			var k string
			if sh != nil {
				k = sh.str(kb, false)
			} else {
				k = string(kb)
			}
			v := d.bytes(int(d.u32()))
			r.Headers = append(r.Headers, event.Header{Key: k, Value: v})
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the record", errCorrupt, len(d.b))
	}
	if d.err != nil {
		return event.Record{}, time.Time{}, d.err
	}
	if len(r.Key) == 0 {
		r.Key = nil
	}
	if sh == nil {
		if v, ok := eventID(&r); ok {
			r.EventID = string(v)
		}
	}
	return r, at, nil
}

// eventID returns the value of r's (last) HeaderEventID header.
func eventID(r *event.Record) (id []byte, ok bool) {
	for _, h := range r.Headers {
		if h.Key == event.HeaderEventID {
			id, ok = h.Value, true
		}
	}
	return id, ok
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b) < n {
		d.err = fmt.Errorf("%w: record ends early", errCorrupt)
		return false
	}
	return true
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
