package loadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

// KafkaBenchConfig is `inlet bench kafka`.
type KafkaBenchConfig struct {
	Run   bench.Config
	Kafka KafkaConfig
	// Records, if positive, measures that many records instead of
	// Run.Duration; WarmupRecords, if positive, leaves that many out first
	// instead of Run.Warmup.
	Records, WarmupRecords int64
	Reports
}

// Validate reports the first invalid setting.
func (c KafkaBenchConfig) Validate() error {
	r := c.Run
	if c.Records > 0 {
		r.Duration = time.Second // not used: the count ends the run
	}
	switch {
	case c.Records < 0 || c.WarmupRecords < 0:
		return errors.New("bench: record counts must not be negative")
	case c.WarmupRecords > 0 && c.Run.Warmup > 0:
		return errors.New("bench: a warmup of records or of time, not both")
	}
	if err := r.Validate(); err != nil {
		return err
	}
	return c.Kafka.Validate()
}

// RunKafka runs `inlet bench kafka` and writes its reports, and a line as
// kafka-producer-perf-test sums a run up.
func RunKafka(ctx context.Context, cfg KafkaBenchConfig, stdout, stderr io.Writer) error {
	var rep *report.Report
	var stats *KafkaStats
	err := runCommand(cfg.Reports, stdout, stderr, func() (_ *report.Report, err error) {
		rep, stats, err = BenchKafka(ctx, cfg, stderr)
		return rep, err
	})
	if err != nil {
		return err
	}
	summary := stdout
	if cfg.JSON == "-" {
		summary = stderr
	}
	_, err = io.WriteString(summary, perfTestLine(rep, cfg.Kafka, stats))
	return err
}

// BenchKafka runs `inlet bench kafka`. It writes the start of the run to
// progress, and a live progress line once a second if progress is a
// terminal. stats is nil unless the run is end to end.
func BenchKafka(ctx context.Context, cfg KafkaBenchConfig, progress io.Writer) (rep *report.Report, stats *KafkaStats, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	target, err := NewKafka(setup, cfg.Kafka)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	defer target.Close()
	r := cfg.Run
	mode := fmt.Sprintf("closed loop, %d records in flight", r.Workers)
	if r.Open() {
		mode = openMode(r, "records/s", "in flight")
	}
	length := fmt.Sprintf("for %v", r.Duration)
	if cfg.Records > 0 {
		length = fmt.Sprintf("%d records", cfg.Records)
	}
	warmup := r.Warmup.String()
	if cfg.WarmupRecords > 0 {
		warmup = fmt.Sprintf("%d records", cfg.WarmupRecords)
	}
	fmt.Fprintf(progress, "inlet bench: %s, %s, %s after %s warmup\n", target, mode, length, warmup)
	rep, err = live(progress, r, func(r bench.Config) (*report.Report, error) {
		return bench.RunCount(ctx, r, cfg.WarmupRecords, cfg.Records, target.Do)
	})
	if err != nil {
		return nil, nil, err
	}
	rep.Target, rep.Command = target.String(), cfg.Command
	if cfg.Kafka.E2E {
		st := target.Stats()
		stats = &st
	}
	return rep, stats, nil
}

// perfTestLine sums a run up as kafka-producer-perf-test does, for
// comparison with it.
func perfTestLine(rep *report.Report, k KafkaConfig, stats *KafkaStats) string {
	l := rep.Latency
	mb := rep.EventsPerSec * float64(k.RecordBytes) / (1 << 20)
	what := "latency"
	if k.E2E {
		what = "end-to-end latency"
	}
	s := fmt.Sprintf("%d records sent, %.1f records/sec (%.2f MB/sec), %.2f ms avg %s, %.2f ms max %s, %.0f ms 50th, %.0f ms 95th, %.0f ms 99th, %.0f ms 99.9th.\n",
		rep.Requests, rep.EventsPerSec, mb, l.Mean, what, l.Max, what, l.P50, l.P95, l.P99, l.P999)
	if stats != nil {
		s += fmt.Sprintf("consumer: %d records of this run read, %d others (other producers, duplicates, late)\n", stats.Consumed, stats.Stray)
	}
	return s
}
