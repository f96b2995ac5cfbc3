package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/gateway"
)

// ParseServe parses `inlet serve` arguments, environment and config file
// into a config.
func ParseServe(args []string, env Env) (gateway.Config, *logConfig, error) {
	cfg, lc, _, err := parseServe(args, env)
	return cfg, lc, err
}

// serveCommand is a parsed command that reads a config file.
type serveCommand struct {
	fs     *flag.FlagSet
	parsed *cliflag.Parsed
	file   fileConfig
}

// printConfig prints the configuration in effect (--print-config).
func (c *serveCommand) printConfig(w io.Writer) error {
	return cliflag.PrintConfig(w, c.fs, serveLayout, c.parsed, "config")
}

func parseServe(args []string, env Env) (gateway.Config, *logConfig, *serveCommand, error) {
	cfg := gateway.DefaultConfig()
	c := &serveCommand{fs: newFlags("serve", env)}
	cfg.RegisterFlags(c.fs)
	lc := &logConfig{}
	lc.register(c.fs)
	c.file.register(c.fs)
	var err error
	c.parsed, err = parseLayered(c.fs, args, env, "Usage: inlet serve [flags]\n\nTakes events over HTTP and delivers them to Kafka.\n")
	return cfg, lc, c, err
}

// ParseCatalogServe parses `inlet catalog serve` arguments, environment
// and config file.
func ParseCatalogServe(args []string, env Env) (gateway.CatalogConfig, *logConfig, error) {
	cfg, lc, _, err := parseCatalogServe(args, env)
	return cfg, lc, err
}

func parseCatalogServe(args []string, env Env) (gateway.CatalogConfig, *logConfig, *serveCommand, error) {
	cfg := gateway.DefaultCatalogConfig()
	c := &serveCommand{fs: newFlags("catalog serve", env)}
	cfg.RegisterFlags(c.fs)
	lc := &logConfig{}
	lc.register(c.fs)
	c.file.register(c.fs)
	var err error
	c.parsed, err = parseLayered(c.fs, args, env, "Usage: inlet catalog serve [flags]\n\nServes the event catalog over gRPC and Thrift.\n")
	return cfg, lc, c, err
}

// serveGOGC is the garbage collector's target of inlet serve unless GOGC is
// set in the environment (as Prometheus sets 75): most of what the gateway
// holds under load is live (calls waiting for replies, records waiting for
// Kafka), so the default of 100 doubles it. BENCHMARKS.md has the figures.
const serveGOGC = 50

func runServe(ctx context.Context, args []string, env Env) error {
	cfg, lc, c, err := parseServe(args, env)
	if err != nil {
		return err
	}
	if c.file.print {
		return c.printConfig(env.Stdout)
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	if c.parsed.File != "" {
		log.Info("config file read", "path", c.parsed.File)
	}
	if env.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	cfg.Version = shortVersion()
	g, err := gateway.Start(cfg, log)
	if err != nil {
		return err
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
	cfg, lc, c, err := parseCatalogServe(args, env)
	if err != nil {
		return err
	}
	if c.file.print {
		return c.printConfig(env.Stdout)
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	if c.parsed.File != "" {
		log.Info("config file read", "path", c.parsed.File)
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
	if g.Reloadable() {
		// Errors are logged, the files in use kept.
		defer onHangup(func() { _ = g.Reload() })()
	}
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
