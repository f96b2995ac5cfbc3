package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/inlet-dev/inlet/internal/worker"
)

// WorkerConfig configures `inlet worker`: exactly one of Echo, HTTP and
// Exec says how requests are answered.
type WorkerConfig struct {
	Worker worker.Config
	// Echo answers each request with its own body after a uniformly random
	// delay in [MinDelay, MaxDelay].
	Echo               bool
	MinDelay, MaxDelay time.Duration
	// HTTP is the URL each request is POSTed to.
	HTTP string
	// Exec is the shell command run for each request.
	Exec string

	log logConfig
}

// Validate reports the first invalid setting.
func (c WorkerConfig) Validate() error {
	n := 0
	for _, set := range []bool{c.Echo, c.HTTP != "", c.Exec != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return errors.New("worker: give exactly one of --echo, --http URL and --exec CMD")
	case !c.Echo && (c.MinDelay != 0 || c.MaxDelay != 0):
		return errors.New("worker: --min-delay and --max-delay go with --echo")
	case c.MinDelay < 0 || c.MaxDelay < c.MinDelay:
		return errors.New("worker: want 0 <= --min-delay <= --max-delay")
	}
	return c.Worker.Validate()
}

// handler builds the handler the config names.
func (c WorkerConfig) handler() (worker.Handler, error) {
	switch {
	case c.Echo:
		return worker.Echo(c.MinDelay, c.MaxDelay), nil
	case c.HTTP != "":
		return worker.HTTP(c.HTTP, nil)
	case c.Exec != "":
		return worker.Exec(c.Exec), nil
	}
	return nil, errors.New("worker: no handler")
}

// ParseWorker parses `inlet worker` arguments and environment into a config.
func ParseWorker(args []string, env Env) (WorkerConfig, error) {
	cfg := WorkerConfig{Worker: worker.Config{
		Brokers:     []string{"127.0.0.1:9092"},
		Concurrency: worker.DefaultConcurrency,
		StopTimeout: worker.DefaultStopTimeout,
	}}
	w := &cfg.Worker
	fs := newFlags("worker", env)
	fs.StringVar(&w.Service, "service", "", "`NAME` of the service to answer (required)")
	cliflag.List(fs, &w.Brokers, "brokers", "Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&w.Topic, "topic", "", "request topic (default rpc.<service>)")
	fs.StringVar(&w.Group, "group", "", "consumer group; a new one starts a minute back in the topic, older requests being past their deadline (default inlet-worker.<service>)")
	fs.IntVar(&w.Concurrency, "concurrency", w.Concurrency, "requests handled at once at most; when all are busy, fetching waits")
	fs.DurationVar(&w.ReplyLinger, "reply-linger", worker.DefaultReplyLinger, "how long Kafka replies wait to share a produce request (fewer requests for the broker)")
	fs.StringVar(&w.ReplyCompression, "reply-compression", "none", "batch compression of replies to Kafka: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&w.RedisAddr, "redis", "", "Redis `host:port` for replies addressed redis:<channel>")
	fs.DurationVar(&w.StopTimeout, "stop-timeout", w.StopTimeout, "on SIGINT/SIGTERM, how long requests in flight may take to finish")
	fs.BoolVar(&cfg.Echo, "echo", false, "answer each request with its own body and content type")
	fs.DurationVar(&cfg.MinDelay, "min-delay", 0, "with --echo: least synthetic work per request")
	fs.DurationVar(&cfg.MaxDelay, "max-delay", 0, "with --echo: most synthetic work per request (uniformly random between the two)")
	fs.StringVar(&cfg.HTTP, "http", "", "POST each request to `URL`; its response is the reply")
	fs.StringVar(&cfg.Exec, "exec", "", "run `CMD` with sh -c per request: request body on stdin, reply body on stdout; a non-zero exit is an error")
	w.Security.RegisterFlags(fs)
	cfg.log.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	if cfg.Echo && cfg.MaxDelay == 0 {
		cfg.MaxDelay = cfg.MinDelay // --min-delay alone: a fixed delay
	}
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return errUsage
	}
	if w.Concurrency <= 0 {
		return cfg, usage(errors.New("worker: --concurrency must be positive"))
	}
	if w.StopTimeout <= 0 {
		return cfg, usage(errors.New("worker: --stop-timeout must be positive"))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	if _, err := cfg.handler(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

func runWorker(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseWorker(args, env)
	if err != nil {
		return err
	}
	log, err := cfg.log.logger(env.Stderr)
	if err != nil {
		return err
	}
	return Worker(ctx, cfg, log, nil)
}

// Worker answers requests as cfg says until ctx ends, then stops gracefully.
// m may be nil.
func Worker(ctx context.Context, cfg WorkerConfig, log *slog.Logger, m *worker.Metrics) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	h, err := cfg.handler()
	if err != nil {
		return err
	}
	wc := cfg.Worker
	wc.Log, wc.Metrics = log, m
	return worker.Run(ctx, wc, h)
}
