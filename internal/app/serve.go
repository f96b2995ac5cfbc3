package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
)

// ParseServe parses `inlet serve` arguments and environment into a config.
func ParseServe(args []string, env Env) (gateway.Config, *logConfig, error) {
	cfg := gateway.DefaultConfig()
	fs := newFlags("serve", env)
	cfg.RegisterFlags(fs)
	lc := &logConfig{}
	lc.register(fs)
	return cfg, lc, parseFlags(fs, args, env)
}

// ParseCatalogServe parses `inlet catalog serve` arguments and environment.
func ParseCatalogServe(args []string, env Env) (gateway.CatalogConfig, *logConfig, error) {
	cfg := gateway.DefaultCatalogConfig()
	fs := newFlags("catalog serve", env)
	cfg.RegisterFlags(fs)
	lc := &logConfig{}
	lc.register(fs)
	return cfg, lc, parseFlags(fs, args, env)
}

// serveGOGC is the garbage collector's target of inlet serve unless GOGC is
// set in the environment (as Prometheus sets 75): most of what the gateway
// holds under load is live (calls waiting for replies, records waiting for
// Kafka), so the default of 100 doubles it. BENCHMARKS.md has the figures.
const serveGOGC = 50

func runServe(ctx context.Context, args []string, env Env) error {
	cfg, lc, err := ParseServe(args, env)
	if err != nil {
		return err
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	if env.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	g, err := gateway.Start(cfg, log)
	if err != nil {
		return err
	}
	if cfg.TLSCert != "" {
		// Errors are logged, the certificate in use kept.
		defer onHangup(func() { _ = g.ReloadTLS() })()
	}
	if b := g.BrokerAddr(); b != "" {
		printBanner(env.Stdout, g.Addr(), b, cfg)
	}
	return runGateway(ctx, g, cfg.ShutdownTimeout, log)
}

func runCatalogServe(ctx context.Context, args []string, env Env) error {
	cfg, lc, err := ParseCatalogServe(args, env)
	if err != nil {
		return err
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	g, err := gateway.StartCatalog(cfg, log)
	if err != nil {
		return err
	}
	return runGateway(ctx, g, cfg.ShutdownTimeout, log)
}

// runGateway serves until ctx ends or a server of g fails, then shuts g
// down within timeout: when ctx ends, after g's drain (--shutdown-delay),
// which a second signal cuts short. It returns the failure, or an error of
// the shutdown.
func runGateway(ctx context.Context, g *gateway.Gateway, timeout time.Duration, log *slog.Logger) error {
	var failed error
	select {
	case <-ctx.Done():
		dctx, skip := context.WithCancel(context.Background())
		unregister := onSignalAgain(skip)
		g.Drain(dctx)
		unregister()
		skip()
		log.Info("shutting down", "timeout", timeout)
	case failed = <-g.Done():
		if failed != nil {
			log.Error("a server failed; stopping", "err", failed)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := g.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if failed != nil {
		return failed
	}
	log.Info("stopped")
	return nil
}

func printBanner(w io.Writer, httpAddr, brokerAddr string, cfg gateway.Config) {
	fmt.Fprintf(w, `
inlet is listening on http://%[1]s, writing to topic %[3]q (ack=%[4]s).

  Development broker: %[2]s — a single-node Kafka-compatible broker inside
  this process, data under %[5]s. For development only: use --brokers in production.

  Send events:
    curl -H 'Content-Type: application/json' -d '[{"event":"page_view","uid":"u1","props":{"path":"/"}}]' http://%[1]s/v1/batch
  Read them:
    go run ./cmd/inlet tail --brokers %[2]s --topic %[3]s --from beginning
    kcat -b %[2]s -C -t %[3]s -f '%%k %%s\n'

`, httpAddr, brokerAddr, cfg.Ingest.Topic, cfg.Ack, cfg.DataDir)
}
