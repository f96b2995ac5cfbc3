package loadclient

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbinf "github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/bench"
)

// CatalogConfig is a catalog lookup target: inf.Data/DataType, the
// catalog's key-value lookup, over gRPC or Thrift, on kept connections.
// One request is one lookup.
type CatalogConfig struct {
	// Proto is ProtoGRPC or ProtoThrift.
	Proto string
	// Addr is the server's host:port.
	Addr string
	// Connections is the number of connections kept: with gRPC, that many
	// ClientConns, the calls spread over them round robin and multiplexed
	// on each; with Thrift, a pool of that many connections, each carrying
	// one call at a time (a call waits for a free one).
	Connections int
	// ThriftTransport is "framed" (the default) or "buffered".
	ThriftTransport string
	// ClientID and Secret are the credentials; an empty ClientID sends
	// none (for a server without auth).
	ClientID, Secret string
	// Auth is AuthSession (the default: the first call presents the
	// secret, later ones the session token the server returned) or
	// AuthSecret (every call presents the secret).
	Auth string
	// Group is the group of every key looked up.
	Group string
	// Keys is the number of distinct keys cycled through: Group and
	// names "<KeyPrefix><i>", i in [0, Keys). Ignored with Miss.
	Keys      int
	KeyPrefix string
	// Miss makes every lookup one of a name never asked before (the
	// server fills it: a first-sight lookup), "<Run>-<n>".
	Miss bool
	// Run prefixes the names of Miss lookups. Empty: a random one.
	Run string
}

// Protocols and auth modes of a catalog target.
const (
	ProtoGRPC   = "grpc"
	ProtoThrift = "thrift"

	ThriftFramed   = "framed"
	ThriftBuffered = "buffered"

	AuthSession = "session"
	AuthSecret  = "secret"
)

// DefaultCatalogConfig looks up 1000 keys of group bench over 8 gRPC
// connections to a local inlet, with session tokens.
func DefaultCatalogConfig() CatalogConfig {
	return CatalogConfig{Proto: ProtoGRPC, Addr: "127.0.0.1:9090", Connections: 8, ThriftTransport: ThriftFramed,
		Auth: AuthSession, Group: "bench", Keys: 1000, KeyPrefix: "key-"}
}

// Validate reports the first invalid setting.
func (c CatalogConfig) Validate() error {
	_, port, err := net.SplitHostPort(c.Addr)
	switch {
	case c.Proto != ProtoGRPC && c.Proto != ProtoThrift:
		return fmt.Errorf("bench: protocol %q: want %s or %s", c.Proto, ProtoGRPC, ProtoThrift)
	case err != nil || port == "":
		return fmt.Errorf("bench: target %q: want host:port", c.Addr)
	case c.Connections <= 0:
		return errors.New("bench: connections must be positive")
	case c.Connections > 10000:
		return errors.New("bench: at most 10000 connections")
	case c.Proto == ProtoThrift && c.ThriftTransport != ThriftFramed && c.ThriftTransport != ThriftBuffered:
		return fmt.Errorf("bench: thrift transport %q: want %s or %s", c.ThriftTransport, ThriftFramed, ThriftBuffered)
	case c.Auth != AuthSession && c.Auth != AuthSecret:
		return fmt.Errorf("bench: auth %q: want %s or %s", c.Auth, AuthSession, AuthSecret)
	case c.ClientID != "" && c.Secret == "":
		return errors.New("bench: a client id needs its secret")
	case c.Group == "":
		return errors.New("bench: the group must not be empty")
	case !c.Miss && c.Keys <= 0:
		return errors.New("bench: keys must be positive")
	case !c.Miss && c.Keys > 10_000_000:
		return errors.New("bench: at most 10000000 keys")
	}
	return nil
}

// Catalog is a catalog lookup target. Its Do is a Target.
type Catalog struct {
	cfg   CatalogConfig
	names []string // the cycled keys' names (not with Miss)
	seq   atomic.Uint64
	rr    atomic.Uint64 // spreads gRPC calls over the connections

	// token is the session token to present, nil until an answer gave one
	// (and after the server refused it: the next call presents the secret).
	token atomic.Pointer[string]
	// first is closed when the first call (firstTaken) has its answer.
	first      chan struct{}
	firstTaken atomic.Bool
	stats      struct{ secret, session, adopted, refused atomic.Int64 }

	grpc   []*grpc.ClientConn
	pbData []pbinf.DataClient

	pool   chan *thriftConn // the idle Thrift connections; nil entries are to dial
	closed chan struct{}
	once   sync.Once
}

// NewCatalog makes a catalog target. gRPC connections are made in the
// background (the first calls wait for them); Thrift ones when first
// needed. Close it to close them.
func NewCatalog(cfg CatalogConfig) (*Catalog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Run == "" {
		cfg.Run = runName()
	}
	c := &Catalog{cfg: cfg, closed: make(chan struct{}), first: make(chan struct{})}
	if !cfg.Miss {
		c.names = make([]string, cfg.Keys)
		for i := range c.names {
			c.names[i] = cfg.KeyPrefix + strconv.Itoa(i)
		}
	}
	switch cfg.Proto {
	case ProtoGRPC:
		for range cfg.Connections {
			cc, err := grpc.NewClient(cfg.Addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDisableServiceConfig(), // measure the server, not a retry policy
				// The load generator's own costs, kept low: a write buffer
				// from a pool per write, and fixed windows (far above any
				// lookup), which turn off the bandwidth-delay pings.
				grpc.WithSharedWriteBuffer(true),
				grpc.WithInitialWindowSize(1<<20),
				grpc.WithInitialConnWindowSize(1<<20),
			)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("bench: gRPC client for %s: %w", cfg.Addr, err)
			}
			cc.Connect()
			c.grpc = append(c.grpc, cc)
			c.pbData = append(c.pbData, pbinf.NewDataClient(cc))
		}
	case ProtoThrift:
		c.pool = make(chan *thriftConn, cfg.Connections)
		for range cfg.Connections {
			c.pool <- nil
		}
	}
	return c, nil
}

// String says what is measured.
func (c *Catalog) String() string {
	what := fmt.Sprintf("%d keys", c.cfg.Keys)
	if c.cfg.Miss {
		what = "first-sight keys"
	}
	auth := "no credentials"
	switch {
	case c.cfg.ClientID == "":
	case c.cfg.Auth == AuthSession:
		auth = "auth: session token after the first call"
	default:
		auth = "auth: the secret on every call"
	}
	if c.cfg.Proto == ProtoThrift {
		return fmt.Sprintf("Thrift inf.Data.DataType %s (binary, %s; %d connections, one call at a time each; %s of group %s; %s)",
			c.cfg.Addr, c.cfg.ThriftTransport, c.cfg.Connections, what, c.cfg.Group, auth)
	}
	return fmt.Sprintf("gRPC inf.Data/DataType %s (%d connections, multiplexed; %s of group %s; %s)",
		c.cfg.Addr, c.cfg.Connections, what, c.cfg.Group, auth)
}

// Close closes the connections, and fails the calls still waiting for one.
func (c *Catalog) Close() {
	c.once.Do(func() {
		close(c.closed)
		for _, cc := range c.grpc {
			cc.Close()
		}
		if c.pool == nil {
			return
		}
		for range c.cfg.Connections {
			if tc := <-c.pool; tc != nil {
				tc.close()
			}
		}
	})
}

// CatalogAuthStats counts how the calls presented their credentials.
type CatalogAuthStats struct {
	// Secret and Session count the calls that presented the secret and a
	// session token.
	Secret, Session int64
	// Adopted counts the session tokens taken from answers (a new one
	// whenever the server sent one that differs); Refused the session
	// tokens the server refused (expired), after which the secret is
	// presented again.
	Adopted, Refused int64
}

// AuthStats says how the calls so far presented their credentials.
func (c *Catalog) AuthStats() CatalogAuthStats {
	return CatalogAuthStats{Secret: c.stats.secret.Load(), Session: c.stats.session.Load(),
		Adopted: c.stats.adopted.Load(), Refused: c.stats.refused.Load()}
}

// Do looks up the next key. It is a Target: safe for concurrent use.
func (c *Catalog) Do(ctx context.Context) bench.Result {
	n := c.seq.Add(1) - 1
	if c.cfg.Miss {
		return c.lookup(ctx, c.cfg.Run+"-"+strconv.FormatUint(n, 10))
	}
	return c.lookup(ctx, c.names[n%uint64(len(c.names))])
}

// Prefill looks every cycled key up once, workers at a time, so that the
// run measures hits: the server has filled and cached them. It returns the
// first lookup that failed. With Miss it does nothing.
func (c *Catalog) Prefill(ctx context.Context, workers int) error {
	if c.cfg.Miss {
		return nil
	}
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range max(1, min(workers, len(c.names))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(c.names) || first.Load() != nil || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res := c.lookup(rctx, c.names[i])
				cancel()
				if !res.OK {
					err := res.Err
					if err == nil {
						err = errors.New(res.Status)
					}
					err = fmt.Errorf("bench: looking up %s/%s: %w", c.cfg.Group, c.names[i], err)
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

// credentials returns the client id and token to present, and the session
// token presented (nil: the secret). With AuthSession, the run's very first
// call presents the secret and the others wait for its answer (or their
// ctx), so that they present the token it brings; first says the call is
// that one: it must call firstDone when answered. Should it bring no token,
// the calls present the secret until one does.
func (c *Catalog) credentials(ctx context.Context) (id, token string, session *string, first bool) {
	if c.cfg.ClientID == "" {
		return "", "", nil, false
	}
	if c.cfg.Auth == AuthSession {
		if c.firstTaken.CompareAndSwap(false, true) {
			c.stats.secret.Add(1)
			return c.cfg.ClientID, c.cfg.Secret, nil, true
		}
		select {
		case <-c.first:
		case <-ctx.Done():
		}
		if t := c.token.Load(); t != nil {
			c.stats.session.Add(1)
			return c.cfg.ClientID, *t, t, false
		}
	}
	c.stats.secret.Add(1)
	return c.cfg.ClientID, c.cfg.Secret, nil, false
}

// firstDone lets the calls waiting for the first one's answer go.
func (c *Catalog) firstDone() { close(c.first) }

// answered takes the session token of an answer to a call that presented
// the secret (presented nil), if none is held yet, or one the server gave
// in place of the token presented (refreshed). Tokens of other calls that
// presented the secret at the same time stay unused, so that the calls do
// not flip between valid tokens.
func (c *Catalog) answered(presented *string, got string) {
	if c.cfg.Auth != AuthSession || got == "" || c.cfg.ClientID == "" {
		return
	}
	// The token's copy is made (on the heap) only when it may be taken:
	// not on every call that brings back the token it presented.
	switch {
	case presented == nil:
		if c.token.Load() != nil {
			return
		}
		t := got
		if c.token.CompareAndSwap(nil, &t) {
			c.stats.adopted.Add(1)
		}
	case got != *presented:
		t := got
		if c.token.CompareAndSwap(presented, &t) {
			c.stats.adopted.Add(1)
		}
	}
}

// refused forgets a session token the server refused.
func (c *Catalog) refused(presented *string) {
	if presented != nil && c.token.CompareAndSwap(presented, nil) {
		c.stats.refused.Add(1)
	}
}

func (c *Catalog) lookup(ctx context.Context, name string) bench.Result {
	if c.cfg.Proto == ProtoThrift {
		return c.thriftLookup(ctx, name)
	}
	return c.grpcLookup(ctx, name)
}

// Status names of the answers, as gRPC names its codes; Thrift's
// TApplicationExceptions are named the same way from their messages.
const (
	StatusOK                = "OK"
	StatusUnauthenticated   = "Unauthenticated"
	StatusPermissionDenied  = "PermissionDenied"
	StatusResourceExhausted = "ResourceExhausted"
	StatusUnavailable       = "Unavailable"
	StatusNotFound          = "NotFound"
	StatusInvalidArgument   = "InvalidArgument"
	StatusDeadlineExceeded  = "DeadlineExceeded"
	StatusInternal          = "Internal"
)

func (c *Catalog) grpcLookup(ctx context.Context, name string) bench.Result {
	id, token, presented, first := c.credentials(ctx)
	if first {
		defer c.firstDone()
	}
	req := &pbinf.DataTypeRq{AuthRq: &pbinf.AuthRq{ClientId: id, Token: token}, GroupName: c.cfg.Group, EnName: name}
	res := bench.Result{Sent: int64(proto.Size(req)), Events: 1}
	n := c.rr.Add(1)
	rp, err := c.pbData[n%uint64(len(c.pbData))].DataType(ctx, req)
	if err == nil {
		res.Status, res.OK, res.Received = StatusOK, true, int64(proto.Size(rp))
		c.answered(presented, rp.GetAuthRp().GetToken())
		return res
	}
	st, _ := status.FromError(err)
	switch code := st.Code(); {
	case (code == codes.DeadlineExceeded || code == codes.Canceled) && ctxOver(ctx):
		// The client's own deadline or cancellation, not the server's answer.
		res.Err = fmt.Errorf("%w: %s", cmp.Or(ctx.Err(), context.DeadlineExceeded), st.Message())
	case code == codes.Unavailable && isConnError(st.Message()):
		res.Err = grpcConnError(st.Message())
	default:
		res.Status = code.String()
		if code == codes.Unauthenticated {
			c.refused(presented)
		}
	}
	return res
}

// ctxOver says whether ctx is done or its deadline has passed: on a busy
// machine the server's answer to the deadline the call carried may come
// before ctx's own timer has fired.
func ctxOver(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// isConnError says whether an Unavailable status is grpc-go's own for a
// connection that failed, not the server's answer.
func isConnError(msg string) bool {
	return strings.Contains(msg, "connection error") || strings.Contains(msg, "transport:") ||
		strings.Contains(msg, "error reading from server") || strings.Contains(msg, "connection closed")
}

// grpcConnError makes grpc-go's message of a failed connection an error
// Classify names.
func grpcConnError(msg string) error {
	var kind error
	switch {
	case strings.Contains(msg, "connection refused"):
		kind = syscall.ECONNREFUSED
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		kind = syscall.ECONNRESET
	case strings.Contains(msg, "EOF"), strings.Contains(msg, "connection closed"):
		kind = net.ErrClosed
	default:
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, kind)
}

// thriftConn is one Thrift connection: one call at a time.
type thriftConn struct {
	conn   net.Conn
	client *thriftinf.DataClient
	counts *countingConn
	// deadline is the connection's deadline now (set only when a call's
	// differs).
	deadline time.Time
}

func (tc *thriftConn) close() { tc.conn.Close() }

// dialThrift connects to the Thrift server.
func (c *Catalog) dialThrift(ctx context.Context) (*thriftConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: conn}
	conf := &thrift.TConfiguration{}
	// One write per call: TFramedTransport writes a frame's size and its
	// body separately, which would be two syscalls (and two TCP segments).
	var trans thrift.TTransport = &connTransport{Conn: cc, w: bufio.NewWriterSize(cc, 4096)}
	if c.cfg.ThriftTransport == ThriftBuffered {
		trans = thrift.NewTBufferedTransport(trans, 4096)
	} else {
		trans = thrift.NewTFramedTransportConf(trans, conf)
	}
	protoc := thrift.NewTBinaryProtocolConf(trans, conf)
	return &thriftConn{conn: conn, counts: cc, client: thriftinf.NewDataClient(thrift.NewTStandardClient(protoc, protoc))}, nil
}

func (c *Catalog) thriftLookup(ctx context.Context, name string) bench.Result {
	res := bench.Result{Events: 1}
	var tc *thriftConn
	select {
	case tc = <-c.pool:
	case <-ctx.Done():
		res.Err = fmt.Errorf("waiting for a free connection: %w", ctx.Err())
		return res
	case <-c.closed:
		res.Err = fmt.Errorf("bench: target closed: %w", net.ErrClosed)
		return res
	}
	if tc == nil {
		var err error
		if tc, err = c.dialThrift(ctx); err != nil {
			c.pool <- nil
			res.Err = err
			return res
		}
	}
	keep := false
	defer func() {
		if !keep {
			tc.close()
			tc = nil
		}
		c.pool <- tc
	}()
	if deadline, _ := ctx.Deadline(); deadline != tc.deadline {
		_ = tc.conn.SetDeadline(deadline)
		tc.deadline = deadline
	}
	// A connection cut by ctx is not kept (stop reports false): its deadline
	// needs no reset. The func has the connection itself, not tc, which
	// the deferred return to the pool sets to nil, maybe while it runs.
	conn := tc.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	defer stop()
	id, token, presented, first := c.credentials(ctx)
	if first {
		defer c.firstDone()
	}
	tc.counts.reset()
	rp, err := tc.client.DataType(ctx, &thriftinf.DataTypeRq{Authrq: &thriftinf.AuthRq{ClientId: id, Token: token}, GroupName: c.cfg.Group, EnName: name})
	res.Sent, res.Received = tc.counts.sent, tc.counts.received
	var ae thrift.TApplicationException
	switch {
	case err == nil:
		keep = stop()
		res.Status, res.OK = StatusOK, true
		c.answered(presented, rp.GetAuthrp().GetToken())
	case errors.As(err, &ae):
		// An answer: the connection is still in step.
		keep = stop()
		res.Status = ThriftStatus(ae)
		if res.Status == StatusUnauthenticated {
			c.refused(presented)
		}
	case ctx.Err() != nil:
		res.Err = fmt.Errorf("%w: %v", ctx.Err(), err)
	default:
		res.Err = err
	}
	return res
}

// ThriftStatus names a TApplicationException of inf.Data as gRPC would
// name its status (inf.Data's Thrift IDL declares no exception, so the
// server says why in the message, which inlet starts with the status in
// words: "unauthenticated: ...", "rate limited: ..."): Unauthenticated,
// ResourceExhausted, ..., or "TApplicationException" when it names none.
func ThriftStatus(ae thrift.TApplicationException) string {
	m := strings.ToLower(ae.Error())
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(m, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("unauthenticated", "auth: no credentials", "unknown client", "wrong secret", "expired", "session token"):
		return StatusUnauthenticated
	case has("rate limited", "resource exhausted", "resourceexhausted", "resource_exhausted", "over the client's rate"):
		return StatusResourceExhausted
	case has("permission denied", "permissiondenied", "permission_denied", "not allowed", "forbidden"):
		return StatusPermissionDenied
	case has("deadline exceeded"):
		return StatusDeadlineExceeded
	case has("unavailable"):
		return StatusUnavailable
	case has("not found", "notfound", "not_found", "no such event type"):
		return StatusNotFound
	case has("invalid"):
		return StatusInvalidArgument
	case strings.HasPrefix(m, "internal"):
		return StatusInternal
	}
	return "TApplicationException"
}

// connTransport is a thrift.TTransport over a connection whose deadlines
// the caller sets (thrift.TSocket would reset them on every read). Writes
// are buffered until Flush.
type connTransport struct {
	net.Conn
	w *bufio.Writer
}

func (t *connTransport) Write(b []byte) (int, error) { return t.w.Write(b) }
func (t *connTransport) Flush(context.Context) error { return t.w.Flush() }
func (*connTransport) Open() error                   { return nil }
func (*connTransport) IsOpen() bool                  { return true }
func (*connTransport) RemainingBytes() (num uint64)  { return ^uint64(0) }

// countingConn counts the bytes of one call; one call at a time uses it.
type countingConn struct {
	net.Conn
	sent, received int64
}

func (c *countingConn) reset() { c.sent, c.received = 0, 0 }

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.received += int64(n)
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent += int64(n)
	return n, err
}
