package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestReaderDecodesWindows reads back records of mixed shapes (topics
// changing, no headers, other header keys, no id, no key) in windows of
// many records: each is the record appended, and a record's headers are its
// own (an append to them does not overwrite the next record's).
func TestReaderDecodesWindows(t *testing.T) {
	t.Parallel()
	s, _, _ := open(t, testConfig(t.TempDir()))
	var recs []event.Record
	for i := range 300 {
		r := rec(fmt.Sprintf("id-%03d", i))
		switch i % 7 {
		case 1:
			r.Topic = "other"
		case 2:
			r.Headers, r.EventID = nil, ""
		case 3:
			r.Headers = append(r.Headers, event.Header{Key: "custom", Value: []byte("v")},
				event.Header{Key: event.HeaderEventName, Value: []byte("e")},
				event.Header{Key: event.HeaderEventCode, Value: []byte("12")})
		case 4:
			r.Key = nil
		case 5:
			r.Headers = r.Headers[1:] // no id
			r.EventID = ""
		}
		recs = append(recs, r)
	}
	for i := 0; i < len(recs); i += 50 {
		if err := s.Append(context.Background(), recs[i:i+50]); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := readAll(t, s, s.Delivered())
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d", len(got), len(recs))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || !sameRecord(e.Record, recs[i]) {
			t.Fatalf("record %d (seq %d) is %+v, want %+v", i, e.Seq, e.Record, recs[i])
		}
	}
	for i := range got[:len(got)-1] {
		want := fmt.Sprint(got[i+1].Record.Headers)
		got[i].Record.Headers = append(got[i].Record.Headers, event.Header{Key: "added", Value: []byte("x")})
		if fmt.Sprint(got[i+1].Record.Headers) != want {
			t.Fatalf("a header appended to record %d changed record %d's: %v, want %v", i, i+1, got[i+1].Record.Headers, want)
		}
	}
}

// TestReaderAllocationsPerWindow bounds what reading a window costs: a
// few allocations for the window (its bytes, entries, headers and ids),
// none per record.
func TestReaderAllocationsPerWindow(t *testing.T) {
	s, _, _ := open(t, testConfig(t.TempDir()))
	recs := make([]event.Record, 200)
	for i := range recs {
		recs[i] = rec(fmt.Sprintf("id-%03d", i))
	}
	if err := s.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	from := s.Delivered()
	r := s.NewReader(from)
	defer r.Close()
	n := 0
	allocs := testing.AllocsPerRun(20, func() {
		r.pos = from
		es, _, err := r.Next(context.Background(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		n = len(es)
	})
	if n != len(recs) {
		t.Fatalf("a window of %d records, want %d", n, len(recs))
	}
	if allocs > 6 {
		t.Fatalf("reading a window of %d records made %.0f allocations, want at most 6", n, allocs)
	}
}

// holdingKafka keeps every record it was given, and the bytes they had
// then: it fails every third delivery, whose records a real producer may
// still hold (until its delivery timeout), and checks at each
// acknowledgement that the records still have their bytes.
type holdingKafka struct {
	mu     sync.Mutex
	calls  int
	failed []heldRecord // of deliveries that failed
	// failedDeliveries are the deliveries that failed, whose slices the
	// producer may still hold too.
	failedDeliveries []*holdingDelivery
	changed          []string // ids of records whose bytes changed before they were acknowledged
}

type heldRecord struct {
	r            event.Record
	key, value   []byte
	headerValues [][]byte
}

func hold(r event.Record) heldRecord {
	h := heldRecord{r: r, key: bytes.Clone(r.Key), value: bytes.Clone(r.Value)}
	for _, x := range r.Headers {
		h.headerValues = append(h.headerValues, bytes.Clone(x.Value))
	}
	return h
}

func (h heldRecord) intact() bool {
	if !bytes.Equal(h.r.Key, h.key) || !bytes.Equal(h.r.Value, h.value) {
		return false
	}
	for i, x := range h.r.Headers {
		if !bytes.Equal(x.Value, h.headerValues[i]) {
			return false
		}
	}
	return true
}

type holdingDelivery struct {
	k    *holdingKafka
	fail bool
	recs []heldRecord
	// slice is the slice Produce was given, ids its records' ids then:
	// the forwarder must not reuse it either before Kafka acknowledged it.
	slice []event.Record
	ids   []string
}

// sliceIntact reports whether d's slice still holds the records it was
// given.
func (d *holdingDelivery) sliceIntact() bool {
	for i, r := range d.slice {
		if r.EventID != d.ids[i] {
			return false
		}
	}
	return true
}

func (k *holdingKafka) Produce(recs []event.Record) (Delivery, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	d := &holdingDelivery{k: k, fail: k.calls%3 == 0, slice: recs}
	for _, r := range recs {
		d.recs = append(d.recs, hold(r))
		d.ids = append(d.ids, r.EventID)
	}
	return d, nil
}

func (d *holdingDelivery) Wait(context.Context) error {
	d.k.mu.Lock()
	defer d.k.mu.Unlock()
	if d.fail {
		d.k.failed = append(d.k.failed, d.recs...)
		d.k.failedDeliveries = append(d.k.failedDeliveries, d)
		return errors.New("kafka: not acknowledged")
	}
	if !d.sliceIntact() {
		d.k.changed = append(d.k.changed, "the slice of "+d.ids[0])
	}
	for _, h := range d.recs {
		if !h.intact() {
			d.k.changed = append(d.k.changed, h.r.EventID)
		}
	}
	return nil
}

// TestForwarderReusesOnlyAcknowledgedWindows forwards records in many small
// windows, a third of whose deliveries fail: the forwarder reads new
// windows into the buffers of windows Kafka acknowledged, and never into
// those of a window that failed (or was abandoned behind one), whose
// records a producer may still hold.
func TestForwarderReusesOnlyAcknowledgedWindows(t *testing.T) {
	t.Parallel()
	s, logs, _ := open(t, testConfig(t.TempDir()))
	k := &holdingKafka{}
	fc := forwarderConfig()
	fc.WindowBytes = 4 << 10
	f := StartForwarder(s, k, fc, testkit.Logger(t))
	defer stop(t, f)
	for i := range 60 {
		recs := make([]event.Record, 10)
		for j := range recs {
			recs[j] = bigRec(fmt.Sprintf("r%03d-%d", i, j))
			recs[j].EventID = fmt.Sprintf("r%03d-%d", i, j)
		}
		if err := s.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "everything delivered", func() bool { return s.Stats().Unforwarded == 0 })
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.changed) > 0 {
		t.Fatalf("records changed before kafka acknowledged them: %v\n%s", k.changed, logs)
	}
	if len(k.failed) == 0 {
		t.Fatal("no delivery failed: the test tests nothing")
	}
	for _, h := range k.failed {
		if !h.intact() {
			t.Fatalf("record %s of a failed delivery was overwritten: the buffer of a window kafka did not acknowledge was reused", h.r.EventID)
		}
	}
	for _, d := range k.failedDeliveries {
		if !d.sliceIntact() {
			t.Fatalf("the records given to a failed delivery (from %s) were replaced: the memory of a window kafka did not acknowledge was reused", d.ids[0])
		}
	}
}

// TestReaderWindowBuffers: a window is read into a buffer sized to the
// power of two that holds it, at least 64 KiB (not a fixed 256 KiB whatever
// the window), and a recycled buffer is read into again by a window it
// holds, with its entries and headers in the recycled window's; a window
// too large to keep gets a buffer of its size, which is not kept.
func TestReaderWindowBuffers(t *testing.T) {
	t.Parallel()
	s, _, _ := open(t, testConfig(t.TempDir()))
	// appendKiB appends about kib KiB of records of 1 KiB.
	appendKiB := func(kib int) {
		t.Helper()
		recs := make([]event.Record, kib)
		for i := range recs {
			recs[i] = bigRec(fmt.Sprintf("r%d-%d", kib, i))
		}
		if err := s.Append(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
	r := s.NewReader(s.Delivered())
	defer r.Close()
	r.free = make(chan *windowMem, 4)
	// next reads the window appended last (wholly), checks its records,
	// and returns its memory.
	next := func(want int) *windowMem {
		t.Helper()
		es, _, err := r.Next(context.Background(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != want {
			t.Fatalf("a window of %d records, want %d", len(es), want)
		}
		for i, e := range es {
			id := fmt.Sprintf("r%d-%d", want, i)
			if e.Record.EventID != id || len(e.Record.Headers) != 2 || string(e.Record.Headers[0].Value) != id {
				t.Fatalf("record %d: id %q, headers %q, want %s", i, e.Record.EventID, e.Record.Headers, id)
			}
		}
		return r.last
	}

	appendKiB(4)
	if m := next(4); cap(m.buf) != 64<<10 {
		t.Fatalf("a window of %d bytes was read into a buffer of %d KiB, want 64 KiB", len(m.buf), cap(m.buf)>>10)
	}
	recycle(r.free, r.last)
	appendKiB(100)
	m100 := next(100)
	if cap(m100.buf) != 128<<10 {
		t.Fatalf("a window of %d bytes (the recycled 64 KiB buffer too small) was read into %d KiB, want 128 KiB", len(m100.buf), cap(m100.buf)>>10)
	}
	b100, e100, h100 := &m100.buf[:1][0], &m100.ents[:1][0], &m100.hdrs[:1][0]
	recycle(r.free, m100)
	appendKiB(90)
	if m := next(90); &m.buf[:1][0] != b100 || &m.ents[:1][0] != e100 || &m.hdrs[:1][0] != h100 {
		t.Fatal("a window of 90 KiB was not read into the recycled 128 KiB window's buffer, entries and headers")
	}
	recycle(r.free, r.last)
	<-r.free // empty: the next window finds no recycled buffer
	appendKiB(600)
	big := next(600)
	if cap(big.buf) != len(big.buf) {
		t.Fatalf("a window of %d bytes was read into a buffer of %d bytes, want exactly its size", len(big.buf), cap(big.buf))
	}
	recycle(r.free, big)
	if m := <-r.free; m.buf != nil {
		t.Fatalf("a buffer of %d KiB was kept for reuse, want none over 512 KiB", cap(m.buf)>>10)
	}
}
