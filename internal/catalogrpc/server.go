package catalogrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/membudget"
)

// Catalog is what the front ends need of the catalog (*catalog.Catalog).
type Catalog interface {
	// Lookup returns the entry of k, assigning a code on first sight in
	// catalog mode open.
	Lookup(ctx context.Context, k catalog.Key) (catalog.Entry, error)
	// Get returns the entry of k; catalog.ErrNotFound if there is none.
	Get(ctx context.Context, k catalog.Key) (catalog.Entry, error)
	// List returns up to limit entries after the key after, in (group,
	// name) order; group "" for every group.
	List(ctx context.Context, group string, after catalog.Key, limit int) ([]catalog.Entry, error)
	// Update creates or changes k's entry with fn in one atomic
	// read-modify-write (see catalog.Catalog.Update).
	Update(ctx context.Context, k catalog.Key, fn func(e catalog.Entry, found bool) (catalog.Entry, error)) (catalog.Entry, error)
	// Block sets k's status to blocked, creating the entry if needed.
	Block(ctx context.Context, k catalog.Key) (catalog.Entry, error)
	// DefaultGroup is the group of a lookup that names none.
	DefaultGroup() string
}

// Authenticator is what the front ends need of client credentials
// (*auth.Authenticator).
type Authenticator interface {
	// AuthenticateFrom checks a client id and its secret or a session
	// token of a caller at source (an IP address, "" when unknown),
	// throttling a source that failed too often (auth.ErrThrottled).
	AuthenticateFrom(source, clientID, token string) (auth.Principal, error)
	// Allow admits n calls of p under its rate; auth.ErrRateLimited and how
	// long to wait when it is over.
	Allow(p auth.Principal, n int) (time.Duration, error)
	// AllowGroup reports auth.ErrForbidden when p may not use group.
	AllowGroup(p auth.Principal, group string) error
}

// Server serves one catalog over gRPC and Thrift.
type Server struct {
	cat Catalog
	au  Authenticator
	cfg Config
	log *slog.Logger
	m   *metrics

	grpc   *grpc.Server
	health *health.Server
	thrift *thriftServer

	// budget is what requests draw from before they are read; share is the
	// tally of both front ends' requests together, which may hold at most
	// budget.PerConn(); preAuth counts the part held by requests on
	// connections that have made no authenticated call, at most
	// preAuthMax (half the share), so that strangers cannot take what
	// clients that have presented credentials need.
	budget     *membudget.Budget
	share      *membudget.Conn
	preAuth    atomic.Int64
	preAuthMax int64

	mu       sync.Mutex
	shutdown bool
}

// New makes a server of cat, checking every call's credentials with au.
// reg may be nil (metrics not registered). Start it with ServeGRPC and
// ServeThrift, stop it with Shutdown.
func New(cat Catalog, au Authenticator, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if cat == nil || au == nil {
		return nil, errors.New("catalogrpc: a catalog and an authenticator are needed (every call carries credentials: give --clients)")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cat: cat, au: au, cfg: cfg, log: log, m: newMetrics(reg), budget: cfg.Budget, share: new(membudget.Conn)}
	if s.budget == nil {
		s.budget = membudget.NewShared(DefaultBudgetBytes, DefaultBudgetBytes/membudget.ConnShareDivisor)
	}
	s.preAuthMax = s.budget.PerConn() / 2
	if s.preAuthMax < s.streamBytes() {
		return nil, fmt.Errorf("catalogrpc: the catalog's RPC may hold %d bytes of the in-flight budget before authentication (an eighth of --max-inflight-bytes), less than one call of --catalog-rpc-max-message-bytes %d needs (%d): raise the one or lower the other", s.preAuthMax, cfg.MaxMessageBytes, s.streamBytes())
	}
	s.grpc, s.health = s.newGRPC()
	s.thrift = s.newThrift()
	return s, nil
}

// ServeGRPC serves gRPC on l until Shutdown; it returns nil after Shutdown.
func (s *Server) ServeGRPC(l net.Listener) error {
	if s.isShutdown() {
		l.Close()
		return nil
	}
	err := s.grpc.Serve(s.limitListener(l, "grpc"))
	if errors.Is(err, grpc.ErrServerStopped) || s.isShutdown() {
		return nil
	}
	return fmt.Errorf("catalog gRPC server on %s: %w", l.Addr(), err)
}

// ServeThrift serves Thrift on l until Shutdown; it returns nil after
// Shutdown.
func (s *Server) ServeThrift(l net.Listener) error {
	return s.thrift.serve(l)
}

// Shutdown stops both front ends gracefully: they stop accepting, the
// health service answers NOT_SERVING, idle connections are closed and calls
// in flight may finish until ctx ends; then every connection is closed.
// It returns ctx's error if calls were cut.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	s.health.Shutdown()

	var wg sync.WaitGroup
	var thriftErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		thriftErr = s.thrift.shutdown(ctx)
	}()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	var grpcErr error
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
		grpcErr = ctx.Err()
	}
	wg.Wait()
	if grpcErr != nil || thriftErr != nil {
		return fmt.Errorf("catalog RPC servers: calls in flight were cut at the shutdown timeout: %w", errors.Join(grpcErr, thriftErr))
	}
	return nil
}

func (s *Server) limitListener(l net.Listener, proto string) *limitListener {
	return newLimitListener(l, s.cfg.MaxConns, s.cfg.AuthTimeout, s.m.conns.WithLabelValues(proto),
		s.m.rejected.WithLabelValues(proto), s.m.unauthed.WithLabelValues(proto))
}

// errBusy is why a request was refused before it was read: the budget, or
// its share for connections not yet authenticated, is held by others.
var errBusy = errors.New("catalogrpc: the in-flight byte budget is held by other requests")

// charge is what one request holds of the budget.
type charge struct {
	n   int64
	pre bool // also counted in preAuth
}

// take reserves n bytes for a request on c (nil: a connection of no
// limitListener, taken as authenticated); errBusy when there is no room.
// It never blocks.
func (s *Server) take(c *conn, n int64) (charge, error) {
	pre := c != nil && !c.authed.Load()
	if pre && s.preAuth.Add(n) > s.preAuthMax {
		s.preAuth.Add(-n)
		return charge{}, errBusy
	}
	if err := s.budget.TakeConn(s.share, n); err != nil {
		if pre {
			s.preAuth.Add(-n)
		}
		return charge{}, errBusy
	}
	return charge{n: n, pre: pre}, nil
}

// release gives back what take reserved.
func (s *Server) release(ch charge) {
	if ch.n == 0 {
		return
	}
	s.budget.ReleaseConn(s.share, ch.n)
	if ch.pre {
		s.preAuth.Add(-ch.n)
	}
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// The real catalog and authenticator are what the front ends take.
var (
	_ Catalog       = (*catalog.Catalog)(nil)
	_ Authenticator = (*auth.Authenticator)(nil)
)
