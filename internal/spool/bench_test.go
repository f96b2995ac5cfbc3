package spool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"
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

// instantKafka acknowledges every record at once, counting them.
type instantKafka struct {
	n    atomic.Int64
	done chan struct{} // closed: a delivery that is complete
}

func (k *instantKafka) Produce(recs []event.Record) (Delivery, error) {
	k.n.Add(int64(len(recs)))
	return instantDelivery(k.done), nil
}

type instantDelivery chan struct{}

func (d instantDelivery) Wait(ctx context.Context) error {
	select {
	case <-d:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BenchmarkSpoolPath measures what --ack spool adds to a request: the
// append (encoding, group commit, fsync) and the forwarder (reading the
// records back, decoding them, handing them to a producer that acknowledges
// at once, recording the delivery), for requests of five records from 64
// concurrent appenders. Run it with -cpu 1 (the gateway's GOMAXPROCS in
// make bench); cpu-µs/op is the process's CPU time per request, the figure
// that decides throughput on a saturated core.
func BenchmarkSpoolPath(b *testing.B) {
	batch := testkit.BenchRecords("bench-spool", 5)
	cfg := DefaultConfig()
	cfg.Dir = b.TempDir()
	cfg.MaxBytes = 1 << 40
	s, err := Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	k := &instantKafka{done: make(chan struct{})}
	close(k.done)
	f := StartForwarder(s, k, DefaultForwarderConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer f.Stop(context.Background())
	b.ReportAllocs()
	b.SetParallelism(64)
	cpu0 := testkit.CPUTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Append(context.Background(), batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	for s.Stats().Unforwarded > 0 {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(testutil.ToFloat64(s.metrics.Fsyncs)/float64(b.N), "fsyncs/op")
}

// kafkaProducer is what the gateway hands the forwarder (its forwarding
// adapter, without importing the gateway).
type kafkaProducer struct{ p *kafka.Producer }

func (k kafkaProducer) Produce(recs []event.Record) (Delivery, error) {
	d, err := k.p.Produce(recs)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// BenchmarkAckModes compares what a request of five records costs past
// ingest with --ack kafka (ProduceSync: answered once Kafka acknowledged)
// and with --ack spool (Append: answered once fsynced; the forwarder
// produces the records to Kafka), from 100 concurrent callers, against a
// real broker (INLET_TEST_BROKERS; skipped without). Run it with -cpu 1:
// cpu-µs/op is the process's CPU time per request, the forwarder's and the
// producer's included (the spool run waits until everything is forwarded).
func BenchmarkAckModes(b *testing.B) {
	brokers := os.Getenv("INLET_TEST_BROKERS")
	if brokers == "" {
		b.Skip("INLET_TEST_BROKERS is not set")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	kc := kafka.DefaultConfig()
	kc.Brokers = strings.Split(brokers, ",")
	p, err := kafka.NewProducer(kc, log, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	topic := fmt.Sprintf("bench-ack-%d", time.Now().UnixNano())
	warm := testkit.BenchRecords("bench-spool", 1)
	warm[0].Topic = topic
	if err := p.ProduceSync(context.Background(), warm); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, do func(context.Context, []event.Record) error, drain func()) {
		const callers = 100
		reqs := make([][]event.Record, callers)
		for i := range reqs {
			reqs[i] = testkit.BenchRecords("bench-spool", 5)
			for j := range reqs[i] {
				reqs[i][j].Topic = topic
			}
		}
		b.ReportAllocs()
		cpu0 := testkit.CPUTime(b)
		b.ResetTimer()
		testkit.CallersN(b, callers, func(c int) error { return do(context.Background(), reqs[c]) })
		drain()
		b.StopTimer()
		b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	}
	b.Run("ack=kafka", func(b *testing.B) { run(b, p.ProduceSync, func() {}) })
	b.Run("ack=spool", func(b *testing.B) {
		cfg := DefaultConfig()
		cfg.Dir = b.TempDir()
		cfg.MaxBytes = 1 << 40
		s, err := Open(cfg, log, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		f := StartForwarder(s, kafkaProducer{p}, DefaultForwarderConfig(), log)
		defer f.Stop(context.Background())
		run(b, s.Append, func() {
			for s.Stats().Unforwarded > 0 {
				time.Sleep(100 * time.Microsecond)
			}
		})
	})
}
