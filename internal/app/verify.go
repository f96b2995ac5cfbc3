package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/inlet-dev/inlet/internal/verify"
)

// ParseVerify parses `inlet verify` arguments and environment into a config.
func ParseVerify(args []string, env Env) (verify.Config, error) {
	cfg := verify.Config{Load: verify.DefaultLoadConfig(), Brokers: []string{"127.0.0.1:9092"}, Topic: "events", Settle: 30 * time.Second}
	fs := newFlags("verify", env)
	l := &cfg.Load
	fs.StringVar(&l.Target, "target", l.Target, "the gateway to check: http://host:port or https://host:port")
	fs.StringVar(&l.TLSCAFile, "tls-ca", "", "PEM `file` of the CAs that sign an https:// --target's certificate (default: the system's)")
	fs.BoolVar(&l.TLSInsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any certificate of an https:// --target (insecure: for tests only)")
	cliflag.List(fs, &cfg.Brokers, "brokers", "Kafka seed brokers the gateway writes to, comma-separated host:port")
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "topic the gateway writes events to")
	fs.IntVar(&l.Events, "events", l.Events, "events to send")
	fs.DurationVar(&l.Duration, "duration", 0, "send for this long instead of a number of --events")
	fs.Float64Var(&l.Rate, "rate", 0, "events per second (0: as fast as the gateway answers)")
	fs.IntVar(&l.Concurrency, "concurrency", l.Concurrency, "requests in flight at most")
	fs.IntVar(&l.Batch, "batch", l.Batch, "events per request")
	fs.DurationVar(&l.Timeout, "timeout", l.Timeout, "time limit of one request")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long to wait for acknowledged events to arrive in the topic before declaring them lost")
	fs.StringVar(&l.Run, "run", "", "run id: event ids are <run>-<n> (default: a new one)")
	cfg.Security.RegisterFlags(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	if l.Run == "" {
		l.Run = verify.NewRun()
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return errUsage
	}
	if l.Duration != 0 {
		if given["events"] {
			return cfg, usage(errors.New("verify: give --events or --duration, not both"))
		}
		l.Events = 0
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

func runVerify(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseVerify(args, env)
	if err != nil {
		return err
	}
	return verify.Main(ctx, cfg, env.Stdout, env.Stderr)
}
