package logship_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/slogtest"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSink keeps what it is written; while down, every Write fails after
// 20 ms (or its context), as an unreachable broker does after a timeout.
type fakeSink struct {
	mu     sync.Mutex
	down   bool
	got    [][]byte
	writes int
}

var errDown = errors.New("sink down")

func (f *fakeSink) Write(ctx context.Context, recs [][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.down {
		f.mu.Unlock()
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		f.mu.Lock()
		return errDown
	}
	for _, r := range recs {
		f.got = append(f.got, bytes.Clone(r))
	}
	return nil
}

func (f *fakeSink) Close(context.Context) error { return nil }

func (f *fakeSink) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *fakeSink) events(tb testing.TB) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, r := range f.got {
		var m map[string]any
		if err := json.Unmarshal(r, &m); err != nil {
			tb.Fatalf("record is not JSON: %v: %s", err, r)
		}
		out = append(out, m)
	}
	return out
}

func props(e map[string]any) map[string]any { p, _ := e["props"].(map[string]any); return p }

// TestSlogtest: the handler (and the file handler) pass testing/slogtest.
func TestSlogtest(t *testing.T) {
	parse := func(t *testing.T, lines [][]byte) []map[string]any {
		var out []map[string]any
		for _, l := range lines {
			var e map[string]any
			if err := json.Unmarshal(l, &e); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if e["event"] != "log" || e["id"] == nil {
				t.Fatalf("not a log event: %s", l)
			}
			out = append(out, props(e))
		}
		return out
	}
	t.Run("Handler", func(t *testing.T) {
		sink := &fakeSink{}
		var h *logship.Handler
		slogtest.Run(t, func(t *testing.T) slog.Handler {
			var err error
			h, err = logship.NewHandler(sink, logship.Options{Linger: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			sink.mu.Lock()
			sink.got = nil
			sink.mu.Unlock()
			return h
		}, func(t *testing.T) map[string]any {
			if err := h.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			sink.mu.Lock()
			lines := slices.Clone(sink.got)
			sink.mu.Unlock()
			if len(lines) != 1 {
				t.Fatalf("%d records, want 1", len(lines))
			}
			return parse(t, lines)[0]
		})
	})
	t.Run("FileHandler", func(t *testing.T) {
		var buf bytes.Buffer
		h := logship.NewFileHandler(&buf, 4096, logship.Options{})
		defer h.Close()
		if err := slogtest.TestHandler(h, func() []map[string]any {
			h.Close()
			return parse(t, bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")))
		}); err != nil {
			t.Error(err)
		}
	})
}

// TestEventShape: level, msg, source and attrs are in props, service and
// host in context, and ids count up.
func TestEventShape(t *testing.T) {
	var buf bytes.Buffer
	h := logship.NewFileHandler(&buf, 0, logship.Options{Service: "svc", Host: "h1",
		Handler: slog.HandlerOptions{AddSource: true, Level: slog.LevelDebug}})
	l := slog.New(h).With("a", 1).WithGroup("g")
	l.Debug("one", "b", "x")
	l.Error("two")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var e map[string]any
	json.Unmarshal([]byte(lines[0]), &e)
	p := props(e)
	if e["event"] != "log" || fmt.Sprint(e["context"]) != "map[host:h1 service:svc]" || p["level"] != "DEBUG" || p["msg"] != "one" ||
		p["a"] != 1.0 || fmt.Sprint(p["g"]) != "map[b:x]" || p["source"] == nil {
		t.Errorf("event %s", lines[0])
	}
	id0, _ := e["id"].(string)
	json.Unmarshal([]byte(lines[1]), &e)
	id1, _ := e["id"].(string)
	if !strings.HasSuffix(id0, "-1") || !strings.HasSuffix(id1, "-2") || id0[:36] != id1[:36] {
		t.Errorf("ids %q, %q: want <run>-1, <run>-2", id0, id1)
	}
}

func seqOf(tb testing.TB, e map[string]any) int {
	id, _ := e["id"].(string)
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	if err != nil {
		tb.Fatalf("id %q", id)
	}
	return n
}

// checkInOrder: every record i of 0..n-1 arrived, first time in order
// (duplicates allowed), and returns the other events (notices).
func checkInOrder(tb testing.TB, events []map[string]any, n int) (others []map[string]any) {
	tb.Helper()
	seen := map[string]bool{}
	next := 0
	for _, e := range events {
		p := props(e)
		i, ok := p["i"].(float64)
		if !ok {
			others = append(others, e)
			continue
		}
		if id := e["id"].(string); seen[id] {
			continue
		} else {
			seen[id] = true
		}
		if int(i) != next {
			tb.Fatalf("record %d arrived where %d was due", int(i), next)
		}
		next++
	}
	if next != n {
		tb.Fatalf("%d of %d records arrived", next, n)
	}
	return others
}

func p999(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)*999/1000]
}

// TestSpillReplayInOrder: with the sink down, the queue fills and records
// spill; Handle stays fast; once the sink is back all arrive, in order.
func TestSpillReplayInOrder(t *testing.T) {
	sink := &fakeSink{down: true}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: t.TempDir(), QueueSize: 64,
		SyncInterval: time.Second, RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	// The floor, slog's JSON handler to io.Discard, is timed interleaved
	// with the handler, so that both see the same noise of a shared machine.
	floor := slog.New(slog.NewJSONHandler(io.Discard, nil))
	const n = 20000
	lat, flat := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		l.Info("record", "i", i, "pad", "0123456789012345678901234567890123456789")
		t1 := time.Now()
		floor.Info("record", "i", i, "pad", "0123456789012345678901234567890123456789")
		lat[i], flat[i] = t1.Sub(t0), time.Since(t1)
	}
	st := h.Stats()
	if st.Spilled == 0 || st.Sent != 0 {
		t.Fatalf("stats %+v: want records spilled, none sent", st)
	}
	p, pf := p999(lat), p999(flat) // sorts them
	t.Logf("Handle with the sink down: p99.9 %v, max %v; the floor's p99.9 %v (race detector: %v)", p, lat[len(lat)-1], pf, raceEnabled)
	// The goal is the floor + 50 µs; on a shared 2-core machine the noise
	// is larger than that (the floor's own p99.9 was 15-400 µs), so the
	// test asserts what it can: Handle never waits for the sink (20 ms).
	t.Logf("p99: %v, the floor's %v", lat[n*99/100], flat[n*99/100])
	if budget := time.Millisecond; !raceEnabled && p > pf+budget {
		t.Errorf("Handle p99.9 %v with the sink down, want under the floor's %v + %v", p, pf, budget)
	}
	sink.setDown(false)
	testkit.WaitFor(t, 20*time.Second, "every record delivered", func() bool { return h.Stats().Sent >= n })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if others := checkInOrder(t, sink.events(t), n); len(others) != 0 {
		t.Errorf("unexpected events: %v", others)
	}
	if st := h.Stats(); len(st.Dropped) != 0 || st.Replayed == 0 {
		t.Errorf("stats %+v: want nothing dropped, records replayed", st)
	}
}

// TestSpillCap: past MaxSpillBytes records are dropped and counted, and
// once the sink is back the count is logged through it.
func TestSpillCap(t *testing.T) {
	sink := &fakeSink{down: true}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: t.TempDir(), QueueSize: 8, MaxSpillBytes: 20 << 10,
		RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	const n = 1000
	for i := range n {
		l.Info("record", "i", i)
	}
	dropped := h.Stats().Dropped[logship.DropSpillFull]
	if dropped == 0 {
		t.Fatalf("stats %+v: want records dropped as spill_full", h.Stats())
	}
	sink.setDown(false)
	testkit.WaitFor(t, 10*time.Second, "the drop report", func() bool {
		for _, e := range sink.events(t) {
			if strings.Contains(fmt.Sprint(props(e)["msg"]), "dropped") {
				return true
			}
		}
		return false
	})
	h.Close(context.Background())
	var report map[string]any
	delivered := 0
	for _, e := range sink.events(t) {
		if _, ok := props(e)["i"]; ok {
			delivered++
		} else {
			report = e
		}
	}
	if got := props(report)["dropped"]; got != float64(dropped) || props(report)["level"] != "WARN" {
		t.Errorf("report %v, want dropped=%d at WARN", report, dropped)
	}
	if delivered+int(dropped) != n {
		t.Errorf("%d delivered + %d dropped != %d handled", delivered, dropped, n)
	}
}

// TestCloseDeadline: with the sink down, Close returns by its deadline;
// what was left stays in the spill file and the next handler on the
// directory delivers it.
func TestCloseDeadline(t *testing.T) {
	dir := t.TempDir()
	sink := &fakeSink{down: true}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: dir, QueueSize: 16, RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		slog.New(h).Info("record", "i", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = h.Close(ctx)
	if took := time.Since(t0); took > time.Second {
		t.Errorf("Close took %v with a 200ms deadline", took)
	}
	if err == nil {
		t.Error("Close with records left: no error")
	}
	if err := slog.New(h).Handler().Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, "late", 0)); err != nil {
		t.Fatal(err)
	}
	if h.Stats().Dropped[logship.DropClosed] != 1 {
		t.Errorf("a record after Close is not counted: %+v", h.Stats())
	}

	sink2 := &fakeSink{}
	h2, err := logship.NewHandler(sink2, logship.Options{SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the spilled records delivered", func() bool { return h2.Stats().Sent >= n })
	if err := h2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	events := sink2.events(t)
	// The queue's records are written after the spilled ones when Close
	// runs out of time: all arrive, not necessarily in order.
	ids := map[float64]bool{}
	for _, e := range events {
		ids[props(e)["i"].(float64)] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct records after restart, want %d", len(ids), n)
	}
}

// TestNoSpillDropsCounted: without a spill directory a full queue drops
// the record, counted.
func TestNoSpillDropsCounted(t *testing.T) {
	sink := &fakeSink{down: true}
	h, err := logship.NewHandler(sink, logship.Options{QueueSize: 4, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		slog.New(h).Info("r", "i", i)
	}
	st := h.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	h.Close(ctx)
	if st.Dropped[logship.DropQueueFull] < 90 {
		t.Errorf("stats %+v: want ~95 dropped as queue_full", st)
	}
	if st := h.Stats(); st.Handled != 100 || st.Dropped[logship.DropQueueFull]+st.Dropped[logship.DropClosed]+st.Sent != 100 {
		t.Errorf("stats %+v: not every record is accounted for", st)
	}
}
