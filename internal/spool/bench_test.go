package spool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// BenchmarkAppend measures the append path: encoding, the group-commit
// write and the fsync, for one request of five ~100-byte events, with
// 1 and 64 concurrent appenders, in both sync modes.
func BenchmarkAppend(b *testing.B) {
	batch := make([]event.Record, 5)
	for i := range batch {
		batch[i] = rec(fmt.Sprintf("x-%d-0123456789", i))
		batch[i].Value = append(batch[i].Value[:len(batch[i].Value)-1], []byte(`,"props":{"path":"/products/123","ref":"home"}}`)...)
	}
	for _, mode := range []string{SyncAlways, SyncInterval} {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("sync=%s/appenders=%d", mode, par), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Dir = b.TempDir()
				cfg.Sync = mode
				cfg.MaxBytes = 1 << 40
				s, err := Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				bytes := 0
				for i := range batch {
					bytes += batch[i].Size()
				}
				b.SetBytes(int64(bytes))
				b.ReportAllocs()
				b.SetParallelism(par) // par × GOMAXPROCS goroutines
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := s.Append(context.Background(), batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)*5/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
