package spool

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// metricValue is the value of the counter or gauge name in m's registry
// (0 when it is not there).
func metricValue(tb testing.TB, m *Metrics, name string) float64 {
	tb.Helper()
	mfs, err := m.reg.(prometheus.Gatherer).Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, mm := range mf.GetMetric() {
			v += mm.GetCounter().GetValue() + mm.GetGauge().GetValue()
		}
		return v
	}
	return 0
}

// loggedLost sums the records_lost fields logged.
func loggedLost(logs *testkit.LogBuffer) int {
	n := 0
	for _, m := range regexp.MustCompile(`records_lost=(\d+)`).FindAllStringSubmatch(logs.String(), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// flipFrame damages the i-th frame of the segment at path: one bit of its
// payload, so that its checksum no longer matches.
func flipFrame(tb testing.TB, path string, i int) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	b[frameIndex(tb, b)[i]+20] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// frameIndex returns the offset of each frame of a segment's bytes, and
// its end.
func frameIndex(tb testing.TB, data []byte) []int {
	tb.Helper()
	var offs []int
	for off := 0; off < len(data); {
		offs = append(offs, off)
		_, n, err := nextFrame(data[off:])
		if err != nil {
			tb.Fatalf("frame at %d: %v", off, err)
		}
		off += n
	}
	return append(offs, len(data))
}

// spoolOf writes n records, r0000 on, into the first segment of a spool in
// dir, closes it, and returns the segment's bytes and their ids.
func spoolOf(tb testing.TB, dir string, n int) ([]byte, []string) {
	tb.Helper()
	s, _, _ := open(tb, testConfig(dir))
	var all []string
	for i := 0; i < n; i += 100 {
		var batch []event.Record
		for j := i; j < min(i+100, n); j++ {
			id := fmt.Sprintf("r%04d", j)
			batch = append(batch, rec(id))
			all = append(all, id)
		}
		if err := s.Append(context.Background(), batch); err != nil {
			tb.Fatal(err)
		}
	}
	s.Close()
	data, err := os.ReadFile(filepath.Join(dir, segName(1)))
	if err != nil {
		tb.Fatal(err)
	}
	return data, all
}

// TestCorruptFramesInsideASegment damages chosen offsets of a real segment
// of 1,000 records, as Prometheus tsdb/wlog's tests do, and reopens it: only
// the records whose frames were hit are lost, counted in the log and the
// metric; every other acknowledged record is read back in order; the
// damaged segment was copied, as it was, to .corrupt; and a third open
// finds nothing wrong.
func TestCorruptFramesInsideASegment(t *testing.T) {
	const records = 1000
	cases := []struct {
		name string
		// damage changes the segment's bytes; idx is the frame index.
		damage func(b []byte, idx []int)
		lost   []int // the records whose frames were hit
		// atLeast: the damage hit frame lengths, so the count logged is
		// a lower bound (at least 1).
		atLeast bool
	}{
		{"a bit flipped in the payload of frame 500", func(b []byte, idx []int) { b[idx[500]+20] ^= 0x10 }, []int{500}, false},
		{"a bit flipped in the CRC of frame 500", func(b []byte, idx []int) { b[idx[500]+5] ^= 0x01 }, []int{500}, false},
		{"the length of frame 500 made huge", func(b []byte, idx []int) { b[idx[500]+3] = 0x7f }, []int{500}, false},
		{"the length of frame 500 one short", func(b []byte, idx []int) { b[idx[500]]-- }, []int{500}, false},
		{"the length of frame 500 zeroed", func(b []byte, idx []int) { copy(b[idx[500]:], []byte{0, 0, 0, 0}) }, []int{500}, false},
		{"frames 1, 400 and 998 hit", func(b []byte, idx []int) {
			for _, i := range []int{1, 400, 998} {
				b[idx[i]+12] ^= 0xff
			}
		}, []int{1, 400, 998}, false},
		{"the first frame hit", func(b []byte, idx []int) { b[idx[0]+9] ^= 0xff }, []int{0}, false},
		{"the last frame hit: a tail, cut", func(b []byte, idx []int) { b[idx[999]+30] ^= 0x02 }, []int{999}, false},
		{"a zeroed run over frames 300 to 310", func(b []byte, idx []int) {
			clear(b[idx[300]+4 : idx[310]+10])
		}, []int{300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			data, all := spoolOf(t, dir, records)
			idx := frameIndex(t, data)
			damaged := bytes.Clone(data)
			tc.damage(damaged, idx)
			seg := filepath.Join(dir, segName(1))
			if err := os.WriteFile(seg, damaged, 0o644); err != nil {
				t.Fatal(err)
			}

			s, logs, m := open(t, testConfig(dir))
			got, _ := readAll(t, s, s.Delivered())
			var want []string
			for i, id := range all {
				if !slices.Contains(tc.lost, i) {
					want = append(want, id)
				}
			}
			if !slices.Equal(ids(got), want) {
				t.Fatalf("recovered %d records, want the %d not hit (%d acknowledged)\n%s", len(got), len(want), len(all), logs)
			}
			if st := s.Stats(); st.Unforwarded != uint64(len(want)) {
				t.Fatalf("stats %+v, want %d unforwarded", st, len(want))
			}
			lost := loggedLost(logs)
			q := metricValue(t, m, "inlet_spool_quarantined_records_total")
			if tc.atLeast && (lost < 1 || lost > len(tc.lost)) || !tc.atLeast && lost != len(tc.lost) || q != float64(lost) {
				t.Fatalf("logged %d records lost, counted %v, want %d (at least: %v)\n%s", lost, q, len(tc.lost), tc.atLeast, logs)
			}
			if kept, err := os.ReadFile(seg + ".corrupt"); err != nil || !bytes.Equal(kept, damaged) {
				t.Fatalf("quarantined copy: %d bytes, %v; want the damaged segment as it was (%d bytes)", len(kept), err, len(damaged))
			}
			// The spool goes on; the next open finds nothing wrong.
			if err := s.Append(context.Background(), []event.Record{rec("after")}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s2, logs2, _ := open(t, testConfig(dir))
			got, _ = readAll(t, s2, s2.Delivered())
			if !slices.Equal(ids(got), append(want, "after")) || logs2.Count("level=ERROR") > 0 {
				t.Fatalf("third open: %d records\n%s", len(got), logs2)
			}
		})
	}
}

// TestDamagedCursor writes cursors that parse but do not match the
// segment, and checks that the spool starts at its segment's start (sends
// again, never skips, never stops), and that Close writes the corrected
// cursor.
func TestDamagedCursor(t *testing.T) {
	src := t.TempDir()
	data, all := spoolOf(t, src, 50)
	idx := frameIndex(t, data)
	cases := []struct {
		name   string
		cursor string
		from   int // the first record read
	}{
		{"a good cursor", fmt.Sprintf("1 %d 21\n", idx[20]), 20},
		{"negative offset", "1 -40 1\n", 0},
		{"off a frame boundary", fmt.Sprintf("1 %d 21\n", idx[20]+3), 0},
		{"sequence does not match the offset", fmt.Sprintf("1 %d 30\n", idx[20]), 0},
		{"sequence behind the offset", fmt.Sprintf("1 %d 5\n", idx[20]), 0},
		{"past the end", fmt.Sprintf("1 %d 51\n", len(data)+100), 0},
		{"a segment inside this one", "7 0 7\n", 0},
		{"a segment far past the spool", "900 0 900\n", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, segName(1)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "cursor"), []byte(tc.cursor), 0o644); err != nil {
				t.Fatal(err)
			}
			s, logs, _ := open(t, testConfig(dir))
			got, end := readAll(t, s, s.Delivered())
			if !slices.Equal(ids(got), all[tc.from:]) {
				t.Fatalf("cursor %q: read %d records from %v, want %d\n%s", tc.cursor, len(got), s.Delivered(), len(all)-tc.from, logs)
			}
			if st := s.Stats(); st.Unforwarded != uint64(len(all)-tc.from) {
				t.Fatalf("stats %+v", st)
			}
			if tc.from == 0 && logs.Count("the cursor does not match") != 1 {
				t.Fatalf("no warning:\n%s", logs)
			}
			// The cursor file says so at once, before anything is
			// appended: records appended later could come to match the
			// wrong one (TestSequenceNumbersNeverGoBack).
			if c, d := cursorOnDisk(t, dir), s.Delivered(); c != d {
				t.Fatalf("cursor on disk after open %v, the spool goes by %v", c, d)
			}
			// Delivery goes on past it.
			if err := s.Ack(end); err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Unforwarded != 0 {
				t.Fatalf("after acking everything: %+v", st)
			}
			s.Close()
			if c := cursorOnDisk(t, dir); c != end {
				t.Fatalf("cursor written at close %v, want %v", c, end)
			}
		})
	}
}

// TestDeliveredSegmentGoneFromDisk removes segment files behind the
// spool's back: an Ack past a delivered one that is gone succeeds and lets
// it go, and "full" follows the bytes on disk, so the spool takes appends
// again.
func TestDeliveredSegmentGoneFromDisk(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	cfg.MaxBytes = 16 << 10
	s, _, _ := open(t, cfg)
	n := 0
	for ; n < 100; n++ {
		if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%03d", n))}); err != nil {
			break
		}
	}
	segs := segFiles(t, cfg.Dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	// The first is delivered and gone (removed by hand, or by a crash
	// of an earlier deletion whose cursor was not written).
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	var second uint64
	fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &second)
	if err := s.Ack(Pos{Seg: second, Seq: second}); err != nil {
		t.Fatalf("ack past a segment gone from disk: %v", err)
	}
	if st := s.Stats(); st.Segments != len(segs)-1 {
		t.Fatalf("stats %+v, want %d segments", st, len(segs)-1)
	}
	if err := s.Append(context.Background(), []event.Record{bigRec("after the ack")}); err != nil {
		t.Fatalf("append after room was freed: %v", err)
	}
	// The spool is full again; a segment not yet delivered goes missing:
	// its bytes no longer count.
	for s.Append(context.Background(), []event.Record{bigRec("fill")}) == nil {
	}
	segs = segFiles(t, cfg.Dir)
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.counted = time.Time{} // the last look at the disk was over a second ago
	s.mu.Unlock()
	if err := s.Append(context.Background(), []event.Record{bigRec("after the loss")}); err != nil {
		t.Fatalf("append with a segment gone from disk: %v (stats %+v)", err, s.Stats())
	}
	var onDisk int64
	for _, f := range segFiles(t, cfg.Dir) {
		fi, _ := os.Stat(f)
		onDisk += fi.Size()
	}
	if st := s.Stats(); st.Bytes != onDisk {
		t.Fatalf("stats %+v, %d bytes on disk", st, onDisk)
	}
}

// TestZeroedTailIsTorn: zeros after the last frame are what a crash leaves
// of a write that extended the file but did not reach the disk (never
// acknowledged): cut without a record counted lost.
func TestZeroedTailIsTorn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, all := spoolOf(t, dir, 100)
	if err := os.WriteFile(filepath.Join(dir, segName(1)), append(bytes.Clone(data), make([]byte, 4096)...), 0o644); err != nil {
		t.Fatal(err)
	}
	s, logs, m := open(t, testConfig(dir))
	got, _ := readAll(t, s, s.Delivered())
	if !slices.Equal(ids(got), all) {
		t.Fatalf("read %d records, want %d\n%s", len(got), len(all), logs)
	}
	if lost := loggedLost(logs); lost != 0 || metricValue(t, m, "inlet_spool_quarantined_records_total") != 0 || s.Stats().Quarantined != 0 {
		t.Fatalf("a zeroed tail counted as %d lost records\n%s", lost, logs)
	}
	if metricValue(t, m, "inlet_spool_corrupt_tails_total") != 1 {
		t.Fatalf("the cut not counted\n%s", logs)
	}
}
