package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// deleteLog is the OS's file system, recording what happens to the files
// being deleted (<segment>.del): each truncation's new size, then the
// removal.
type deleteLog struct {
	osFS
	mu  sync.Mutex
	ops map[string][]string
}

func (d *deleteLog) note(name, op string) {
	if !strings.HasSuffix(name, deletingSuffix) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ops == nil {
		d.ops = map[string][]string{}
	}
	d.ops[filepath.Base(name)] = append(d.ops[filepath.Base(name)], op)
}

func (d *deleteLog) of(name string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ops[name]...)
}

func (d *deleteLog) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := d.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &deleteLogFile{File: f, d: d, name: name}, nil
}

func (d *deleteLog) Remove(name string) error {
	err := d.osFS.Remove(name)
	if err == nil {
		d.note(name, "remove")
	}
	return err
}

type deleteLogFile struct {
	File
	d    *deleteLog
	name string
}

func (f *deleteLogFile) Truncate(size int64) error {
	err := f.File.Truncate(size)
	if err == nil {
		f.d.note(f.name, fmt.Sprint(size))
	}
	return err
}

// hugeRec is a record of about 256 KiB.
func hugeRec(id string) event.Record {
	r := rec(id)
	r.Value = append([]byte(`{"id":"`+id+`","pad":"`), bytes.Repeat([]byte("x"), 256<<10)...)
	r.Value = append(r.Value, `"}`...)
	return r
}

// TestDeliveredSegmentDeletedInSteps: a delivered segment leaves the
// spool's segments at once, then its file is freed deleteChunk bytes at a
// time and removed, never in one unlink of the whole (which can hold a
// GOMAXPROCS=1 server's only P for as long as the file system takes to
// free it).
func TestDeliveredSegmentDeletedInSteps(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 3 << 20
	cfg.MaxBytes = 64 << 20
	d := &deleteLog{}
	s, _, _ := openOn(t, cfg, d)
	for i := range 16 { // 4 MiB: two segments
		if err := s.Append(context.Background(), []event.Record{hugeRec(fmt.Sprintf("r%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	segs := segFiles(t, cfg.Dir)
	if len(segs) != 2 {
		t.Fatalf("%d segments, want 2", len(segs))
	}
	fi, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	var second uint64
	fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &second)
	start := time.Now()
	if err := s.Ack(Pos{Seg: second, Seq: second}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*deletePause*time.Duration(fi.Size()/deleteChunk) {
		t.Errorf("Ack took %v: it waited for the deletion", took)
	}
	if got := segFiles(t, cfg.Dir); len(got) != 1 || got[0] != segs[1] || s.Stats().Segments != 1 {
		t.Fatalf("after the ack: %v on disk, %d in stats; want only %s", got, s.Stats().Segments, segs[1])
	}
	name := filepath.Base(segs[0]) + deletingSuffix
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(strings.Join(d.of(name), " "), "remove") {
		if time.Now().After(deadline) {
			t.Fatalf("%s not removed within 10 s: %v", name, d.of(name))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ops := d.of(name)
	// Sizes down to 0 in steps of at most deleteChunk, then the removal.
	want := []string{}
	for size := fi.Size(); size > 0; {
		size = max(0, (size-1)/deleteChunk*deleteChunk)
		want = append(want, fmt.Sprint(size))
	}
	want = append(want, "remove")
	if len(want) < 4 {
		t.Fatalf("a segment of %d bytes: %v; the test wants several steps", fi.Size(), want)
	}
	if strings.Join(ops, " ") != strings.Join(want, " ") {
		t.Fatalf("deleting %s (%d bytes): %v, want %v", name, fi.Size(), ops, want)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, name)); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", name, err)
	}
	// The records after the ack are all there.
	got, _ := readAll(t, s, s.Delivered())
	if len(got) == 0 || got[len(got)-1].Record.EventID != "r15" {
		t.Fatalf("after the deletion: %v", ids(got))
	}
}

// TestCloseDuringDeletion: Close does not wait for the steps; it removes
// what is being deleted at once, and leaves no .del file behind.
func TestCloseDuringDeletion(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 3 << 20
	cfg.MaxBytes = 64 << 20
	s, _, _ := open(t, cfg)
	for i := range 16 {
		if err := s.Append(context.Background(), []event.Record{hugeRec(fmt.Sprintf("r%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	segs := segFiles(t, cfg.Dir)
	var second uint64
	fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &second)
	if err := s.Ack(Pos{Seg: second, Seq: second}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(cfg.Dir, "*"+deletingSuffix)); len(m) != 0 {
		t.Fatalf("after Close: %v", m)
	}
	if got := segFiles(t, cfg.Dir); len(got) != 1 {
		t.Fatalf("after Close: %v, want one segment", got)
	}
}

// TestOpenRemovesSegmentsBeingDeleted: a process that stopped while it
// deleted a delivered segment left <segment>.del, cut anywhere: the next
// Open removes it, without reading it as damage (no quarantine, no
// .corrupt copy), and keeps every record.
func TestOpenRemovesSegmentsBeingDeleted(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	s, _, _ := open(t, cfg)
	for i := range 5 {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// A delivered segment cut in the middle of a frame.
	left := filepath.Join(cfg.Dir, segName(1)+deletingSuffix)
	if err := os.WriteFile(left, bytes.Repeat([]byte{0xa5}, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, logs, _ := open(t, cfg)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("%s after Open: %v", left, err)
	}
	if st := s2.Stats(); st.Quarantined != 0 || st.Unforwarded != 5 {
		t.Fatalf("after Open: %+v, want 5 records and none quarantined", st)
	}
	if m, _ := filepath.Glob(filepath.Join(cfg.Dir, "*.corrupt")); len(m) != 0 || strings.Contains(logs.String(), "corrupt") {
		t.Fatalf("after Open: %v; log:\n%s", m, logs.String())
	}
	got, _ := readAll(t, s2, s2.Delivered())
	if want := []string{"r0", "r1", "r2", "r3", "r4"}; strings.Join(ids(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after Open: %v, want %v", ids(got), want)
	}
}

// gatedDeletes is the OS's file system on which the deleter's truncations
// of a <segment>.del wait until open is closed.
type gatedDeletes struct {
	osFS
	open chan struct{}
}

func (g *gatedDeletes) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := g.osFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, deletingSuffix) {
		return f, err
	}
	return &gatedFile{File: f, open: g.open}, nil
}

type gatedFile struct {
	File
	open chan struct{}
}

func (f *gatedFile) Truncate(size int64) error {
	<-f.open
	return f.File.Truncate(size)
}

// TestSegmentsBeingDeletedCountTowardsTheLimit: a delivered segment's
// bytes stay in the spool's count (Stats, and so inlet_spool_bytes) and
// against MaxBytes until the deleter has freed them, so the spool never
// holds more than MaxBytes on disk; and with less than a segment of room
// left, the deleter does not pause between its steps.
func TestSegmentsBeingDeletedCountTowardsTheLimit(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 3 << 20
	cfg.MaxBytes = 7 << 20
	g := &gatedDeletes{open: make(chan struct{})}
	s, _, _ := openOn(t, cfg, g)
	s.deletePause = time.Hour // a pause would stop the test
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(g.open) }) }
	t.Cleanup(openGate) // before Close, which waits for the deleter
	var n int
	var err error
	for n = 0; n < 100; n++ {
		if err = s.Append(context.Background(), []event.Record{hugeRec(fmt.Sprintf("r%02d", n))}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("after %d appends: %v, want ErrFull", n, err)
	}
	full := s.Stats().Bytes
	segs := segFiles(t, cfg.Dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments, want at least 2", len(segs))
	}
	var second uint64
	fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &second)
	if err := s.Ack(Pos{Seg: second, Seq: second}); err != nil {
		t.Fatal(err)
	}
	// The first segment is now <segment>.del, its deletion held at the gate.
	if st := s.Stats(); st.Bytes != full || st.Segments != len(segs)-1 {
		t.Fatalf("being deleted: %+v, want %d bytes (all still on disk) in %d segments", st, full, len(segs)-1)
	}
	if err := s.Append(context.Background(), []event.Record{hugeRec("more")}); !errors.Is(err, ErrFull) {
		t.Fatalf("append while the delivered segment is still on disk: %v, want ErrFull", err)
	}
	openGate()
	if err := appendOnceRoom(s, hugeRec("more")); err != nil {
		t.Fatalf("after the deletion: %v (stats %+v); the deleter paused, or the room was not released", err, s.Stats())
	}
	// The append may find room before the deleter's last step (the
	// count is released as the truncations free it, and is 0 by the time
	// the file is removed): wait for the removal.
	testkit.WaitFor(t, 10*time.Second, "the delivered segment removed", func() bool {
		m, _ := filepath.Glob(filepath.Join(cfg.Dir, "*"+deletingSuffix))
		return len(m) == 0
	})
	var onDisk int64
	for _, p := range segFiles(t, cfg.Dir) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		onDisk += fi.Size()
	}
	if got := s.Stats().Bytes; got != onDisk {
		t.Fatalf("stats say %d bytes, the segments on disk hold %d", got, onDisk)
	}
}
