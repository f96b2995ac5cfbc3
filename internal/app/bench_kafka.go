package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/inlet-dev/inlet/internal/bench"
)

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
func ParseBenchKafka(args []string, env Env) (loadclient.KafkaBenchConfig, error) {
	cfg := loadclient.KafkaBenchConfig{Run: bench.DefaultConfig(), Kafka: loadclient.DefaultKafkaConfig()}
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
	return loadclient.RunKafka(ctx, cfg, env.Stdout, env.Stderr)
}
