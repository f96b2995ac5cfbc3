package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// crashCopy copies the spool's files into a new directory, as a kill -9
// at this moment leaves them. It holds ackMu, so no cursor write or
// deletion is half done (appends are the caller's, and done); a file the
// deleter removes meanwhile (a <segment>.del) is left out, as it may be.
func crashCopy(t *testing.T, s *Spool) string {
	t.Helper()
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.topicsMu.Lock() // no topics file half written
	defer s.topicsMu.Unlock()
	dst := t.TempDir()
	es, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.cfg.Dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(e.Name(), deletingSuffix) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestNoAcknowledgedRecordLostAcrossCrashes runs a spool through a random
// sequence (fixed seeds) of appends, deliveries of any part of what is
// pending, cursor writes that fail (no space, a failing fsync) and heal,
// appends refused for lack of space (which seal the segment being written),
// tidy passes, clean restarts, and kill -9s (a copy of the files, the run
// going on from the copy), with the cursor still failing at the next start
// at times (Open then fails, and is tried again without the fault). After
// every start the spool must hold, in order, every acknowledged record not
// yet delivered, preceded by nothing but records delivered already
// (duplicates, never a record skipped or out of order), whatever the
// stale cursor and the numbering of the segments left on disk: delivered
// segments are deleted although the cursor is not written, and a spool
// whose segments were all deleted numbers its records from 1 again.
func TestNoAcknowledgedRecordLostAcrossCrashes(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			crashes(t, seed, 160)
		})
	}
}

func crashes(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 27))
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	var (
		fsys    = &faultyFS{}
		history []string // every acknowledged append, in order
		pending []string // those not delivered, as the spool must hold them
		n       int
		resets  int // starts that found no segment (numbering from 1 again)
		trace   []string
	)
	start := func(dir string) (*Spool, *testkit.LogBuffer) {
		t.Helper()
		c := cfg
		c.Dir = dir
		log, logs := testkit.NewLogBuffer()
		s, err := openFS(c, log, NewMetrics(prometheus.NewRegistry()), fsys)
		if err != nil {
			// Only the injected cursor fault may stop a start; the next
			// one, without it, goes by what the failed one left.
			if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) {
				t.Fatalf("open: %v\n%s", err, logs)
			}
			trace = append(trace, "open failed: "+err.Error())
			fsys.mu.Lock()
			fsys.faults = nil
			fsys.mu.Unlock()
			log, logs = testkit.NewLogBuffer()
			if s, err = openFS(c, log, NewMetrics(prometheus.NewRegistry()), fsys); err != nil {
				t.Fatalf("open again without the fault: %v\n%s", err, logs)
			}
		}
		return s, logs
	}
	segsOn := func(dir string) int {
		m, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		return len(m)
	}
	// tidy also runs all the while, as the deleter's timer would run it
	// (every second: too seldom for a test this short), concurrently with
	// the deliveries.
	var stopTidy func()
	tidying := func(s *Spool) {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
					s.tidy()
				}
			}
		}()
		stopTidy = func() { close(stop); <-done }
	}
	s, _ := start(cfg.Dir)
	tidying(s)
	defer func() { stopTidy(); s.Close() }()
	check := func(s *Spool, logs *testkit.LogBuffer, what string) {
		t.Helper()
		got, _ := readAll(t, s, s.Delivered())
		g := ids(got)
		fail := func(why string) {
			t.Fatalf("seed %d, %s: %s\nholds   %v\npending %v\nsteps:\n%s\nlog:\n%s",
				seed, what, why, g, pending, strings.Join(trace, "\n"), logs)
		}
		if len(g) < len(pending) || !slices.Equal(g[len(g)-len(pending):], pending) {
			fail("an acknowledged record not delivered is missing")
		}
		if len(g) > len(history) || !slices.Equal(g, history[len(history)-len(g):]) {
			fail("records out of order, or not the latest")
		}
		if st := s.Stats(); st.Quarantined != 0 || st.Failed != "" || st.Unforwarded != uint64(len(g)) {
			fail(fmt.Sprintf("stats %+v", st))
		}
		pending = g
	}
	setFaults := func(f ...*fault) {
		fsys.mu.Lock()
		fsys.faults = slices.DeleteFunc(f, func(f *fault) bool { return f == nil })
		fsys.mu.Unlock()
	}
	cursorFault := func() *fault {
		if rng.IntN(2) == 0 {
			return &fault{op: "write", suffix: cursorName, n: 1, sticky: true, err: syscall.ENOSPC}
		}
		return &fault{op: "sync", suffix: cursorName, n: 1, sticky: true, err: syscall.EIO}
	}
	var curFault *fault
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 35:
			for range 1 + rng.IntN(3) {
				id := fmt.Sprintf("r%05d", n)
				n++
				err := s.Append(context.Background(), []event.Record{bigRec(id)})
				if err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("step %d: append: %v", step, err)
					}
					trace = append(trace, fmt.Sprintf("%d: append %s refused: no space", step, id))
					continue
				}
				history = append(history, id)
				pending = append(pending, id)
			}
		case r < 60:
			got, _ := readAll(t, s, s.Delivered())
			if !slices.Equal(ids(got), pending) {
				t.Fatalf("step %d: the spool holds %v, want %v", step, ids(got), pending)
			}
			if k := rng.IntN(len(got) + 1); k > 0 {
				if err := s.Ack(got[k-1].Next); err != nil {
					t.Fatalf("step %d: ack: %v", step, err)
				}
				pending = pending[k:]
				trace = append(trace, fmt.Sprintf("%d: delivered through %s", step, got[k-1].Record.EventID))
			}
		case r < 70:
			if curFault == nil {
				curFault = cursorFault()
				trace = append(trace, fmt.Sprintf("%d: the cursor's %s fails", step, curFault.op))
			} else {
				curFault = nil
				trace = append(trace, fmt.Sprintf("%d: the cursor heals", step))
			}
			setFaults(curFault)
		case r < 78:
			// The next segment write is refused for lack of space: the
			// segment being written is sealed.
			fs := []*fault{{op: "write", suffix: ".seg", n: 1, err: syscall.ENOSPC}}
			if curFault != nil {
				fs = append(fs, curFault)
			}
			setFaults(fs...)
		case r < 85:
			s.tidy()
		default:
			clean := rng.IntN(4) == 0
			var dir string
			if clean {
				stopTidy()
				s.Close()
				dir = s.cfg.Dir
			} else {
				dir = crashCopy(t, s)
				stopTidy()
				s.Close()
			}
			trace = append(trace, fmt.Sprintf("%d: %s with %d segments, cursor fault %v", step,
				map[bool]string{true: "restart", false: "kill -9"}[clean], segsOn(dir), curFault != nil))
			var logs *testkit.LogBuffer
			s, logs = start(dir)
			tidying(s)
			fsys.mu.Lock()
			curFault = nil
			for _, f := range fsys.faults {
				if f.suffix == cursorName {
					curFault = f
				}
			}
			fsys.mu.Unlock()
			check(s, logs, fmt.Sprintf("step %d, after the start", step))
			if s.Delivered() == (Pos{Seg: 1, Seq: 1}) && len(history) > 0 {
				resets++
			}
		}
	}
	dir := crashCopy(t, s)
	stopTidy()
	s.Close()
	setFaults()
	s, logs := start(dir)
	tidying(s)
	check(s, logs, "at the end")
	t.Logf("seed %d: %d records, %d starts from (nearly) no segment", seed, len(history), resets)
}

// TestOpenFailsWritingTheCursor: a start whose cursor write fails. Open
// deletes the segments its cursor says were delivered before it rewrites
// the cursor (the room may be needed), so a failed write (or a kill -9
// between the two) leaves the old cursor, its segment perhaps gone. Open
// fails, holding nothing (the next start takes the lock), and the next
// start goes by the old cursor: nothing skipped, and nothing sent again
// but, when a short write spoiled the cursor line being rewritten in the
// slots' layout, what is in the spool (the line is then unreadable). The
// starts that must write the cursor: from a line of the version before,
// and from a cursor whose segment is gone (deleted without it).
func TestOpenFailsWritingTheCursor(t *testing.T) {
	for _, oldLine := range []bool{false, true} {
		for _, f := range []fault{
			{op: "write", suffix: cursorName, n: 1, err: syscall.ENOSPC}, // half the slot written
			{op: "sync", suffix: cursorName, n: 1, err: syscall.EIO},
		} {
			for _, through := range []int{4, 6, 8} { // the end of the first segment, inside the second, its end
				if !oldLine && through%4 != 0 {
					continue // the cursor's segment is there: nothing to rewrite
				}
				t.Run(fmt.Sprintf("old line %v, cursor %s fails, delivered through %d", oldLine, f.op, through), func(t *testing.T) {
					t.Parallel()
					cfg := testConfig(t.TempDir())
					cfg.SegmentBytes = 4 << 10
					s, _, _ := open(t, cfg)
					for i := range 12 {
						if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%02d", i))}); err != nil {
							t.Fatal(err)
						}
					}
					all, _ := readAll(t, s, s.Delivered())
					segs := segFiles(t, cfg.Dir)
					if len(segs) != 3 {
						t.Fatalf("%d segments, want 3 of 4 records", len(segs))
					}
					cur := all[through-1].Next
					s.ackMu.Lock()
					if err := s.saveCursor(cur, true); err != nil {
						t.Fatal(err)
					}
					s.ackMu.Unlock()
					cfg.Dir = crashCopy(t, s) // kill -9 before the delivered segments are deleted
					s.Close()
					if oldLine {
						line := fmt.Sprintf("%d %d %d\n", cur.Seg, cur.Off, cur.Seq)
						if err := os.WriteFile(filepath.Join(cfg.Dir, cursorName), []byte(line), 0o644); err != nil {
							t.Fatal(err)
						}
					} else {
						// Deleted by a process whose cursor write failed.
						for _, seg := range segs[:through/4] {
							if err := os.Remove(filepath.Join(cfg.Dir, filepath.Base(seg))); err != nil {
								t.Fatal(err)
							}
						}
					}
					f := f // a count of its own
					log, logs := testkit.NewLogBuffer()
					if s, err := openFS(cfg, log, NewMetrics(prometheus.NewRegistry()), &faultyFS{faults: []*fault{&f}}); err == nil {
						s.Close()
						t.Fatalf("open with the cursor write failing: no error\n%s", logs)
					} else if !strings.Contains(err.Error(), "writing cursor") {
						t.Fatalf("open with the cursor write failing: %v", err)
					}
					if n := len(segFiles(t, cfg.Dir)); n != 3-through/4 {
						t.Fatalf("after the failed start: %d segments, want %d", n, 3-through/4)
					}
					s2, logs2, _ := open(t, cfg)
					got, _ := readAll(t, s2, s2.Delivered())
					want := ids(all[through:])
					if oldLine && f.op == "write" && logs2.Count("unreadable cursor") == 1 {
						want = ids(all[through/4*4:])
					}
					if !slices.Equal(ids(got), want) {
						t.Fatalf("after the failed start: sends %v, want %v\n%s", ids(got), want, logs2)
					}
					if c := cursorOnDisk(t, cfg.Dir); c != s2.Delivered() {
						t.Fatalf("cursor on disk %v, the spool goes by %v", c, s2.Delivered())
					}
				})
			}
		}
	}
}

// TestDescriptorFloodLosesNothing: while no file can be opened (EMFILE, a
// descriptor flood; ENFILE, the system's table full), the forwarder cannot
// open the segment it is to read. That is not damage: it waits for the
// flood to end, however many tries that takes, and then delivers every
// record; none is given up (quarantined).
func TestDescriptorFloodLosesNothing(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			cfg.SegmentBytes = 4 << 10
			fsys := &faultyFS{}
			s, logs, _ := openOn(t, cfg, fsys)
			var want []string
			for i := range 12 {
				id := fmt.Sprintf("r%03d", i)
				if err := s.Append(context.Background(), []event.Record{bigRec(id)}); err != nil {
					t.Fatal(err)
				}
				want = append(want, id)
			}
			flood := &fault{op: "open", suffix: ".seg", n: 1, sticky: true, err: errno}
			fsys.mu.Lock()
			fsys.faults = []*fault{flood}
			fsys.mu.Unlock()
			k := newFakeKafka()
			fc := forwarderConfig()
			fc.QuarantineAfter = 3
			startWatched(t, s, k, fc)
			testkit.WaitFor(t, 10*time.Second, "the forwarder to try many times", func() bool {
				fsys.mu.Lock()
				defer fsys.mu.Unlock()
				return flood.seen >= 4*fc.QuarantineAfter
			})
			if st := s.Stats(); st.Quarantined != 0 {
				t.Fatalf("records given up during the flood: %+v\n%s", st, logs)
			}
			fsys.mu.Lock()
			fsys.faults = nil
			fsys.mu.Unlock()
			testkit.WaitFor(t, 10*time.Second, "everything delivered", func() bool { return s.Stats().Unforwarded == 0 })
			if !slices.Equal(k.ackedIDs(), want) || s.Stats().Quarantined != 0 {
				t.Fatalf("kafka acknowledged %v, want %v; %+v\n%s", k.ackedIDs(), want, s.Stats(), logs)
			}
		})
	}
}

// TestDescriptorFloodWhileSkippingDamage: a damaged frame is given up
// after the tries it gets, and only it; a descriptor flood that begins as
// the forwarder reads the segment to skip the damage delays that, and does
// not make it give up the rest of the segment unread.
func TestDescriptorFloodWhileSkippingDamage(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	fsys := &faultyFS{}
	s, logs, _ := openOn(t, cfg, fsys)
	for i := range 12 {
		if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	flipFrame(t, filepath.Join(cfg.Dir, segName(1)), 2) // r002
	// The segment is opened once by each of the 3 tries (an epoch each,
	// the first reading r000 and r001 before the damage), then to skip
	// the damage: from then on, no descriptor.
	flood := &fault{op: "open", suffix: segName(1), n: 4, sticky: true, err: syscall.EMFILE}
	fsys.mu.Lock()
	fsys.faults = []*fault{flood}
	fsys.mu.Unlock()
	k := newFakeKafka()
	fc := forwarderConfig()
	fc.QuarantineAfter = 3
	startWatched(t, s, k, fc)
	testkit.WaitFor(t, 10*time.Second, "the flood to last several tries, or records given up", func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return flood.seen >= 10 || s.Stats().Quarantined > 0
	})
	if st := s.Stats(); st.Quarantined != 0 {
		t.Fatalf("records given up during the flood: %+v\n%s", st, logs)
	}
	fsys.mu.Lock()
	fsys.faults = nil
	fsys.mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, "everything delivered", func() bool { return s.Stats().Unforwarded == 0 })
	if want := idRange(0, 12, 2); !slices.Equal(k.ackedIDs(), want) || s.Stats().Quarantined != 1 {
		t.Fatalf("kafka acknowledged %v, want %v; %+v\n%s", k.ackedIDs(), want, s.Stats(), logs)
	}
}

// TestForwarderWhileCursorAndDiskFail runs the forwarder while the cursor
// cannot be written and appends are now and then refused for lack of
// space (each sealing the segment being written, which the forwarder may
// be reading): delivered segments are deleted under it all the same (by
// Ack, and by tidy), and every acknowledged record reaches Kafka, in
// order, none given up. A kill -9 then, with the cursor far behind,
// starts with nothing but records delivered already.
func TestForwarderWhileCursorAndDiskFail(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	fsys := &faultyFS{}
	s, logs, _ := openOn(t, cfg, fsys)
	cursorFault := &fault{op: "write", suffix: cursorName, n: 1, sticky: true, err: syscall.ENOSPC}
	fsys.mu.Lock()
	fsys.faults = []*fault{cursorFault}
	fsys.mu.Unlock()
	k := newFakeKafka()
	startWatched(t, s, k, forwarderConfig())
	var accepted []string
	for i := range 300 {
		if i%7 == 3 {
			fsys.mu.Lock()
			fsys.faults = []*fault{cursorFault, {op: "write", suffix: ".seg", n: 1, err: syscall.ENOSPC}}
			fsys.mu.Unlock()
		}
		id := fmt.Sprintf("r%03d", i)
		err := s.Append(context.Background(), []event.Record{bigRec(id)})
		switch {
		case err == nil:
			accepted = append(accepted, id)
		case !errors.Is(err, syscall.ENOSPC):
			t.Fatalf("append %s: %v", id, err)
		}
	}
	if len(accepted) == 300 {
		t.Fatal("no append was refused")
	}
	testkit.WaitFor(t, 10*time.Second, "everything delivered", func() bool { return s.Stats().Unforwarded == 0 })
	if got := k.ackedIDs(); !slices.Equal(got, accepted) || s.Stats().Quarantined != 0 {
		t.Fatalf("kafka acknowledged %d records, want %d; %+v\n%s", len(got), len(accepted), s.Stats(), logs)
	}
	produced, _ := k.snapshot()
	checkLastProductionsInOrder(t, produced)
	// tidy deletes what was sealed after its delivery.
	testkit.WaitFor(t, 5*time.Second, "the delivered segments deleted", func() bool { return len(segFiles(t, cfg.Dir)) == 1 })
	fsys.mu.Lock()
	tries := cursorFault.seen
	fsys.mu.Unlock()
	if tries < 2 {
		t.Fatalf("the cursor was written %d times", tries)
	}
	crashed := crashCopy(t, s)
	cfg.Dir = crashed
	s2, logs2, _ := open(t, cfg)
	got, _ := readAll(t, s2, s2.Delivered())
	if g := ids(got); len(g) > len(accepted) || !slices.Equal(g, accepted[len(accepted)-len(g):]) || s2.Stats().Quarantined != 0 {
		t.Fatalf("after a kill -9: holds %v, not the last of what was delivered; %+v\n%s", g, s2.Stats(), logs2)
	}
}
