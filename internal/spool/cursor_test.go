package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// cursorOnDisk returns the cursor in dir's cursor file, failing the test
// if it has none that is valid.
func cursorOnDisk(tb testing.TB, dir string) Pos {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, cursorName))
	if err != nil {
		tb.Fatal(err)
	}
	p, _, _, ok := parseSlots(b)
	if !ok {
		tb.Fatalf("no valid cursor on disk: %q", b)
	}
	return p
}

// TestTornCursorWrite: a crash while the cursor is written leaves the
// slot being written torn, or damaged; the next start goes by the cursor
// before it (records sent again, none skipped), and with no valid cursor
// at all, from the start of the spool.
func TestTornCursorWrite(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, b []byte, newest int) []byte // the cursor file's bytes; newest: the slot of the last write
		from   int                                             // the first record the next start sends
		warn   bool                                            // "unreadable cursor"
	}{
		{"the last write half done", nil, 10, false}, // a write fault, below
		{"the newest slot zeroed", func(t *testing.T, b []byte, newest int) []byte {
			clear(b[newest*cursorSlot : (newest+1)*cursorSlot])
			return b
		}, 10, false},
		{"a bit flipped in the newest slot's position", func(t *testing.T, b []byte, newest int) []byte {
			b[newest*cursorSlot+20] ^= 0x04
			return b
		}, 10, false},
		{"the file cut inside the second slot", func(t *testing.T, b []byte, newest int) []byte { return b[:cursorSlot+7] }, 0, true},
		{"both slots damaged", func(t *testing.T, b []byte, newest int) []byte {
			b[3] ^= 1
			b[cursorSlot+30] ^= 1
			return b
		}, 0, true},
		{"an old cursor line cut short", func(t *testing.T, b []byte, newest int) []byte { return []byte("1 19") }, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := &faultyFS{}
			cfg := testConfig(t.TempDir())
			s, _, _ := openOn(t, cfg, fsys)
			for i := range 40 {
				if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%02d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			all, _ := readAll(t, s, s.Delivered())
			// Delivered up to record 10, then 20; each cursor written
			// durably (Ack writes one at most every 50 ms).
			s.ackMu.Lock()
			if err := s.saveCursor(all[9].Next, true); err != nil {
				t.Fatal(err)
			}
			if tc.damage == nil {
				fsys.mu.Lock()
				fsys.faults = []*fault{{op: "write", suffix: cursorName, n: 1, err: syscall.EIO}}
				fsys.mu.Unlock()
			}
			newest := s.cur.slot
			err := s.saveCursor(all[19].Next, true)
			s.ackMu.Unlock()
			if tc.damage == nil && !errors.Is(err, syscall.EIO) || tc.damage != nil && err != nil {
				t.Fatalf("writing the second cursor: %v", err)
			}
			// kill -9 here: the files as they are.
			crashed := copyFiles(t, cfg.Dir)
			if tc.damage != nil {
				path := filepath.Join(crashed, cursorName)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if p, _, _, _ := parseSlots(b); p != all[19].Next {
					t.Fatalf("the cursor before the damage: %v, want %v", p, all[19].Next)
				}
				if err := os.WriteFile(path, tc.damage(t, b, newest), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg2 := cfg
			cfg2.Dir = crashed
			s2, logs, _ := open(t, cfg2)
			got, _ := readAll(t, s2, s2.Delivered())
			if want := ids(all[tc.from:]); !slices.Equal(ids(got), want) {
				t.Fatalf("after the crash: sends %v, want %v\n%s", ids(got), want, logs)
			}
			if warned := logs.Count("unreadable cursor") > 0; warned != tc.warn {
				t.Fatalf("warned of an unreadable cursor: %v, want %v\n%s", warned, tc.warn, logs)
			}
			// The next start writes a whole cursor again.
			if c := cursorOnDisk(t, crashed); c != s2.Delivered() {
				t.Fatalf("cursor on disk after the start %v, the spool goes by %v", c, s2.Delivered())
			}
		})
	}
}

// TestOldCursorLineIsRead: a cursor file of the version before (a line
// "seg off seq") is read, and rewritten in place in the slots' layout,
// at the start.
func TestOldCursorLineIsRead(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	s, _, _ := open(t, cfg)
	for i := range 30 {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := readAll(t, s, s.Delivered())
	s.Close()
	p := all[11].Next
	if err := os.WriteFile(filepath.Join(cfg.Dir, cursorName), []byte(fmt.Sprintf("%d %d %d\n", p.Seg, p.Off, p.Seq)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfg.Dir, cursorName+".tmp"), []byte("left by an old version"), 0o644)
	s2, logs, _ := open(t, cfg)
	if got, _ := readAll(t, s2, s2.Delivered()); !slices.Equal(ids(got), ids(all[12:])) {
		t.Fatalf("from an old cursor line: %v\n%s", ids(got), logs)
	}
	if c := cursorOnDisk(t, cfg.Dir); c != p {
		t.Fatalf("cursor rewritten at the start as %v, want %v", c, p)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, cursorName+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cursor.tmp left: %v", err)
	}
}

// TestCursorFailureDoesNotKeepDeliveredSegments: the cursor cannot be
// written (its disk refuses, or there is no file descriptor to open one
// with): delivered segments are deleted all the same, the failure is
// counted, and the cursor is written again once it can be, without
// another delivery.
func TestCursorFailureDoesNotKeepDeliveredSegments(t *testing.T) {
	cases := []struct {
		name  string
		fault *fault
	}{
		{"no space for the cursor", &fault{op: "write", suffix: cursorName, n: 1, sticky: true, err: syscall.ENOSPC}},
		{"the cursor fsync fails", &fault{op: "sync", suffix: cursorName, n: 1, sticky: true, err: syscall.EIO}},
		// A descriptor flood: no file can be opened or created.
		{"too many open files", &fault{op: "create", suffix: "", n: 1, sticky: true, err: syscall.EMFILE}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			cfg.SegmentBytes = 4 << 10
			fsys := &faultyFS{}
			s, logs, m := openOn(t, cfg, fsys)
			for i := range 12 {
				if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%02d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			all, _ := readAll(t, s, s.Delivered())
			segs := segFiles(t, cfg.Dir)
			fsys.mu.Lock()
			fsys.faults = []*fault{tc.fault}
			fsys.mu.Unlock()
			// Every sealed segment delivered.
			last := all[len(all)-1].Next
			if err := s.Ack(last); err != nil {
				t.Fatalf("ack: %v", err)
			}
			if n := len(segFiles(t, cfg.Dir)); n != 1 {
				t.Fatalf("%d of %d segments left after delivering all, want the active one", n, len(segs))
			}
			cursorFails := tc.fault.op != "create"
			if n := testutil.ToFloat64(m.CursorErrors); cursorFails != (n > 0) {
				t.Fatalf("%v cursor write errors counted", n)
			}
			if !cursorFails {
				if c := cursorOnDisk(t, cfg.Dir); c != last {
					t.Fatalf("cursor on disk %v, want %v", c, last)
				}
				return
			}
			if c := cursorOnDisk(t, cfg.Dir); tc.fault.op == "write" && c == last {
				t.Fatalf("the cursor was written through the fault")
			}
			// The disk heals: the cursor is written within a few ticks,
			// though nothing more is delivered.
			fsys.mu.Lock()
			fsys.faults = nil
			fsys.mu.Unlock()
			testkit.WaitFor(t, 5*time.Second, "the cursor written again", func() bool { return cursorOnDisk(t, cfg.Dir) == last })
			testkit.WaitFor(t, time.Second, "the cursor's recovery logged", func() bool { return logs.Count("the cursor is written again") == 1 })
			if logs.Count("writing the cursor failed") != 1 {
				t.Fatalf("want one warning for the failed cursor writes:\n%s", logs)
			}
		})
	}
}

// TestCursorTornAtEveryByte cuts a cursor write short at every byte, as a
// crash in the middle of it may leave the file, and starts the spool on
// it: it goes by the cursor before the write or the one written, never
// anything else (with an old cursor line being rewritten in the slots'
// layout, it may also send from the start of the spool); never a record
// skipped.
func TestCursorTornAtEveryByte(t *testing.T) {
	for _, migrate := range []bool{false, true} {
		t.Run(fmt.Sprintf("rewriting an old line %v", migrate), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			s, _, _ := open(t, cfg)
			for i := range 40 {
				if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%02d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			all, _ := readAll(t, s, s.Delivered())
			s.Close()
			path := filepath.Join(cfg.Dir, cursorName)
			older, newer := all[9].Next, all[19].Next
			// before: the file with the older cursor; the write puts the
			// newer one.
			if migrate {
				if err := os.WriteFile(path, []byte(fmt.Sprintf("%d %d %d\n", older.Seg, older.Off, older.Seq)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, _, _ = open(t, cfg)
			s.ackMu.Lock()
			if !migrate {
				if err := s.saveCursor(older, true); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(path)
			if migrate {
				// Open rewrote it; put the line back, as the write would
				// find it.
				before = []byte(fmt.Sprintf("%d %d %d\n", older.Seg, older.Off, older.Seq))
				s.cur.laid = false
			}
			if err := s.saveCursor(newer, true); err != nil {
				t.Fatal(err)
			}
			s.ackMu.Unlock()
			after, _ := os.ReadFile(path)
			s.Close()
			// The bytes the write put: one slot, or (rewriting a line)
			// the whole file.
			from, to := 0, len(after)
			if !migrate {
				for from < len(after) && before[from] == after[from] {
					from++
				}
				from = from / cursorSlot * cursorSlot
				to = from + cursorSlot
			}
			for cut := from; cut <= to; cut++ {
				torn := append([]byte(nil), after[:cut]...)
				if cut < len(before) {
					torn = append(torn, before[cut:]...)
				}
				if err := os.WriteFile(path, torn, 0o644); err != nil {
					t.Fatal(err)
				}
				s, logs, _ := open(t, cfg)
				got, _ := readAll(t, s, s.Delivered())
				switch d := s.Delivered(); {
				case d == older && slices.Equal(ids(got), ids(all[10:])),
					d == newer && slices.Equal(ids(got), ids(all[20:])),
					migrate && d == (Pos{Seg: 1, Seq: 1}) && slices.Equal(ids(got), ids(all)) && logs.Count("unreadable cursor") == 1:
				default:
					t.Fatalf("cut at byte %d of the write: goes by %v, sends %v\n%s", cut, d, ids(got), logs)
				}
				s.Close()
			}
		})
	}
}

// TestCursorSlotsGenerations: the slot with the higher generation is the
// cursor, whatever the positions (Open may write one behind the other: a
// cursor judged wrong, numbering from 1 again); a damaged slot is passed
// over however high its generation looks; and the next write goes to the
// slot that does not hold the cursor, so a write cut short leaves it.
func TestCursorSlotsGenerations(t *testing.T) {
	ahead, behind := Pos{Seg: 500, Off: 4096, Seq: 530}, Pos{Seg: 1, Seq: 1}
	file := func(g0 uint64, p0 Pos, g1 uint64, p1 Pos) []byte {
		b := make([]byte, cursorSize)
		putSlot(b[:cursorSlot], g0, p0)
		putSlot(b[cursorSlot:], g1, p1)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want Pos
		gen  uint64
	}{
		{"the newer slot behind the older", file(6, behind, 5, ahead), behind, 6},
		{"the newer slot second", file(5, ahead, 6, behind), behind, 6},
		{"the newer slot damaged", func() []byte {
			b := file(5, behind, 6, ahead)
			b[cursorSlot+15] ^= 1
			return b
		}(), behind, 5},
		{"one slot never written", func() []byte {
			b := file(1, behind, 0, Pos{})
			clear(b[cursorSlot:])
			return b
		}(), behind, 1},
		// saveCursor never writes one generation twice (a failed write
		// uses one up); a file with both the same still reads.
		{"the same generation in both", file(7, behind, 7, behind), behind, 7},
	}
	for _, tc := range cases {
		p, gen, next, ok := parseSlots(tc.b)
		if !ok || p != tc.want || gen != tc.gen {
			t.Errorf("%s: %v generation %d (ok %v), want %v generation %d", tc.name, p, gen, ok, tc.want, tc.gen)
			continue
		}
		// The slot the next write goes to is not the one read.
		at := tc.b[(1-next)*cursorSlot : (2-next)*cursorSlot]
		if q, g, _, ok := parseSlots(append(append([]byte(nil), at...), make([]byte, cursorSlot)...)); !ok || q != p || g != gen {
			t.Errorf("%s: the next write goes to slot %d, which holds the cursor", tc.name, next)
		}
	}
}
