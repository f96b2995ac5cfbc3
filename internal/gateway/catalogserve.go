package gateway

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/catalogrpc"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/membudget"
)

// CatalogConfig is the configuration of `inlet catalog serve`: the catalog
// alone, over gRPC and Thrift, without Kafka or HTTP ingest.
type CatalogConfig struct {
	Catalog catalog.Config
	Auth    auth.Config
	RPC     catalogrpc.Config
	// RedisAddr (--redis) is the shared store; DataDir (--data-dir) holds
	// the embedded one (<data-dir>/catalog.db) when there is no Redis.
	RedisAddr string
	DataDir   string
	// MetricsListen (--metrics-listen) serves Prometheus metrics at
	// /metrics; "" for none.
	MetricsListen   string
	ShutdownTimeout time.Duration
	// MaxInflightBytes (--max-inflight-bytes) is the in-flight byte budget
	// the gRPC and Thrift requests draw from before they are read.
	MaxInflightBytes int64
}

// DefaultCatalogConfig returns the documented defaults.
func DefaultCatalogConfig() CatalogConfig {
	return CatalogConfig{
		Catalog:          catalog.DefaultConfig(),
		Auth:             auth.DefaultConfig(),
		RPC:              catalogrpc.DefaultConfig(),
		DataDir:          ".inlet",
		ShutdownTimeout:  10 * time.Second,
		MaxInflightBytes: catalogrpc.DefaultBudgetBytes,
	}
}

// RegisterFlags registers c's flags on fs. --catalog and --auth, which
// turn the catalog and credentials on for HTTP ingest, are left out: both
// are always on here.
func (c *CatalogConfig) RegisterFlags(fs *flag.FlagSet) {
	cliflag.Register(fs, c.Catalog.RegisterFlags, cliflag.Except("catalog"))
	cliflag.Register(fs, c.Auth.RegisterFlags, cliflag.Except("auth"))
	c.RPC.RegisterFlags(fs)
	fs.StringVar(&c.RedisAddr, "redis", c.RedisAddr, "Redis `host:port` of the shared catalog (several instances on one Redis assign each event type one code) and of clients' rates shared across instances (--rate-limit-store)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the embedded catalog (<data-dir>/catalog.db), used when there is no --redis")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "serve Prometheus metrics at http://ADDR/metrics; off unless given")
	cliflag.Bytes(fs, &c.MaxInflightBytes, "max-inflight-bytes", "in-flight byte budget the gRPC and Thrift requests draw from before they are read; they hold at most a quarter of it together, half of that on connections not yet authenticated (KiB, MiB, GiB)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGTERM/SIGINT, time for calls in flight to finish before they are cut")
}

// Validate reports the first bad setting, before anything is opened.
func (c *CatalogConfig) Validate() error {
	switch {
	case c.Auth.ClientsFile == "":
		return errors.New("catalog serve: --clients FILE is needed: every call carries client credentials (make the file with `inlet clients add --file FILE NAME`)")
	case !c.RPC.Enabled():
		return errors.New("catalog serve: give --grpc-listen ADDR, --thrift-listen ADDR or both")
	case c.ShutdownTimeout <= 0:
		return errors.New("catalog serve: --shutdown-timeout must be positive")
	}
	gc := c.gateway()
	return gc.validateCatalog()
}

// gateway is c as the gateway's Config of its parts.
func (c *CatalogConfig) gateway() Config {
	gc := Config{Catalog: c.Catalog, Auth: c.Auth, CatalogRPC: c.RPC, RedisAddr: c.RedisAddr, DataDir: c.DataDir, ShutdownTimeout: c.ShutdownTimeout}
	gc.Catalog.RedisAddr = c.RedisAddr
	gc.Catalog.Path = filepath.Join(c.DataDir, "catalog.db")
	gc.CatalogRPC.Budget = membudget.NewShared(c.MaxInflightBytes, c.MaxInflightBytes/membudget.ConnShareDivisor)
	return gc
}

// StartCatalog starts `inlet catalog serve` on the gateway's lifecycle:
// the client credentials, the catalog, its gRPC and Thrift servers and,
// with MetricsListen, the metrics server. They serve when it returns;
// Shutdown stops them in the reverse order, calls in flight finishing
// within ShutdownTimeout. Done carries the error of a server that failed:
// the servers are all it does, so the caller stops. If a step fails,
// StartCatalog stops what it started and returns the error. Of the
// Gateway's methods, only GRPCAddr, ThriftAddr, Done and Shutdown apply.
func StartCatalog(cfg CatalogConfig, log *slog.Logger) (g *Gateway, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g = &Gateway{cfg: cfg.gateway(), log: log, lc: lifecycle{log: log}, served: make(chan error, 1), catalogOnly: true}
	defer g.undoFailedStart(&err)
	g.reg = prometheus.NewRegistry()
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := g.startCatalog(); err != nil {
		return nil, fmt.Errorf("catalog serve: %w", err)
	}
	if err := g.startCatalogRPC(); err != nil {
		return nil, fmt.Errorf("catalog serve: %w", err)
	}
	if cfg.MetricsListen != "" {
		if err := g.startMetrics(cfg.MetricsListen); err != nil {
			return nil, fmt.Errorf("catalog serve: %w", err)
		}
	}
	return g, nil
}

// startMetrics serves /metrics alone on addr (catalog serve's
// --metrics-listen).
func (g *Gateway) startMetrics(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s (--metrics-listen): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveErr(hs.Serve(l)); err != nil {
			g.fail(fmt.Errorf("metrics server: %w", err))
		}
	}()
	g.lc.started("metrics server", 1, func(ctx context.Context) error {
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
		<-done
		return nil
	})
	g.log.Info("serving metrics", "addr", l.Addr().String())
	return nil
}

// fail reports on Done that a server of catalog serve failed; the first
// failure is kept.
func (g *Gateway) fail(err error) {
	select {
	case g.served <- err:
	default:
	}
}
