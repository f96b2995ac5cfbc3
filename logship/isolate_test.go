package logship_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

// TestIsolatedTooLargeRecordFailsNoLaterBatch: one record too large alone (limit
// unknown to the sink): its batch fails once and is sent a record at a
// time; the batches after it then go through without failing again.
func TestIsolatedTooLargeRecordFailsNoLaterBatch(t *testing.T) {
	p := &logship.FakeProducer{MaxBytes: 1000, BatchRecords: 8}
	h, err := logship.NewHandler(logship.NewFakeKafkaSink(p, 0), logship.Options{BatchSize: 10,
		Linger: time.Millisecond, QueueSize: 4096, SpillDir: t.TempDir(), RetryBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	answering(t, p)
	l := slog.New(h)
	l.Info("big", "pad", strings.Repeat("x", 2000))
	testkit.WaitFor(t, 20*time.Second, "the big record dropped", func() bool { return h.Stats().Dropped[logship.DropTooLarge] == 1 })
	for i := range 20 {
		l.Info("record", "i", i)
	}
	testkit.WaitFor(t, 20*time.Second, "the records delivered", func() bool { return h.Stats().Sent >= 20 })
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Retried != 1 {
		t.Errorf("stats %+v: want the one failed batch retried once", st)
	}
}
