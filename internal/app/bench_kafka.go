package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/bench/report"
	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/inlet-dev/inlet/internal/bench"
)

// BenchKafkaConfig configures `inlet bench kafka`.
type BenchKafkaConfig struct {
	Run   bench.Config
	Kafka loadclient.KafkaConfig
	// Records, if positive, measures that many records instead of
	// Run.Duration; WarmupRecords, if positive, leaves that many out first
	// instead of Run.Warmup.
	Records, WarmupRecords int64
	// Report files: JSON ("-" for stdout), HdrHistogram percentiles, HTML.
	JSON, Hgrm, HTML string
	// Command is the command line, for the reports.
	Command string
}

// Validate reports the first invalid setting.
func (c BenchKafkaConfig) Validate() error {
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

// reports is the part of an HTTP bench config the report writers read.
func (c BenchKafkaConfig) reports() BenchHTTPConfig {
	return BenchHTTPConfig{JSON: c.JSON, Hgrm: c.Hgrm, HTML: c.HTML, Command: c.Command}
}

// warmupFlag is --warmup: a time (5s) or a number of records (10000).
type warmupFlag struct {
	d *time.Duration
	n *int64
}

func (f warmupFlag) String() string {
	if f.n != nil && *f.n > 0 {
		return strconv.FormatInt(*f.n, 10)
	}
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f warmupFlag) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		*f.n, *f.d = n, 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("invalid warmup %q: want a time such as 5s or a number of records", s)
	}
	*f.d, *f.n = d, 0
	return nil
}

// ParseBenchKafka parses `inlet bench kafka` arguments and environment.
func ParseBenchKafka(args []string, env Env) (BenchKafkaConfig, error) {
	cfg := BenchKafkaConfig{Run: bench.DefaultConfig(), Kafka: loadclient.DefaultKafkaConfig()}
	cfg.Run.Timeout = 30 * time.Second
	r, k := &cfg.Run, &cfg.Kafka
	fs := newFlags("bench kafka", env)
	var brokers []string
	cliflag.List(fs, &brokers, "brokers", "Kafka seed brokers, `host:port,...` (required)")
	fs.StringVar(&k.Topic, "topic", k.Topic, "topic to produce to (created with the broker's defaults if missing)")
	fs.IntVar(&k.RecordBytes, "record-size", k.RecordBytes, "bytes of each record's value")
	fs.Int64Var(&cfg.Records, "records", 0, "measure this many records (instead of --duration)")
	fs.DurationVar(&r.Duration, "duration", r.Duration, "measured time (without --records)")
	fs.Float64Var(&r.Rate, "throughput", 0, "open loop: records per second, latency from each record's intended send time (0: as fast as possible, closed loop)")
	fs.IntVar(&k.InFlight, "concurrency", k.InFlight, "records in flight at most: closed loop, produce calls each waiting for its answer; open loop, the bound past which records are late")
	fs.StringVar(&k.Acks, "acks", k.Acks, "all (idempotent producer), 1 or 0 (without idempotence)")
	fs.DurationVar(&k.Linger, "linger", k.Linger, "how long the producer waits to fill a batch")
	fs.StringVar(&k.Compression, "compression", k.Compression, "batch compression: none, gzip, snappy, lz4 or zstd")
	fs.Var(warmupFlag{&r.Warmup, &cfg.WarmupRecords}, "warmup", "`time|records`: a time (5s) or a number of records (10000) run first and left out of every figure")
	fs.BoolVar(&k.E2E, "e2e", false, "end to end: a consumer of the topic in this process ends each record's wait; latency is from (intended) produce to consume")
	fs.StringVar(&k.ClientID, "client-id", k.ClientID, "Kafka client id")
	fs.DurationVar(&r.Timeout, "timeout", r.Timeout, "time limit of one record")
	fs.DurationVar(&r.MaxLag, "max-lag", r.MaxLag, "open loop: a record that cannot be sent within this of its intended time is dropped (generator overload)")
	reportFlags(fs, &cfg.JSON, &cfg.Hgrm, &cfg.HTML, nil)
	k.Security.RegisterFlags(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	k.Brokers = brokers
	r.Workers = k.InFlight
	cfg.Command = "inlet bench kafka " + strings.Join(args, " ")
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return errUsage
	}
	switch {
	case len(k.Brokers) == 0:
		return cfg, usage(errors.New("bench: --brokers is required (host:port,...)"))
	case given["records"] && given["duration"]:
		return cfg, usage(errors.New("bench: --records or --duration, not both"))
	case given["records"] && cfg.Records <= 0:
		return cfg, usage(errors.New("bench: --records must be positive"))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

func runBenchKafka(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseBenchKafka(args, env)
	if err != nil {
		return err
	}
	files, err := createReportFiles(cfg.reports())
	if err != nil {
		return err
	}
	defer files.close()
	rep, stats, err := BenchKafka(ctx, cfg, env.Stderr)
	if err != nil {
		return err
	}
	if err := writeBenchReports(rep, cfg.reports(), files, env); err != nil {
		return err
	}
	summary := env.Stdout
	if cfg.JSON == "-" {
		summary = env.Stderr
	}
	_, err = io.WriteString(summary, perfTestLine(rep, cfg.Kafka, stats))
	return err
}

// BenchKafka runs `inlet bench kafka`. It writes the start of the run to
// progress, and a live progress line once a second if progress is a
// terminal. stats is nil unless the run is end to end.
func BenchKafka(ctx context.Context, cfg BenchKafkaConfig, progress io.Writer) (rep *report.Report, stats *loadclient.KafkaStats, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	target, err := loadclient.NewKafka(setup, cfg.Kafka)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	defer target.Close()
	r := cfg.Run
	mode := fmt.Sprintf("closed loop, %d records in flight", r.Workers)
	if r.Open() {
		mode = fmt.Sprintf("open loop at %g records/s, %d in flight at most", r.Rate, r.Workers)
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
	live := isTerminal(progress)
	if live {
		r.Progress = func(p bench.Progress) { fmt.Fprintf(progress, "\r\x1b[K%s", progressLine(p)) }
	}
	rep, err = bench.RunCount(ctx, r, cfg.WarmupRecords, cfg.Records, target.Do)
	if live {
		fmt.Fprint(progress, "\r\x1b[K")
	}
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
func perfTestLine(rep *report.Report, k loadclient.KafkaConfig, stats *loadclient.KafkaStats) string {
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
