package app

import (
	"context"
	"errors"
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

// CatalogServeConfig is the configuration of `inlet catalog serve`: the
// catalog alone, over gRPC and Thrift, without Kafka.
type CatalogServeConfig struct {
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

// ParseCatalogServe parses `inlet catalog serve` arguments and environment.
func ParseCatalogServe(args []string, env Env) (CatalogServeConfig, *logConfig, error) {
	cfg := CatalogServeConfig{
		Catalog:          catalog.DefaultConfig(),
		Auth:             auth.DefaultConfig(),
		RPC:              catalogrpc.DefaultConfig(),
		DataDir:          ".inlet",
		ShutdownTimeout:  10 * time.Second,
		MaxInflightBytes: catalogrpc.DefaultBudgetBytes,
	}
	fs := newFlags("catalog serve", env)
	// --catalog and --auth turn the catalog and credentials on for HTTP
	// ingest, which catalog serve has not: both are always on here.
	registerExcept(fs, cfg.Catalog.RegisterFlags, "catalog")
	registerExcept(fs, cfg.Auth.RegisterFlags, "auth")
	cfg.RPC.RegisterFlags(fs)
	fs.StringVar(&cfg.RedisAddr, "redis", cfg.RedisAddr, "Redis `host:port` of the shared catalog (several instances on one Redis assign each event type one code)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the embedded catalog (<data-dir>/catalog.db), used when there is no --redis")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "serve Prometheus metrics at http://ADDR/metrics; off unless given")
	cliflag.Bytes(fs, &cfg.MaxInflightBytes, "max-inflight-bytes", "in-flight byte budget the gRPC and Thrift requests draw from before they are read; they hold at most a quarter of it together, half of that on connections not yet authenticated (KiB, MiB, GiB)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "on SIGTERM/SIGINT, time for calls in flight to finish before they are cut")
	lc := &logConfig{}
	lc.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, nil, err
	}
	cfg.Catalog.RedisAddr = cfg.RedisAddr
	cfg.Catalog.Path = filepath.Join(cfg.DataDir, "catalog.db")
	return cfg, lc, nil
}

// Validate reports the first bad setting, before anything is opened.
func (c *CatalogServeConfig) Validate() error {
	if c.Auth.ClientsFile == "" {
		return errors.New("catalog serve: --clients FILE is needed: every call carries client credentials (make the file with `inlet clients add --file FILE NAME`)")
	}
	if !c.RPC.Enabled() {
		return errors.New("catalog serve: give --grpc-listen ADDR, --thrift-listen ADDR or both")
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("catalog serve: --shutdown-timeout must be positive")
	}
	if err := c.Catalog.Validate(); err != nil {
		return err
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	return c.RPC.Validate()
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
	return CatalogServe(ctx, cfg, log, nil)
}

// CatalogServe runs the catalog's RPC servers until ctx is cancelled, then
// shuts them down gracefully (within cfg.ShutdownTimeout) and returns nil.
// ready, when not nil, is called with the servers' addresses once they
// listen. A server that fails ends the others and is the error returned.
func CatalogServe(ctx context.Context, cfg CatalogServeConfig, log *slog.Logger, ready func(grpcAddr, thriftAddr string)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	au, err := auth.Open(cfg.Auth, log, reg)
	if err != nil {
		return fmt.Errorf("catalog serve: %w", err)
	}
	defer au.Close()
	cat, err := catalog.Open(cfg.Catalog, log, reg)
	if err != nil {
		return fmt.Errorf("catalog serve: %w", err)
	}
	defer cat.Close()
	cfg.RPC.Budget = membudget.NewShared(cfg.MaxInflightBytes, cfg.MaxInflightBytes/membudget.ConnShareDivisor)
	srv, err := catalogrpc.New(cat, au, cfg.RPC, log, reg)
	if err != nil {
		return fmt.Errorf("catalog serve: %w", err)
	}

	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	listen := func(flag, addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("catalog serve: %s %s: %w", flag, addr, err)
		}
		listeners = append(listeners, l)
		return l, nil
	}
	errc := make(chan error, 3)
	var grpcAddr, thriftAddr, metricsAddr string
	var gl, tl, ml net.Listener
	if cfg.RPC.GRPCListen != "" {
		if gl, err = listen("--grpc-listen", cfg.RPC.GRPCListen); err != nil {
			return err
		}
		grpcAddr = gl.Addr().String()
	}
	if cfg.RPC.ThriftListen != "" {
		if tl, err = listen("--thrift-listen", cfg.RPC.ThriftListen); err != nil {
			return err
		}
		thriftAddr = tl.Addr().String()
	}
	var hs *http.Server
	if cfg.MetricsListen != "" {
		if ml, err = listen("--metrics-listen", cfg.MetricsListen); err != nil {
			return err
		}
		metricsAddr = ml.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("catalog serve: metrics server: %w", err)
			}
		}()
	}
	if gl != nil {
		go func() { errc <- srv.ServeGRPC(gl) }()
	}
	if tl != nil {
		go func() { errc <- srv.ServeThrift(tl) }()
	}
	log.Info("catalog serving", "grpc", grpcAddr, "thrift", thriftAddr, "thrift_transport", cfg.RPC.ThriftTransport,
		"metrics", metricsAddr, "store", cfg.Catalog.StoreKind(), "mode", cfg.Catalog.Mode, "clients", cfg.Auth.ClientsFile)
	if ready != nil {
		ready(grpcAddr, thriftAddr)
	}

	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case err := <-errc:
		if err != nil {
			failed = err
			log.Error("catalog server failed; stopping", "err", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil && failed == nil {
		return fmt.Errorf("catalog serve: shutting down: %w", err)
	}
	if failed != nil {
		return failed
	}
	log.Info("stopped")
	return nil
}
