package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/catalogrpc"
	"github.com/inlet-dev/inlet/internal/ingest"
)

// catalogConfig is c.Catalog with where its store lives: RedisAddr from
// --redis, Path <data-dir>/catalog.db, unless set.
func (c Config) catalogConfig() catalog.Config {
	cc := c.Catalog
	if cc.RedisAddr == "" {
		cc.RedisAddr = c.RedisAddr
	}
	if cc.Path == "" {
		cc.Path = filepath.Join(c.DataDir, "catalog.db")
	}
	return cc
}

// authConfig is c.Auth with RedisAddr from --redis, where clients' rates
// are kept unless --rate-limit-store local.
func (c Config) authConfig() auth.Config {
	ac := c.Auth
	ac.RedactKey = c.Ingest.Privacy.RedactKeyFile != "" // hash rules need it
	if ac.RedisAddr == "" {
		ac.RedisAddr = c.RedisAddr
	}
	return ac
}

// needsCatalog reports whether the catalog is opened: for ingest
// (--catalog) or for its RPC front ends.
func (c Config) needsCatalog() bool { return c.Catalog.Enabled || c.CatalogRPC.Enabled() }

// startCatalog opens the client credentials (with --clients) and the
// catalog (with --catalog or an RPC listener), and returns the options
// that hand them to ingest: credentials with --auth, the catalog with
// --catalog.
func (g *Gateway) startCatalog() ([]ingest.Option, error) {
	var opts []ingest.Option
	if g.cfg.Auth.ClientsFile != "" {
		au, err := auth.Open(g.cfg.authConfig(), g.log, g.reg)
		if err != nil {
			return nil, err
		}
		g.auth = au
		g.lc.started("client credentials", 0, func(context.Context) error { return au.Close() })
		if g.cfg.Auth.HTTP {
			opts = append(opts, ingest.WithAuth(au))
		}
	}
	if !g.cfg.needsCatalog() {
		return opts, nil
	}
	cc := g.cfg.catalogConfig()
	if cc.StoreKind() == catalog.StoreEmbedded {
		if err := os.MkdirAll(filepath.Dir(cc.Path), 0o755); err != nil {
			return nil, fmt.Errorf("catalog: making the directory of %s: %w", cc.Path, err)
		}
	}
	cat, err := catalog.Open(cc, g.log, g.reg)
	if err != nil {
		return nil, err
	}
	g.catalog = cat
	g.lc.started("catalog", 0, func(context.Context) error {
		if err := cat.Close(); err != nil {
			return fmt.Errorf("closing the catalog: %w", err)
		}
		return nil
	})
	if !g.catalogOnly { // which has no /readyz to report to
		g.catalogCheck = newCatalogCheck(cat, cc, g.cfg.ReadyInterval)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); g.catalogCheck.run(ctx) }()
		g.lc.started("catalog check", 0, func(context.Context) error { cancel(); <-done; return nil })
	}
	if g.cfg.Catalog.Enabled {
		opts = append(opts, ingest.WithCatalog(cat))
	}
	g.log.Info("catalog open", "store", cc.StoreKind(), "mode", cc.Mode, "ingest", g.cfg.Catalog.Enabled,
		"auth", g.cfg.Auth.HTTP, "clients", g.cfg.Auth.ClientsFile)
	return opts, nil
}

// startCatalogRPC serves the catalog over gRPC (--grpc-listen) and Thrift
// (--thrift-listen). Their stop shuts both down gracefully within its
// share of the shutdown budget: calls in flight finish, then connections
// are closed.
func (g *Gateway) startCatalogRPC() error {
	rc := g.cfg.CatalogRPC
	if !rc.Enabled() {
		return nil
	}
	if !g.catalogOnly {
		rc.Budget = g.ingest.Budget() // gRPC and Thrift requests draw from the HTTP bodies' budget
	}
	srv, err := catalogrpc.New(g.catalog, g.auth, rc, g.log, g.reg)
	if err != nil {
		return err
	}
	var gl, tl net.Listener
	if rc.GRPCListen != "" {
		if gl, err = net.Listen("tcp", rc.GRPCListen); err != nil {
			return fmt.Errorf("listening on %s (--grpc-listen): %w", rc.GRPCListen, err)
		}
	}
	if rc.ThriftListen != "" {
		if tl, err = net.Listen("tcp", rc.ThriftListen); err != nil {
			if gl != nil {
				gl.Close()
			}
			return fmt.Errorf("listening on %s (--thrift-listen): %w", rc.ThriftListen, err)
		}
	}
	served := make(chan struct{}, 2)
	serve := func(name string, l net.Listener, fn func(net.Listener) error) {
		go func() {
			defer func() { served <- struct{}{} }()
			switch err := fn(l); {
			case err != nil && g.catalogOnly:
				g.fail(err)
			case err != nil:
				g.log.Error("the catalog's RPC server stopped; ingest goes on", "server", name, "err", err)
			}
		}()
	}
	n := 0
	if gl != nil {
		g.grpcLn = gl
		serve("grpc", gl, srv.ServeGRPC)
		n++
	}
	if tl != nil {
		g.thriftLn = tl
		serve("thrift", tl, srv.ServeThrift)
		n++
	}
	g.lc.started("catalog RPC servers", weightCatalogRPC, func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		for range n {
			<-served
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("stopping the catalog's RPC servers: %w", err)
		}
		if err != nil {
			g.log.Warn("catalog calls still in flight at their share of the shutdown deadline; their connections were closed", "err", err)
		}
		return nil
	})
	g.log.Info("catalog serving over RPC", "grpc", addrOf(gl), "thrift", addrOf(tl), "thrift_transport", rc.ThriftTransport)
	return nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// GRPCAddr is the address the catalog's gRPC server listens on; "" without
// --grpc-listen.
func (g *Gateway) GRPCAddr() string { return addrOf(g.grpcLn) }

// ThriftAddr is the address the catalog's Thrift server listens on; ""
// without --thrift-listen.
func (g *Gateway) ThriftAddr() string { return addrOf(g.thriftLn) }

// CatalogState is the catalog part of /readyz. The catalog never makes the
// gateway unready: with its store down ingest lets events through without
// a code (inlet_catalog_unresolved_events_total counts them).
type CatalogState struct {
	Store   string `json:"store"` // redis or embedded
	Mode    string `json:"mode"`
	Ingest  bool   `json:"ingest"`  // --catalog: events get codes
	Healthy string `json:"healthy"` // "ok" or why the store does not answer
}

// catalogCheck follows whether the catalog's store answers: a real read
// of a key, every interval (quickly while it fails), off the request path.
type catalogCheck struct {
	cat      *catalog.Catalog
	state    CatalogState
	interval time.Duration
	timeout  time.Duration
	why      atomic.Pointer[string]
}

// probeKey is the key the check reads: absent is an answer like any other.
var probeKey = catalog.Key{Group: "inlet", Name: "readiness-probe"}

func newCatalogCheck(cat *catalog.Catalog, cc catalog.Config, interval time.Duration) *catalogCheck {
	c := &catalogCheck{cat: cat, interval: interval, timeout: cc.Timeout,
		state: CatalogState{Store: cc.StoreKind(), Mode: string(cc.Mode), Ingest: cc.Enabled}}
	why := "not checked yet"
	c.why.Store(&why)
	if c.timeout <= 0 {
		c.timeout = time.Second
	}
	return c
}

func (c *catalogCheck) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := c.cat.Store().Get(pctx, probeKey)
		cancel()
		if ctx.Err() != nil {
			return
		}
		why := "ok"
		wait := c.interval
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			why = err.Error()
			wait = min(c.interval, 250*time.Millisecond)
		}
		c.why.Store(&why)
		t.Reset(wait)
	}
}

// report is the catalog's part of /readyz.
func (c *catalogCheck) report() *CatalogState {
	st := c.state
	st.Healthy = *c.why.Load()
	return &st
}
