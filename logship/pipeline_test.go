package logship_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

func pipeEvents(tb testing.TB, p *logship.PipeSink) []map[string]any {
	var out []map[string]any
	for _, r := range p.Got() {
		var m map[string]any
		if err := json.Unmarshal(r, &m); err != nil {
			tb.Fatalf("record is not JSON: %v: %s", err, r)
		}
		out = append(out, m)
	}
	return out
}

// answerUntil acknowledges the sink's sends until it holds n records.
func answerUntil(t *testing.T, p *logship.PipeSink, n int) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "every record acknowledged", func() bool {
		p.Answer(true)
		return len(p.Got()) >= n
	})
}

// TestPipelineKeepsBatchesInFlight: to a sink that pipelines, the handler
// sends MaxFlights batches before the first is answered, not one; all
// arrive, in order, once answered.
func TestPipelineKeepsBatchesInFlight(t *testing.T) {
	p := &logship.PipeSink{}
	h, err := logship.NewHandler(p, logship.Options{BatchSize: 10, Linger: time.Millisecond, QueueSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	l := slog.New(h)
	for i := range n {
		l.Info("record", "i", i)
	}
	testkit.WaitFor(t, 10*time.Second, "MaxFlights batches in flight", func() bool {
		now, _ := p.Pending()
		return now == logship.MaxFlights
	})
	time.Sleep(20 * time.Millisecond) // (a wait for what must not happen) no more than MaxFlights
	if _, most := p.Pending(); most != logship.MaxFlights {
		t.Fatalf("%d batches in flight at most, want %d", most, logship.MaxFlights)
	}
	answerUntil(t, p, n)
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if others := checkInOrder(t, pipeEvents(t, p), n); len(others) != 0 {
		t.Errorf("unexpected events: %v", others)
	}
	// A batch timed out by its context fails in franz-go while the later
	// ones in flight may still land: out of order (TestKafkaOutage saw it).
	if timed := p.Timed(); timed != 0 {
		t.Errorf("%d sends to a pipelining sink had a deadline, want none", timed)
	}
}

// TestPipelineFailureResendsInOrder: when the batches in flight fail (all
// at once, as franz-go fails a partition's buffered records), new records
// spill; the failed batches are sent again first, then the spill file:
// every record arrives, in order. The first batch sent again fails again,
// at once, while the others wait to be sent again: it still goes first.
func TestPipelineFailureResendsInOrder(t *testing.T) {
	p := &logship.PipeSink{}
	h, err := logship.NewHandler(p, logship.Options{BatchSize: 10, Linger: time.Millisecond, QueueSize: 64,
		SpillDir: t.TempDir(), RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	l := slog.New(h)
	i := 0
	for ; i < n/2; i++ {
		l.Info("record", "i", i)
	}
	testkit.WaitFor(t, 10*time.Second, "MaxFlights batches in flight", func() bool {
		now, _ := p.Pending()
		return now == logship.MaxFlights // and no more sent until one is answered
	})
	p.FailNext(1)
	p.Answer(false)
	for ; i < n; i++ {
		l.Info("record", "i", i)
	}
	answerUntil(t, p, n)
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	if st.Retried < logship.MaxFlights || st.Spilled == 0 || st.Replayed == 0 {
		t.Errorf("stats %+v: want the failed batches retried, records spilled and replayed", st)
	}
	if others := checkInOrder(t, pipeEvents(t, p), n); len(others) != 0 {
		t.Errorf("unexpected events: %v", others)
	}
}

// TestCloseDeadlineKafkaDown: with nothing listening at the brokers'
// address, Close returns by its deadline although batches are in flight
// to franz-go; they, the queue and the spill file are kept, and the next
// handler on the directory delivers every record.
func TestCloseDeadlineKafkaDown(t *testing.T) {
	dir := t.TempDir()
	sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: []string{testkit.FreeAddr(t)}, Topic: "down"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: dir, BatchSize: 50, QueueSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	l := slog.New(h)
	for i := range n {
		l.Info("record", "i", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = h.Close(ctx)
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("Close took %v with a 200ms deadline", took)
	}
	if st := h.Stats(); err == nil || st.Sent != 0 || st.Spilled == 0 {
		t.Errorf("Close: %v, stats %+v: want records left in the spill file, none sent, some spilled", err, st)
	}

	next := &fakeSink{}
	h, err = logship.NewHandler(next, logship.Options{SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the records left delivered", func() bool { return h.Stats().Sent >= n })
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	for _, e := range next.events(t) {
		seen[props(e)["i"].(float64)] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct records after the restart, want %d", len(seen), n)
	}
}
