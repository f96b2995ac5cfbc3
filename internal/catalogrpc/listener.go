package catalogrpc

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// limitListener keeps at most max connections open: one over it is closed
// as soon as it is accepted (the client sees the connection end, rather than
// waiting in the kernel's backlog), and counted. Each connection it returns
// is a *conn, closed after authTimeout unless a call on it has presented
// valid credentials by then.
type limitListener struct {
	net.Listener
	slots       chan struct{}
	authTimeout time.Duration
	open        prometheus.Gauge
	rejected    prometheus.Counter
	unauthed    prometheus.Counter
}

func newLimitListener(l net.Listener, max int, authTimeout time.Duration, open prometheus.Gauge, rejected, unauthed prometheus.Counter) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, max), authTimeout: authTimeout, open: open, rejected: rejected, unauthed: unauthed}
}

// Accept returns the next connection there is room for.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			l.open.Inc()
			c := &conn{Conn: nc, l: l, reading: make(chan struct{}, preAuthStreams), authedCh: make(chan struct{})}
			c.timer = time.AfterFunc(l.authTimeout, c.authExpired)
			return c, nil
		default:
			l.rejected.Inc()
			nc.Close()
		}
	}
}

// conn is one connection of a front end: it frees its slot when closed, and
// knows whether a call on it has presented valid credentials. Until one has,
// the connection is a stranger's: what its calls hold is charged to the
// pre-authentication share of the budget, at most preAuthStreams of its
// gRPC calls are read at once (the others wait, unread, holding at most
// their stream's window, until one call authenticates: see admit), and it
// is closed authTimeout after it was accepted.
type conn struct {
	net.Conn
	l        *limitListener
	timer    *time.Timer
	authed   atomic.Bool
	authedCh chan struct{} // closed once authed
	reading  chan struct{} // a slot per gRPC call being read before authentication
	once     sync.Once
}

// authenticated records that a call on c presented valid credentials.
func (c *conn) authenticated() {
	if !c.authed.Load() && c.authed.CompareAndSwap(false, true) {
		c.timer.Stop()
		close(c.authedCh)
	}
}

// admit waits, before a gRPC call on c is read, until c has authenticated
// or fewer than preAuthStreams of its calls are being read; the slot it
// takes is freed when the call's ctx ends. It returns at once if ctx ends.
func (c *conn) admit(ctx context.Context) {
	if c.authed.Load() {
		return
	}
	select {
	case c.reading <- struct{}{}:
		context.AfterFunc(ctx, func() { <-c.reading })
	case <-c.authedCh:
	case <-ctx.Done():
	}
}

func (c *conn) authExpired() {
	if !c.authed.Load() {
		c.l.unauthed.Inc()
		c.Close()
	}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.timer.Stop()
		<-c.l.slots
		c.l.open.Dec()
	})
	return err
}

type connKey struct{}

// withConn returns ctx carrying c, for connOf (Thrift's calls).
func withConn(ctx context.Context, c *conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connOf is the connection a call came on: the one withConn put in ctx, or
// the gRPC peer's (see connCreds); nil if neither.
func connOf(ctx context.Context) *conn {
	if c, ok := ctx.Value(connKey{}).(*conn); ok {
		return c
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ai, ok := p.AuthInfo.(connInfo); ok {
			return ai.c
		}
	}
	return nil
}

// connCreds are the gRPC server's transport credentials: no security (the
// catalog's gRPC is plaintext, as before), but the handshake hands each
// connection's *conn to every call on it, as its peer's AuthInfo, so that
// the stream tap and the handlers find it.
type connCreds struct{}

// connInfo is the AuthInfo of a connection served through connCreds.
type connInfo struct {
	credentials.CommonAuthInfo
	c *conn
}

func (connInfo) AuthType() string { return "insecure" }

func (connCreds) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, _ := nc.(*conn)
	return nc, connInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, c: c}, nil
}

func (connCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, credentials.ErrConnDispatched // server only
}

func (connCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (connCreds) Clone() credentials.TransportCredentials { return connCreds{} }
func (connCreds) OverrideServerName(string) error         { return nil }

var _ credentials.TransportCredentials = connCreds{}

// source is the IP address of c's peer, for throttling failed credentials
// (auth.Authenticator.AuthenticateFrom); "" for nil or a peer that is not
// on IP.
func (c *conn) source() string {
	if c == nil {
		return ""
	}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}
