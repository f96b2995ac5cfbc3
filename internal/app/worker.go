package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/inlet-dev/inlet/internal/worker"
)

// ParseWorker parses `inlet worker` arguments and environment into the
// worker's config and its handler's.
func ParseWorker(args []string, env Env) (worker.Config, worker.HandlerConfig, *logConfig, error) {
	cfg := worker.Config{
		Brokers:          []string{"127.0.0.1:9092"},
		Concurrency:      worker.DefaultConcurrency,
		StopTimeout:      worker.DefaultStopTimeout,
		ReplyLinger:      worker.DefaultReplyLinger,
		ReplyCompression: "none",
	}
	var hc worker.HandlerConfig
	lc := &logConfig{}
	fs := newFlags("worker", env)
	cfg.RegisterFlags(fs)
	hc.RegisterFlags(fs)
	lc.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, hc, lc, err
	}
	err := cfg.Validate()
	switch {
	case cfg.Concurrency <= 0:
		err = errors.New("worker: --concurrency must be positive")
	case cfg.StopTimeout <= 0:
		err = errors.New("worker: --stop-timeout must be positive")
	case err == nil:
		_, err = hc.New()
	}
	if err != nil {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return cfg, hc, lc, errUsage
	}
	return cfg, hc, lc, nil
}

func runWorker(ctx context.Context, args []string, env Env) error {
	cfg, hc, lc, err := ParseWorker(args, env)
	if err != nil {
		return err
	}
	if cfg.Log, err = lc.logger(env.Stderr); err != nil {
		return err
	}
	h, err := hc.New()
	if err != nil {
		return err
	}
	return worker.Run(ctx, cfg, h)
}
