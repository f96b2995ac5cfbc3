package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.Dir = dir
	return cfg
}

// open opens a spool on cfg, closed at the end of the test, with its logs
// kept and its metrics registered.
func open(tb testing.TB, cfg Config) (*Spool, *testkit.LogBuffer, *Metrics) {
	tb.Helper()
	return openOn(tb, cfg, osFS{})
}

// openOn is open on the file system fsys.
func openOn(tb testing.TB, cfg Config, fsys FileSystem) (*Spool, *testkit.LogBuffer, *Metrics) {
	tb.Helper()
	log, logs := testkit.NewLogBuffer()
	m := NewMetrics(prometheus.NewRegistry())
	s, err := openFS(cfg, log, m, fsys)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, logs, m
}

func rec(id string) event.Record {
	return event.Record{
		Topic: "events", Key: []byte("k-" + id[:1]), Value: []byte(`{"event":"e","id":"` + id + `"}`),
		Headers: []event.Header{{Key: event.HeaderEventID, Value: []byte(id)}, {Key: "x", Value: nil}},
		EventID: id,
	}
}

// readAll reads every record after from that is readable now: Next with
// a done context returns what is there, and the context's error once
// nothing is.
func readAll(tb testing.TB, s *Spool, from Pos) ([]Entry, Pos) {
	tb.Helper()
	r := s.NewReader(from)
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out []Entry
	pos := from
	for {
		es, p, err := r.Next(ctx, 64<<10)
		if errors.Is(err, context.Canceled) {
			return out, pos
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, es...)
		pos = p
	}
}

func ids(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Record.EventID
	}
	return out
}

func TestConcurrentAppendsKeepEveryRecordInOrder(t *testing.T) {
	s, _, m := open(t, testConfig(t.TempDir()))
	const writers, appends = 40, 25
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < appends; i++ {
				batch := []event.Record{rec(fmt.Sprintf("%c-%03d-a", 'a'+w%26, i)), rec(fmt.Sprintf("%c-%03d-b", 'a'+w%26, i))}
				batch[0].Topic = fmt.Sprint("w", w)
				batch[1].Topic = fmt.Sprint("w", w)
				if err := s.Append(context.Background(), batch); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, pos := readAll(t, s, s.Delivered())
	if len(got) != writers*appends*2 {
		t.Fatalf("read %d records, want %d", len(got), writers*appends*2)
	}
	// Per writer, records come back in the order they were appended, and a
	// request's records stay together.
	last := map[string]string{}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, e.Seq)
		}
		if prev := last[e.Record.Topic]; prev >= e.Record.EventID {
			t.Fatalf("writer %s: %s after %s", e.Record.Topic, e.Record.EventID, prev)
		}
		last[e.Record.Topic] = e.Record.EventID
		if strings.HasSuffix(e.Record.EventID, "-a") && got[i+1].Record.EventID != strings.TrimSuffix(e.Record.EventID, "a")+"b" {
			t.Fatalf("a request's records were split: %s then %s", e.Record.EventID, got[i+1].Record.EventID)
		}
		if string(e.Record.Key) != "k-"+e.Record.EventID[:1] || len(e.Record.Headers) != 2 || e.Record.Headers[1].Key != "x" {
			t.Fatalf("record changed on the way: %+v", e.Record)
		}
	}
	fsyncs := testutil.ToFloat64(m.Fsyncs)
	if fsyncs >= writers*appends {
		t.Errorf("%v fsyncs for %d appends: no group commit", fsyncs, writers*appends)
	}
	t.Logf("%d appends, %v fsyncs", writers*appends, fsyncs)
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Unforwarded != 0 {
		t.Fatalf("after acking everything: %+v", st)
	}
}

func TestReopenSendsOnlyWhatWasNotDelivered(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s, _, _ := open(t, cfg)
	for i := 0; i < 10; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	r := s.NewReader(s.Delivered())
	es, pos, err := r.Next(context.Background(), 3*len(rec("r00").Value)+200) // about three records
	r.Close()
	if err != nil || len(es) == 0 || len(es) >= 10 {
		t.Fatalf("first window: %d records, %v", len(es), err)
	}
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2, _, _ := open(t, cfg)
	got, _ := readAll(t, s2, s2.Delivered())
	want := []string{}
	for i := len(es); i < 10; i++ {
		want = append(want, fmt.Sprintf("r%02d", i))
	}
	if strings.Join(ids(got), ",") != strings.Join(want, ",") {
		t.Fatalf("after reopening: %v, want %v", ids(got), want)
	}
	if st := s2.Stats(); st.Unforwarded != uint64(len(want)) {
		t.Fatalf("unforwarded %d, want %d", st.Unforwarded, len(want))
	}
	// New records continue the sequence.
	if err := s2.Append(context.Background(), []event.Record{rec("new")}); err != nil {
		t.Fatal(err)
	}
	all, _ := readAll(t, s2, s2.Delivered())
	if n := len(all); n != len(want)+1 || all[n-1].Record.EventID != "new" || all[n-1].Seq != 11 {
		t.Fatalf("after an append: %v (last seq %d)", ids(all), all[len(all)-1].Seq)
	}
}

func segFiles(tb testing.TB, dir string) []string {
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func TestSegmentsRollAndAreDeletedOnceDelivered(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 4 << 10
	s, _, _ := open(t, cfg)
	for i := 0; i < 200; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(segFiles(t, dir)); n < 4 {
		t.Fatalf("%d segments for 200 records of 4 KiB segments", n)
	}
	// Deliver half: the segments before it go, the rest stay.
	r := s.NewReader(s.Delivered())
	var pos Pos
	seen := 0
	for seen < 100 {
		es, p, err := r.Next(context.Background(), 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(es)
		pos = p
	}
	r.Close()
	before := len(segFiles(t, dir))
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	mid := len(segFiles(t, dir))
	if mid >= before {
		t.Fatalf("acking half deleted nothing: %d segments before, %d after", before, mid)
	}
	rest, end := readAll(t, s, pos)
	if len(rest) != 200-seen {
		t.Fatalf("%d records after the acked half, want %d", len(rest), 200-seen)
	}
	if err := s.Ack(end); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n > 2 {
		t.Fatalf("%d segments left with everything delivered", n)
	}
	if st := s.Stats(); st.Unforwarded != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// lastSegment returns the newest segment that has records.
func lastSegment(tb testing.TB, dir string) string {
	tb.Helper()
	files := segFiles(tb, dir)
	for i := len(files) - 1; i >= 0; i-- {
		if fi, err := os.Stat(files[i]); err == nil && fi.Size() > 0 {
			return files[i]
		}
	}
	tb.Fatal("no segment with records")
	return ""
}

func TestTornAndCorruptTailsAreCut(t *testing.T) {
	cases := []struct {
		name   string
		damage func(tb testing.TB, path string)
		reason string
	}{
		{"torn last frame", func(tb testing.TB, path string) {
			fi, _ := os.Stat(path)
			if err := os.Truncate(path, fi.Size()-7); err != nil {
				tb.Fatal(err)
			}
		}, "runs past the end"},
		{"flipped byte in the last frame", func(tb testing.TB, path string) {
			b, _ := os.ReadFile(path)
			b[len(b)-3] ^= 0xff
			if err := os.WriteFile(path, b, 0o644); err != nil {
				tb.Fatal(err)
			}
		}, "CRC32C"},
		{"garbage appended", func(tb testing.TB, path string) {
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6})
			f.Close()
		}, "frame of 2147483647 bytes"},
		{"a half-written header", func(tb testing.TB, path string) {
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{40, 0, 0})
			f.Close()
		}, "torn frame header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := testConfig(dir)
			s, _, _ := open(t, cfg)
			for i := 0; i < 5; i++ {
				if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			tc.damage(t, lastSegment(t, dir))

			s2, logs, m := open(t, cfg)
			got, _ := readAll(t, s2, s2.Delivered())
			want := "r0,r1,r2,r3,r4"
			if tc.name != "garbage appended" && tc.name != "a half-written header" {
				want = "r0,r1,r2,r3" // the damaged record is gone, the rest recovered
			}
			if strings.Join(ids(got), ",") != want {
				t.Fatalf("recovered %v, want %s", ids(got), want)
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "cutting it at the last good record") || !strings.Contains(l, tc.reason) {
				t.Fatalf("no error logged with %q:\n%s", tc.reason, l)
			}
			if testutil.ToFloat64(m.Recovered) != 1 {
				t.Errorf("corrupt tails metric %v", testutil.ToFloat64(m.Recovered))
			}
			// The spool goes on, and a third open finds nothing wrong.
			if err := s2.Append(context.Background(), []event.Record{rec("after")}); err != nil {
				t.Fatal(err)
			}
			s2.Close()
			s3, logs3, _ := open(t, cfg)
			got, _ = readAll(t, s3, s3.Delivered())
			if ids(got)[len(got)-1] != "after" || strings.Contains(logs3.String(), "level=ERROR") {
				t.Fatalf("third open: %v\n%s", ids(got), logs3.String())
			}
		})
	}
}

func TestFullAnswersErrFullUntilDrained(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	cfg.MaxBytes = 8 << 10
	s, _, m := open(t, cfg)
	n := 0
	var err error
	for ; n < 1000; n++ {
		if err = s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%04d", n))}); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrFull) || n == 0 {
		t.Fatalf("after %d appends: %v, want ErrFull", n, err)
	}
	if st := s.Stats(); st.Bytes > cfg.MaxBytes {
		t.Fatalf("spool grew past its limit: %+v", st)
	}
	if testutil.ToFloat64(m.Full) < 1 {
		t.Error("full not counted")
	}
	got, pos := readAll(t, s, s.Delivered())
	if len(got) != n {
		t.Fatalf("%d records stored, %d acknowledged", len(got), n)
	}
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	// The delivered segments count until the deleter has removed them
	// (TestSegmentsBeingDeletedCountTowardsTheLimit); then there is room.
	if err := appendOnceRoom(s, rec("again")); err != nil {
		t.Fatalf("after draining: %v (stats %+v)", err, s.Stats())
	}
}

// appendOnceRoom appends r, trying again while the spool is full, for up
// to 10 s (the deleter freeing delivered segments); it returns the last
// error.
func appendOnceRoom(s *Spool, r event.Record) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Append(context.Background(), []event.Record{r})
		if !errors.Is(err, ErrFull) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDiskFull writes the spool on a small tmpfs: a write the disk refuses
// fails the request with ErrWrite, the spool keeps what it had, and takes
// writes again once there is room.
func TestDiskFull(t *testing.T) {
	dir := testkit.Tmpfs(t, "64k") // registered first, so unmounted after the spools are closed
	var err error
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	cfg.MaxBytes = 16 << 20 // more than the disk has
	s, logs, m := open(t, cfg)
	big := rec("big")
	big.Value = bytes.Repeat([]byte("x"), 8<<10)
	var acked int
	for i := 0; i < 100; i++ {
		if err = s.Append(context.Background(), []event.Record{big}); err != nil {
			break
		}
		acked++
	}
	if !errors.Is(err, ErrWrite) {
		t.Fatalf("after %d appends on a full disk: %v, want ErrWrite", acked, err)
	}
	if testutil.ToFloat64(m.WriteErrors) < 1 || !strings.Contains(logs.String(), "write failed") {
		t.Errorf("write error not counted or logged:\n%s", logs.String())
	}
	got, pos := readAll(t, s, s.Delivered())
	if len(got) != acked {
		t.Fatalf("%d records readable, %d acknowledged", len(got), acked)
	}
	s.Close()
	// Nothing acknowledged was lost, nothing half-written is there.
	s2, logs2, _ := open(t, cfg)
	got, pos = readAll(t, s2, s2.Delivered())
	if len(got) != acked || strings.Contains(logs2.String(), "level=ERROR") {
		t.Fatalf("after reopening: %d records (want %d)\n%s", len(got), acked, logs2.String())
	}
	_ = pos
}

func TestCursorAheadOfUndeletedSegments(t *testing.T) {
	// A crash after the cursor was written but before the delivered
	// segments were deleted: they are deleted on open, and nothing after the
	// cursor is skipped.
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 4 << 10
	s, _, _ := open(t, cfg)
	for i := 0; i < 120; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := readAll(t, s, s.Delivered())
	s.Close()
	files := segFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("want 3 or more segments, got %d", len(files))
	}
	// Point the cursor at the start of the third segment.
	var third uint64
	fmt.Sscanf(filepath.Base(files[2]), "%020d.seg", &third)
	if err := os.WriteFile(filepath.Join(dir, "cursor"), []byte(fmt.Sprintf("%d 0 %d\n", third, third)), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, _, _ := open(t, cfg)
	got, _ := readAll(t, s2, s2.Delivered())
	if want := all[third-1:]; strings.Join(ids(got), ",") != strings.Join(ids(want), ",") {
		t.Fatalf("read %d records from the cursor, want %d", len(got), len(want))
	}
	if left := segFiles(t, dir); len(left) != len(files)-2+1 && len(left) != len(files)-2 {
		t.Fatalf("segments before the cursor not deleted: %v", left)
	}
	// A cursor that names nothing sane is ignored, not trusted.
	s2.Close()
	os.WriteFile(filepath.Join(dir, "cursor"), []byte("garbage"), 0o644)
	s3, logs, _ := open(t, cfg)
	got, _ = readAll(t, s3, s3.Delivered())
	if len(got) != 120-int(third-1) || !strings.Contains(logs.String(), "unreadable cursor") {
		t.Fatalf("with a broken cursor: %d records\n%s", len(got), logs.String())
	}
}

func TestIntervalSync(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Sync = SyncInterval
	cfg.SyncInterval = 5 * time.Millisecond
	s, _, m := open(t, cfg)
	for i := 0; i < 50; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The ticker fsyncs within an interval; allow for a loaded machine.
	testkit.WaitFor(t, 5*time.Second, "an interval fsync", func() bool { return testutil.ToFloat64(m.Fsyncs) >= 1 })
	if f := testutil.ToFloat64(m.Fsyncs); f < 1 || f >= 50 {
		t.Fatalf("%v fsyncs for 50 appends with interval sync", f)
	}
	s.Close()
	s2, _, _ := open(t, cfg)
	if got, _ := readAll(t, s2, s2.Delivered()); len(got) != 50 {
		t.Fatalf("%d records after reopening", len(got))
	}
}

func TestOneProcessPerSpool(t *testing.T) {
	cfg := testConfig(t.TempDir())
	open(t, cfg)
	if _, err := Open(cfg, slog.Default(), nil); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second open: %v, want in use", err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	s, _, _ := open(t, testConfig(t.TempDir()))
	s.Close()
	if err := s.Append(context.Background(), []event.Record{rec("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// TestConcurrentAcks acks from several goroutines at once: every delivered
// segment is deleted once, and the spool's accounting matches the disk.
func TestConcurrentAcks(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	s, _, _ := open(t, cfg)
	for i := range 120 {
		if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	// A position at the start of every segment, and the end.
	var positions []Pos
	for _, path := range segFiles(t, cfg.Dir) {
		var base uint64
		fmt.Sscanf(filepath.Base(path), "%020d.seg", &base)
		positions = append(positions, Pos{Seg: base, Seq: base})
	}
	_, end := readAll(t, s, s.Delivered())
	positions = append(positions, end)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range positions {
				if err := s.Ack(p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The delivered segments count in Stats().Bytes until the deleter has
	// removed them (TestSegmentsBeingDeletedCountTowardsTheLimit).
	deadline := time.Now().Add(10 * time.Second)
	for m, _ := filepath.Glob(filepath.Join(cfg.Dir, "*"+deletingSuffix)); len(m) > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		m, _ = filepath.Glob(filepath.Join(cfg.Dir, "*"+deletingSuffix))
	}
	files := segFiles(t, cfg.Dir)
	var bytes int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		bytes += fi.Size()
	}
	if st := s.Stats(); st.Segments != len(files) || st.Bytes != bytes || st.Unforwarded != 0 || s.Delivered() != end {
		t.Fatalf("stats %+v, delivered %+v; on disk %d segments, %d bytes; want delivered %+v", st, s.Delivered(), len(files), bytes, end)
	}
	if len(files) > 2 {
		t.Fatalf("%d segments left with everything delivered", len(files))
	}
}
