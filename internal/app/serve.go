package app

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
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
	cfg.Version = shortVersion()
	g, err := gateway.Start(cfg, log)
	if err != nil {
		return err
	}
	if cfg.TLSCert != "" {
		// Errors are logged, the certificate in use kept.
		defer onHangup(func() { _ = g.ReloadTLS() })()
	}
	brokers := strings.Join(cfg.Brokers, ",")
	if brokers == "" {
		brokers = g.BrokerAddr()
	}
	printBanner(env.Stdout, bannerInfo{http: g.Addr(), https: g.TLSAddr(), ops: g.OpsAddr(), broker: g.BrokerAddr(),
		brokers: brokers, cmd: commandName()}, cfg)
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
