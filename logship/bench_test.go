package logship_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

// logCall is one log call of about 200 bytes as JSON.
func logCall(l *slog.Logger, i int) {
	l.Info("request served", "method", "GET", "path", "/api/v1/orders/12345", "status", 200,
		"duration_ms", 12.5, "user", "u-8c1f2a", "i", i)
}

// measure runs b.N log calls through l, timing each; it reports ns/op,
// allocs/op and the p99 and p99.9 of the caller's cost.
func measure(b *testing.B, l *slog.Logger) {
	h := hdrhistogram.New(1, int64(time.Second), 3)
	for i := range 1000 { // warm up
		logCall(l, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		logCall(l, i)
		h.RecordValue(int64(time.Since(t0)))
	}
	b.StopTimer()
	b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-ns")
	b.ReportMetric(float64(h.ValueAtQuantile(99.9)), "p99.9-ns")
}

// benchFile opens a new file for appending: each Write is one write(2)
// with O_APPEND, as a logger's plain file backend does.
func benchFile(b *testing.B) *os.File {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "bench.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkLogCall is the caller's cost per log call, the comparison of
// issue 13, in one process: the floor (slog's JSON handler to
// io.Discard), files, franz-go producing each record synchronously, and
// logship to Kafka (reachable, and not: records spill) and to a file.
//
// The unbuffered file is the field test's plain file backend: slog's JSON
// handler writes each record with one write(2) to a file opened with
// O_APPEND, and nothing buffers or fsyncs (the seed compared a plain
// write per record with a delayed, buffered one, neither synced). The
// buffered file is the same through a 64 KiB bufio.Writer.
func BenchmarkLogCall(b *testing.B) {
	b.Run("floor-json-discard", func(b *testing.B) {
		measure(b, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	})
	b.Run("unbuffered-file", func(b *testing.B) {
		measure(b, slog.New(slog.NewJSONHandler(benchFile(b), nil)))
	})
	b.Run("buffered-file", func(b *testing.B) {
		bw := bufio.NewWriterSize(benchFile(b), 64<<10)
		measure(b, slog.New(slog.NewJSONHandler(bw, nil)))
		bw.Flush()
	})
	b.Run("logship-file", func(b *testing.B) {
		h := logship.NewFileHandler(benchFile(b), 64<<10, logship.Options{})
		measure(b, slog.New(h))
		h.Close()
	})
	b.Run("franz-go-direct", func(b *testing.B) {
		brokers := testkit.Brokers(b)
		topic := testkit.Unique(b, "bench-")
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		// slog's JSON handler writing each record with one synchronous produce.
		w := writerFunc(func(p []byte) (int, error) {
			rec := &kgo.Record{Topic: topic, Value: append([]byte(nil), p...)}
			return len(p), cl.ProduceSync(context.Background(), rec).FirstErr()
		})
		measure(b, slog.New(slog.NewJSONHandler(w, nil)))
	})
	b.Run("logship-kafka", func(b *testing.B) {
		brokers := testkit.Brokers(b)
		sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: brokers, Topic: testkit.Unique(b, "bench-")})
		if err != nil {
			b.Fatal(err)
		}
		h, err := logship.NewHandler(sink, logship.Options{SpillDir: b.TempDir(), QueueSize: 1 << 16})
		if err != nil {
			b.Fatal(err)
		}
		measure(b, slog.New(h))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			b.Fatal(err)
		}
		st := h.Stats()
		b.ReportMetric(float64(st.Spilled)/float64(st.Handled), "spilled/op")
		if n := st.Dropped; len(n) > 0 {
			b.Fatalf("dropped: %v", n)
		}
	})
	// Kafka down: nothing listens at the brokers' address, so every record
	// ends in the spill file (after the queue and the batches franz-go
	// holds); p99.9-ns is the caller's cost then.
	b.Run("logship-kafka-down", func(b *testing.B) {
		sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: []string{testkit.FreeAddr(b)}, Topic: "bench-down"})
		if err != nil {
			b.Fatal(err)
		}
		h, err := logship.NewHandler(sink, logship.Options{SpillDir: b.TempDir(), MaxSpillBytes: 8 << 30})
		if err != nil {
			b.Fatal(err)
		}
		measure(b, slog.New(h))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		h.Close(ctx) // records left in the spill file: an error, expected
		st := h.Stats()
		b.ReportMetric(float64(st.Spilled)/float64(st.Handled), "spilled/op")
		if st.Sent != 0 || len(st.Dropped) > 0 {
			b.Fatalf("sent to nobody, or dropped: %+v", st)
		}
	})
}

// BenchmarkKafkaThroughput is records per second delivered to Kafka by one
// logging goroutine through logship, from the first call to the last
// acknowledgement (Close); spilled/op is the share that went through the
// spill file because the queue was full. Run it with -cpu 1 for one core.
func BenchmarkKafkaThroughput(b *testing.B) {
	brokers := testkit.Brokers(b)
	sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: brokers, Topic: testkit.Unique(b, "bench-"),
		Opts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.Lz4Compression())}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: b.TempDir(), QueueSize: 1 << 16, BatchSize: 2000})
	if err != nil {
		b.Fatal(err)
	}
	l := slog.New(h)
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; b.Loop(); i++ {
		logCall(l, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "records/s")
	st := h.Stats()
	if st.Sent != int64(b.N) {
		b.Fatalf("sent %d of %d: %+v", st.Sent, b.N, st)
	}
	b.ReportMetric(float64(st.Spilled)/float64(b.N), "spilled/op")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
