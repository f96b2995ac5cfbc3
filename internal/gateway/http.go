package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/http2"
)

// routes adds the gateway's own endpoints to mux.
func (g *Gateway) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", serveHealth)
	mux.HandleFunc("GET /readyz", g.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	if g.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
}

// newServer is the HTTP server: HTTP/1.1 and HTTP/2 without TLS (h2c), so a
// caller with many requests in flight needs few connections.
func newServer(cfg Config, h http.Handler, log *slog.Logger) (*http.Server, error) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		// An answer may wait for the body, then for Kafka.
		WriteTimeout:   cfg.ReadTimeout + cfg.Ingest.WriteTimeout + 5*time.Second,
		IdleTimeout:    cfg.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Protocols:      new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	// x/net's HTTP/2 server with its random write scheduler: net/http's
	// round-robin one scans every open stream of a connection per frame,
	// 46% of the CPU with 2,000 calls waiting on one connection
	// (BENCHMARKS.md). TestHTTP2Tuning fails when this stops taking effect
	// (x/net hands HTTP/2 to net/http from Go 1.27).
	if err := http2.ConfigureServer(srv, &http2.Server{
		MaxConcurrentStreams: uint32(cfg.HTTP2MaxStreams),
		IdleTimeout:          cfg.IdleTimeout,
		NewWriteScheduler:    func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() },
	}); err != nil {
		return nil, fmt.Errorf("configuring HTTP/2: %w", err)
	}
	return srv, nil
}

func (g *Gateway) startHTTP(mux *http.ServeMux) error {
	srv, err := newServer(g.cfg, mux, g.log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.cfg.Listen, err)
	}
	g.srv, g.ln = srv, ln
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := serveErr(srv.Serve(ln)); err != nil {
			g.served <- err
		}
		close(g.served)
	}()
	g.lc.started("HTTP server", weightHTTP, func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil {
			// Requests still running were not answered, so nothing they
			// carried was acknowledged: their clients retry.
			g.log.Warn("requests still in flight at their share of the shutdown deadline; closing their connections", "err", err)
			_ = srv.Close()
		}
		<-done
		return nil
	})
	return nil
}
