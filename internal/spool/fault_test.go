package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// faultyFS is the OS's file system with chosen calls failing, like
// Prometheus tsdb/wlog's faultySegmentFile.
type faultyFS struct {
	osFS
	mu     sync.Mutex
	faults []*fault
}

// fault fails the n-th call (from 1) of op on a file whose name ends in
// suffix, and, if sticky, every such call after it. A failed write writes
// half of its bytes first, as a short write does.
type fault struct {
	op     string // create, open (an existing file), write, sync, truncate, rename (the new name), remove, syncdir
	suffix string
	n      int
	sticky bool
	err    error
	seen   int
}

func (fs *faultyFS) check(op, name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.faults {
		if f.op != op || !strings.HasSuffix(name, f.suffix) {
			continue
		}
		f.seen++
		if f.seen == f.n || f.sticky && f.seen > f.n {
			return &os.PathError{Op: op, Path: name, Err: f.err}
		}
	}
	return nil
}

func (fs *faultyFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 {
		if err := fs.check("create", name); err != nil {
			return nil, err
		}
	} else if err := fs.check("open", name); err != nil {
		return nil, err
	}
	f, err := fs.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: f, fs: fs, name: name}, nil
}

func (fs *faultyFS) Rename(oldpath, newpath string) error {
	if err := fs.check("rename", newpath); err != nil {
		return err
	}
	return fs.osFS.Rename(oldpath, newpath)
}

func (fs *faultyFS) Remove(name string) error {
	if err := fs.check("remove", name); err != nil {
		return err
	}
	return fs.osFS.Remove(name)
}

func (fs *faultyFS) SyncDir(dir string) error {
	if err := fs.check("syncdir", dir); err != nil {
		return err
	}
	return fs.osFS.SyncDir(dir)
}

type faultyFile struct {
	File
	fs   *faultyFS
	name string
}

func (f *faultyFile) Write(p []byte) (int, error) {
	if err := f.fs.check("write", f.name); err != nil {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, err
	}
	return f.File.Write(p)
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check("write", f.name); err != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.File.WriteAt(p, off)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.check("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultyFile) Truncate(size int64) error {
	if err := f.fs.check("truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// bigRec is a record of about 1 KiB: four fill a 4 KiB segment.
func bigRec(id string) event.Record {
	r := rec(id)
	r.Value = append([]byte(`{"id":"`+id+`","pad":"`), bytes.Repeat([]byte("x"), 1000)...)
	r.Value = append(r.Value, `"}`...)
	return r
}

// TestAppendFaults fails one file operation of the spool and checks what
// the requests are told, whether the spool goes on, and that a reopened
// spool holds every acknowledged record, whole.
func TestAppendFaults(t *testing.T) {
	const appends = 12
	cases := []struct {
		name   string
		faults []*fault
		first  int   // the first append that fails; -1: one the test does not name
		is     error // the failure wraps it, besides ErrWrite
		// forGood: every append after the first failure fails too, and
		// Stats().Failed holds failed.
		forGood bool
		failed  string
		// unacked: the failed append's record may survive a reopen (it was
		// written, its fsync failed); cut: the reopen cuts a torn tail.
		unacked, cut bool
	}{
		{name: "the third write fails, short", first: 2, is: syscall.ENOSPC,
			faults: []*fault{{op: "write", suffix: ".seg", n: 3, err: syscall.ENOSPC}}},
		{name: "a write fails, and so does cutting it", first: 2, is: syscall.EIO, forGood: true, failed: "truncating", cut: true,
			faults: []*fault{{op: "write", suffix: ".seg", n: 3, err: syscall.ENOSPC}, {op: "truncate", suffix: ".seg", n: 1, err: syscall.EIO}}},
		{name: "an fsync fails", first: 2, is: syscall.EIO, forGood: true, failed: "fsync", unacked: true,
			faults: []*fault{{op: "sync", suffix: ".seg", n: 3, err: syscall.EIO}}},
		// A failed roll is that request's alone: the next append rolls.
		{name: "creating the next segment fails: no space", first: -1, is: syscall.ENOSPC,
			faults: []*fault{{op: "create", suffix: ".seg", n: 2, err: syscall.ENOSPC}}},
		{name: "creating the next segment fails: too many open files", first: -1, is: syscall.EMFILE,
			faults: []*fault{{op: "create", suffix: ".seg", n: 2, err: syscall.EMFILE}}},
		{name: "syncing the directory after a roll fails", first: -1, is: syscall.EIO,
			faults: []*fault{{op: "syncdir", n: 2, err: syscall.EIO}}},
		{name: "the fsync before a roll fails", first: -1, is: syscall.EIO, forGood: true, failed: "fsync", unacked: true,
			faults: []*fault{{op: "sync", suffix: ".seg", n: 5, err: syscall.EIO}}}, // the fifth append rolls
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			cfg.SegmentBytes = 4 << 10
			s, logs, _ := openOn(t, cfg, &faultyFS{faults: tc.faults})
			var (
				acked    []string
				failedAt = -1
			)
			for i := range appends {
				id := fmt.Sprintf("r%02d", i)
				err := s.Append(context.Background(), []event.Record{bigRec(id)})
				switch {
				case err == nil:
					if failedAt >= 0 && tc.forGood {
						t.Fatalf("append %d succeeded after the spool failed for good", i)
					}
					acked = append(acked, id)
				case failedAt < 0:
					failedAt = i
					if !errors.Is(err, ErrWrite) || !errors.Is(err, tc.is) {
						t.Fatalf("append %d: %v, want ErrWrite wrapping %v", i, err, tc.is)
					}
				case !tc.forGood:
					t.Fatalf("append %d: %v after one failure", i, err)
				case !errors.Is(err, ErrWrite):
					t.Fatalf("append %d after the spool failed: %v, want ErrWrite", i, err)
				}
			}
			if failedAt < 0 || tc.first >= 0 && failedAt != tc.first {
				t.Fatalf("first failed append %d, want %d", failedAt, tc.first)
			}
			if st := s.Stats(); tc.forGood && !strings.Contains(st.Failed, tc.failed) || !tc.forGood && st.Failed != "" {
				t.Fatalf("stats %+v, want failed with %q", st, tc.failed)
			}
			if got, _ := readAll(t, s, s.Delivered()); !slices.Equal(ids(got), acked) {
				t.Fatalf("readable %v, acknowledged %v", ids(got), acked)
			}
			s.Close()

			s2, logs2, _ := open(t, cfg)
			got, _ := readAll(t, s2, s2.Delivered())
			want := acked
			if tc.unacked && len(got) == len(acked)+1 {
				want = slices.Insert(slices.Clone(acked), failedAt, fmt.Sprintf("r%02d", failedAt))
			}
			if !slices.Equal(ids(got), want) {
				t.Fatalf("after reopening: %v, acknowledged %v", ids(got), acked)
			}
			if cut := strings.Contains(logs2.String(), "cutting it at the last good record"); cut != tc.cut {
				t.Fatalf("reopening cut a torn tail: %v, want %v\n%s", cut, tc.cut, logs2)
			}
			if err := s2.Append(context.Background(), []event.Record{bigRec("after")}); err != nil {
				t.Fatalf("after reopening: %v", err)
			}
			if n := logs.Count("level=ERROR"); n > 2 {
				t.Fatalf("%d error lines for one failure:\n%s", n, logs)
			}
		})
	}
}

// TestAckFaults fails a file operation of recording a delivery: the
// delivered position on disk never passes what was delivered, so a reopened
// spool sends records again but never skips one.
func TestAckFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault *fault
	}{
		// The third cursor write: Open writes the first (a new spool has
		// none), the first Ack the second. Sticky: the cursor Close writes
		// fails too. The deletion does not wait on it.
		{"the cursor write fails", &fault{op: "write", suffix: "cursor", n: 3, sticky: true, err: syscall.ENOSPC}},
		{"the cursor fsync fails", &fault{op: "sync", suffix: "cursor", n: 3, sticky: true, err: syscall.EIO}},
		// Ack renames a delivered segment to <segment>.del at once (the
		// deleter frees it later).
		{"deleting a delivered segment fails once", &fault{op: "rename", suffix: ".seg" + deletingSuffix, n: 1, err: syscall.EIO}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			cfg.SegmentBytes = 4 << 10
			s, _, _ := openOn(t, cfg, &faultyFS{faults: []*fault{tc.fault}})
			for i := range 12 {
				if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%02d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			all, _ := readAll(t, s, s.Delivered())
			segs := segFiles(t, cfg.Dir)
			if len(segs) < 3 {
				t.Fatalf("%d segments, want 3 or more", len(segs))
			}
			// Deliver the first segment, then the second: each Ack deletes
			// one, so each writes the cursor durably.
			var second, third uint64
			fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &second)
			fmt.Sscanf(filepath.Base(segs[2]), "%020d.seg", &third)
			first := Pos{Seg: second, Seq: second}
			err := s.Ack(first)
			if deleting := tc.fault.suffix == ".seg"+deletingSuffix; !deleting && err != nil || deleting && !errors.Is(err, syscall.EIO) {
				t.Fatalf("first ack: %v", err)
			}
			// A failed cursor write does not fail the ack, nor keep the
			// delivered segments: the first ack's deletion, if it failed,
			// is done by the second.
			if err := s.Ack(Pos{Seg: third, Seq: third}); err != nil {
				t.Fatalf("second ack: %v", err)
			}
			if len(segFiles(t, cfg.Dir)) != len(segs)-2 || s.Stats().Segments != len(segs)-2 {
				t.Fatalf("second ack: %d segments on disk, %d in stats, want %d",
					len(segFiles(t, cfg.Dir)), s.Stats().Segments, len(segs)-2)
			}
			if err := s.Close(); err != nil { // its cursor write fails too: logged, not an error
				t.Fatalf("close: %v", err)
			}

			// The cursor on disk is the first ack's, or the second's; the
			// first ack's segment is gone either way, so the spool starts
			// at the third: nothing delivered twice, nothing skipped.
			s2, _, _ := open(t, cfg)
			got, _ := readAll(t, s2, s2.Delivered())
			if want := ids(all[third-1:]); !slices.Equal(ids(got), want) {
				t.Fatalf("after reopening: %v, want %v", ids(got), want)
			}
		})
	}
}
