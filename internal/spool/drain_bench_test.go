package spool

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// BenchmarkForwarderDrain measures the forwarder's throughput: a backlog
// of 100,000 records of one topic (250 B each) drained to a producer that
// acknowledges at once. records/s is the figure; cpu-µs/op is per record.
func BenchmarkForwarderDrain(b *testing.B) {
	const backlog = 100_000
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range b.N {
		b.StopTimer()
		cfg := DefaultConfig()
		cfg.Dir = b.TempDir()
		cfg.MaxBytes = 1 << 40
		cfg.Sync = SyncInterval
		s, err := Open(cfg, log, nil)
		if err != nil {
			b.Fatal(err)
		}
		batch := testkit.BenchRecords("bench-spool", 100)
		for range backlog / 100 {
			if err := s.Append(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		k := &instantKafka{done: make(chan struct{})}
		close(k.done)
		cpu0 := testkit.CPUTime(b)
		start := time.Now()
		b.StartTimer()
		f := StartForwarder(s, k, DefaultForwarderConfig(), log)
		for s.Stats().Unforwarded > 0 {
			time.Sleep(100 * time.Microsecond)
		}
		b.StopTimer()
		took := time.Since(start)
		b.ReportMetric(backlog/took.Seconds(), "records/s")
		b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(time.Microsecond)/backlog, "cpu-µs/record")
		f.Stop(context.Background())
		s.Close()
	}
}
