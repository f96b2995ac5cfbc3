package catalogrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc/codes"

	"github.com/inlet-dev/inlet/api/gen/thrift/catalogv1"
	"github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
)

// thriftServer serves Thrift (binary protocol, framed or buffered) on any
// number of listeners. It is inlet's own accept loop rather than
// thrift.TSimpleServer, whose Stop (0.17) waits for every client to hang up
// unless the package-global ServerStopTimeout is set, and which has no idle
// timeout nor connection limit.
type thriftServer struct {
	s          *Server
	proc       thrift.TProcessor
	conf       *thrift.TConfiguration
	upsertConf *thrift.TConfiguration
	framed     bool
	// dataTypeMetrics are the metrics of inf.Data DataType, the hot call.
	dataTypeMetrics *methodMetrics

	// base is the context of every call: cancelled when Shutdown gives up
	// waiting.
	base   context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]struct{}
	conns     map[*thriftConn]struct{}
	wg        sync.WaitGroup
}

// thriftConn is one client connection.
type thriftConn struct {
	nc   *conn
	busy bool // a call is being read, handled or answered; guarded by thriftServer.mu
	// idle is set by the connection's goroutine before it waits for the
	// next call; the transport's first Read that returns bytes then marks
	// the connection busy.
	idle atomic.Bool
}

// Thrift's bounds on what one call may make the server hold.
const (
	// smallCall is what a call may hold within its connection's own
	// buffers, bounded by --catalog-rpc-max-conns rather than the budget: a
	// frame up to this size (a lookup is a few hundred bytes) takes nothing
	// from the budget, so that clients are answered while others hold it.
	smallCall = 4 << 10
	// maxStringBytes is the longest string field of a call, but Upsert's
	// (whose schema may be up to the message size): a name is at most
	// event.MaxNameChars characters; client ids, tokens and page tokens are
	// shorter than this.
	maxStringBytes = 4 << 10
	// maxMethodBytes is the longest method name ("inlet.catalog.v1.Catalog:Upsert"
	// is 31 bytes).
	maxMethodBytes = 128
	// keptWriteBuffer is the most a framed connection's answer buffer keeps
	// between calls; a larger one (a long List) is dropped once sent.
	keptWriteBuffer = 16 << 10
)

func (s *Server) newThrift() *thriftServer {
	ts := &thriftServer{
		s:         s,
		framed:    s.cfg.ThriftTransport != TransportBuffered,
		listeners: map[net.Listener]struct{}{},
		conns:     map[*thriftConn]struct{}{},
		// The binary protocol checks every string's length against
		// MaxMessageSize: conf caps them at a name's size, upsertConf at the
		// message size (Upsert's schema).
		conf: &thrift.TConfiguration{
			MaxMessageSize:     maxStringBytes,
			TBinaryStrictRead:  thrift.BoolPtr(false),
			TBinaryStrictWrite: thrift.BoolPtr(true),
		},
		upsertConf: &thrift.TConfiguration{
			MaxMessageSize:     int32(s.cfg.MaxMessageBytes),
			TBinaryStrictRead:  thrift.BoolPtr(false),
			TBinaryStrictWrite: thrift.BoolPtr(true),
		},
	}
	ts.base, ts.cancel = context.WithCancel(context.Background())
	ts.dataTypeMetrics = s.m.method("thrift", DataService+"/DataType")
	h := thriftHandler{ts: ts}
	data := inf.NewDataProcessor(h)
	// DataType's own processor function: the generated one prefixes every
	// error with "Internal error processing DataType: "; this one sends the
	// reason alone, and starts no connectivity-check goroutine per call.
	data.AddToProcessorMap("DataType", dataTypeFunc{h: h})
	mux := thrift.NewTMultiplexedProcessor()
	mux.RegisterDefault(data)
	mux.RegisterProcessor(CatalogService, catalogv1.NewCatalogProcessor(h))
	ts.proc = mux
	return ts
}

func (ts *thriftServer) serve(l net.Listener) error {
	ts.mu.Lock()
	if ts.closing {
		ts.mu.Unlock()
		l.Close()
		return nil
	}
	ts.listeners[l] = struct{}{}
	ts.mu.Unlock()
	ll := ts.s.limitListener(l, "thrift")
	var backoff time.Duration
	for {
		nc, err := ll.Accept()
		if err != nil {
			if ts.isClosing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				ts.s.log.Warn("catalog Thrift server: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("catalog Thrift server on %s: %w", l.Addr(), err)
		}
		backoff = 0
		c := &thriftConn{nc: nc.(*conn)}
		ts.mu.Lock()
		if ts.closing {
			ts.mu.Unlock()
			nc.Close()
			return nil
		}
		ts.conns[c] = struct{}{}
		ts.wg.Add(1)
		ts.mu.Unlock()
		go ts.handle(c)
	}
}

func (ts *thriftServer) isClosing() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.closing
}

// handle serves one connection's calls, one after another, until the client
// hangs up, a call fails on the transport, the connection idles for
// IdleTimeout, or Shutdown. A call refused before it is read (too large, no
// room in the budget, a method name over maxMethodBytes) is answered with a
// TApplicationException saying why, and the connection closed: the rest of
// the call is not read.
func (ts *thriftServer) handle(c *thriftConn) {
	defer func() {
		ts.mu.Lock()
		delete(ts.conns, c)
		ts.mu.Unlock()
		c.nc.Close()
		ts.wg.Done()
	}()
	tr := &connTransport{ts: ts, c: c, framed: ts.framed, r: bufio.NewReaderSize(c.nc, 4096)}
	if !ts.framed {
		tr.w = bufio.NewWriterSize(c.nc, 4096)
	}
	defer tr.endConn()
	proto := &thriftProto{TBinaryProtocol: thrift.NewTBinaryProtocolConf(tr, ts.conf), ts: ts, tr: tr}
	ctx := withConn(ts.base, c.nc)
	for {
		ts.mu.Lock()
		if ts.closing {
			ts.mu.Unlock()
			return
		}
		c.busy = false
		c.idle.Store(true)
		ts.mu.Unlock()
		if err := c.nc.SetDeadline(time.Now().Add(ts.s.cfg.IdleTimeout)); err != nil {
			return
		}
		ok, err := ts.proc.Process(ctx, proto, proto)
		tr.endCall()
		if tr.refused != "" {
			x := thrift.NewTApplicationException(thrift.PROTOCOL_ERROR, tr.refused)
			tr.discardOut()
			_ = writeMessage(ctx, proto, "", thrift.EXCEPTION, 0, x)
			return
		}
		var ae thrift.TApplicationException
		if errors.As(err, &ae) && ae.TypeId() == thrift.UNKNOWN_METHOD {
			continue // answered with the exception; the connection is fine
		}
		if !ok || err != nil && (errors.As(err, new(thrift.TTransportException)) || errors.Is(err, thrift.ErrAbandonRequest)) {
			if err != nil && !c.idle.Load() && !isEOF(err) {
				ts.s.log.Debug("catalog Thrift server: closing a connection", "remote", c.nc.RemoteAddr(), "err", err)
			}
			return
		}
	}
}

func isEOF(err error) bool {
	var te thrift.TTransportException
	return errors.Is(err, io.EOF) || errors.As(err, &te) && te.TypeId() == thrift.END_OF_FILE
}

// begin marks c busy on the first bytes of a call: from then on the call
// has CallTimeout to arrive and CallTimeout more to be answered.
func (ts *thriftServer) begin(c *thriftConn) {
	c.idle.Store(false)
	now := time.Now()
	ts.mu.Lock()
	c.busy = true
	ts.mu.Unlock()
	_ = c.nc.SetReadDeadline(now.Add(ts.s.cfg.CallTimeout))
	_ = c.nc.SetWriteDeadline(now.Add(2 * ts.s.cfg.CallTimeout))
}

// shutdown stops accepting, closes idle connections, waits for calls in
// flight until ctx ends, then closes every connection.
func (ts *thriftServer) shutdown(ctx context.Context) error {
	ts.mu.Lock()
	ts.closing = true
	for l := range ts.listeners {
		l.Close()
	}
	for c := range ts.conns {
		if !c.busy {
			c.nc.Close()
		}
	}
	ts.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ts.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		ts.cancel()
		return nil
	case <-ctx.Done():
	}
	ts.cancel()
	ts.mu.Lock()
	for c := range ts.conns {
		c.nc.Close()
	}
	ts.mu.Unlock()
	<-done
	return ctx.Err()
}

// connTransport is the thrift.TTransport of one connection: framed or
// buffered, it reads a call through the connection's 4 KiB reader, never
// buffering a frame whole, and bounds what one call may be: a frame's
// length is checked against MaxMessageBytes and, past smallCall, taken from
// the budget before any of it is read; a buffered call is counted as it is
// read, against the same bounds. It is not safe for concurrent use.
type connTransport struct {
	ts     *thriftServer
	c      *thriftConn
	framed bool
	r      *bufio.Reader
	w      *bufio.Writer // buffered
	out    bytes.Buffer  // framed: the answer, after 4 bytes for its length
	closed atomic.Bool

	left    int64  // framed: bytes of the current frame not yet read
	read    int64  // bytes of the current call read
	held    charge // what the current call holds of the budget
	refused string // why the current call was refused before it was read
	hdr     [4]byte
	one     [1]byte
}

func (t *connTransport) Read(p []byte) (int, error) {
	max := int64(t.ts.s.cfg.MaxMessageBytes)
	if t.framed {
		if t.left == 0 {
			if err := t.nextFrame(max); err != nil {
				return 0, err
			}
		}
		if int64(len(p)) > t.left {
			p = p[:t.left]
		}
	} else {
		if t.read >= max {
			return 0, t.refuse("size", fmt.Sprintf("a call of more than %d bytes; the limit is %d (--catalog-rpc-max-message-bytes)", max, max))
		}
		if int64(len(p)) > max-t.read {
			p = p[:max-t.read]
		}
	}
	n, err := t.r.Read(p)
	if n > 0 {
		t.started()
		if t.framed {
			t.left -= int64(n)
		} else {
			t.read += int64(n)
			if over := t.read - smallCall - t.held.n; over > 0 {
				// Charged a page at a time, as it comes.
				if err := t.take((over + 4095) &^ 4095); err != nil {
					return 0, err
				}
			}
		}
	}
	if err != nil {
		return n, thrift.NewTTransportExceptionFromError(err)
	}
	return n, nil
}

// nextFrame reads a frame's length and admits it (see connTransport).
func (t *connTransport) nextFrame(max int64) error {
	n, err := io.ReadFull(t.r, t.hdr[:])
	if n > 0 {
		t.started()
	}
	if err != nil {
		return thrift.NewTTransportExceptionFromError(err)
	}
	size := int64(int32(binary.BigEndian.Uint32(t.hdr[:])))
	if size < 0 || t.read+size > max {
		return t.refuse("size", fmt.Sprintf("a frame of %d bytes; the limit is %d (--catalog-rpc-max-message-bytes)", size, max))
	}
	t.read += size
	t.left = size
	if size > smallCall {
		return t.take(size)
	}
	return nil
}

// take charges n more bytes of the current call to the budget.
func (t *connTransport) take(n int64) error {
	ch, err := t.ts.s.take(t.c.nc, n)
	if err != nil {
		return t.refuse("budget", "resource exhausted: the server is holding all the requests it may; retry")
	}
	t.held.n += ch.n
	t.held.pre = t.held.pre || ch.pre
	return nil
}

// refuse records why the current call is refused before it is read
// (answered by handle) and returns the error that ends reading it.
func (t *connTransport) refuse(reason, msg string) error {
	t.ts.s.m.refused.WithLabelValues("thrift", reason).Inc()
	t.refused = msg
	return thrift.NewTTransportException(thrift.UNKNOWN_TRANSPORT_EXCEPTION, msg)
}

// started marks the connection busy on the first bytes of a call.
func (t *connTransport) started() {
	if t.c.idle.Load() {
		t.ts.begin(t.c)
	}
}

// endCall gives back what the call held of the budget, once its last frame
// has been read (a frame may hold more calls).
func (t *connTransport) endCall() {
	if t.left > 0 {
		return
	}
	t.ts.s.release(t.held)
	t.held = charge{}
	t.read = 0
}

// endConn gives back what the connection's last call held.
func (t *connTransport) endConn() {
	t.left = 0
	t.endCall()
}

// ReadByte, WriteByte and WriteString make connTransport a
// thrift.TRichTransport, which the protocol then uses as it is (rather than
// through a wrapper that allocates on each).
func (t *connTransport) ReadByte() (byte, error) {
	for {
		n, err := t.Read(t.one[:])
		if n == 1 {
			return t.one[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// zeroLength is the place of a framed answer's length.
var zeroLength [4]byte

// framedOut is the answer's buffer, its length's 4 bytes reserved.
func (t *connTransport) framedOut() *bytes.Buffer {
	if t.out.Len() == 0 {
		t.out.Write(zeroLength[:])
	}
	return &t.out
}

func (t *connTransport) Write(p []byte) (int, error) {
	if t.framed {
		return t.framedOut().Write(p)
	}
	return t.w.Write(p)
}

func (t *connTransport) WriteByte(c byte) error {
	if t.framed {
		return t.framedOut().WriteByte(c)
	}
	return t.w.WriteByte(c)
}

func (t *connTransport) WriteString(s string) (int, error) {
	if t.framed {
		return t.framedOut().WriteString(s)
	}
	return t.w.WriteString(s)
}

// discardOut drops an answer not yet flushed.
func (t *connTransport) discardOut() {
	if t.framed {
		t.out.Reset()
	} else {
		t.w.Reset(t.c.nc)
	}
}

func (t *connTransport) Flush(context.Context) error {
	if !t.framed {
		return thrift.NewTTransportExceptionFromError(t.w.Flush())
	}
	if t.out.Len() == 0 {
		return nil
	}
	b := t.out.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	_, err := t.c.nc.Write(b)
	if t.out.Cap() > keptWriteBuffer {
		t.out = bytes.Buffer{}
	} else {
		t.out.Reset()
	}
	return thrift.NewTTransportExceptionFromError(err)
}

func (t *connTransport) Open() error            { return nil }
func (t *connTransport) IsOpen() bool           { return !t.closed.Load() }
func (t *connTransport) Close() error           { t.closed.Store(true); return t.c.nc.Close() }
func (t *connTransport) RemainingBytes() uint64 { return ^uint64(0) }

// thriftProto is the binary protocol of one connection, reading message
// names itself to bound them, and capping string fields at maxStringBytes
// but in an Upsert.
type thriftProto struct {
	*thrift.TBinaryProtocol
	ts   *thriftServer
	tr   *connTransport
	name [maxMethodBytes]byte
}

// ReadMessageBegin is TBinaryProtocol's, strict or not, but for a name
// over maxMethodBytes, which is refused before it is read.
func (p *thriftProto) ReadMessageBegin(ctx context.Context) (name string, typ thrift.TMessageType, seq int32, err error) {
	p.SetTConfiguration(p.ts.conf)
	size, err := p.ReadI32(ctx)
	if err != nil {
		return "", 0, 0, thrift.NewTProtocolException(err)
	}
	n := size
	strict := size < 0
	if strict {
		typ = thrift.TMessageType(size & 0x0ff)
		if int64(size)&thrift.VERSION_MASK != thrift.VERSION_1 {
			return "", typ, 0, thrift.NewTProtocolExceptionWithType(thrift.BAD_VERSION, errors.New("bad version in ReadMessageBegin"))
		}
		if n, err = p.ReadI32(ctx); err != nil {
			return "", typ, 0, thrift.NewTProtocolException(err)
		}
	}
	if n < 0 || n > maxMethodBytes {
		err := p.tr.refuse("size", fmt.Sprintf("a method name of %d bytes; the limit is %d", n, maxMethodBytes))
		return "", typ, 0, thrift.NewTProtocolExceptionWithType(thrift.SIZE_LIMIT, err)
	}
	b := p.name[:n]
	if _, err := io.ReadFull(p.tr, b); err != nil {
		return "", typ, 0, thrift.NewTProtocolException(err)
	}
	name = string(b)
	if !strict {
		t, err := p.ReadByte(ctx)
		if err != nil {
			return name, typ, 0, thrift.NewTProtocolException(err)
		}
		typ = thrift.TMessageType(t)
	}
	if seq, err = p.ReadI32(ctx); err != nil {
		return name, typ, 0, thrift.NewTProtocolException(err)
	}
	if name == CatalogService+thrift.MULTIPLEXED_SEPARATOR+"Upsert" {
		p.SetTConfiguration(p.ts.upsertConf)
	}
	return name, typ, seq, nil
}

// thriftHandler implements inf.Data and catalogv1.Catalog.
type thriftHandler struct{ ts *thriftServer }

// call runs one call and counts it. (Its work is bounded by CallTimeout
// where it waits on the catalog: Server.callCtx.)
func (h thriftHandler) call(ctx context.Context, method string, f func(context.Context) error) error {
	start := time.Now()
	err := f(ctx)
	h.ts.s.m.observe("thrift", method, start, codeOf(err))
	return err
}

func (h thriftHandler) DataType(ctx context.Context, rq *inf.DataTypeRq) (*inf.DataTypeRp, error) {
	start := time.Now()
	var c creds
	var group, name string
	if rq != nil {
		c = creds{id: rq.GetAuthrq().GetClientId(), token: rq.GetAuthrq().GetToken()}
		group, name = rq.GetGroupName(), rq.GetEnName()
	}
	e, p, err := h.ts.s.dataType(ctx, c, group, name)
	h.ts.dataTypeMetrics.observe(start, codeOf(err))
	if err != nil {
		return nil, err
	}
	return &inf.DataTypeRp{Authrp: &inf.AuthRp{Token: p.Session}, CodeId: e.Code, CnName: e.DisplayName}, nil
}

// dataTypeFunc is the thrift.TProcessorFunction of inf.Data DataType: a
// failed call is a TApplicationException (INTERNAL_ERROR, as the generated
// code and other languages' servers send for an exception the IDL does not
// declare) whose message is the reason, e.g. "unauthenticated: wrong secret
// for client \"web\"".
type dataTypeFunc struct{ h thriftHandler }

func (f dataTypeFunc) Process(ctx context.Context, seqID int32, in, out thrift.TProtocol) (bool, thrift.TException) {
	var args inf.DataDataTypeArgs
	if err := args.Read(ctx, in); err != nil {
		_ = in.ReadMessageEnd(ctx)
		x := thrift.NewTApplicationException(thrift.PROTOCOL_ERROR, err.Error())
		_ = writeMessage(ctx, out, "DataType", thrift.EXCEPTION, seqID, x)
		return false, thrift.WrapTException(err)
	}
	if err := in.ReadMessageEnd(ctx); err != nil {
		return false, thrift.WrapTException(err)
	}
	rp, err := f.h.DataType(ctx, args.DataTypeRq)
	if err != nil {
		if errors.Is(err, thrift.ErrAbandonRequest) {
			return false, thrift.WrapTException(err)
		}
		x := thrift.NewTApplicationException(thrift.INTERNAL_ERROR, err.Error())
		if werr := writeMessage(ctx, out, "DataType", thrift.EXCEPTION, seqID, x); werr != nil {
			return false, werr
		}
		return true, nil
	}
	if werr := writeMessage(ctx, out, "DataType", thrift.REPLY, seqID, &inf.DataDataTypeResult{Success: rp}); werr != nil {
		return false, werr
	}
	return true, nil
}

func writeMessage(ctx context.Context, out thrift.TProtocol, name string, typ thrift.TMessageType, seqID int32, body interface {
	Write(context.Context, thrift.TProtocol) error
}) thrift.TException {
	if err := out.WriteMessageBegin(ctx, name, typ, seqID); err != nil {
		return thrift.WrapTException(err)
	}
	if err := body.Write(ctx, out); err != nil {
		return thrift.WrapTException(err)
	}
	if err := out.WriteMessageEnd(ctx); err != nil {
		return thrift.WrapTException(err)
	}
	return thrift.WrapTException(out.Flush(ctx))
}

// catalogErr is a call's error as the Catalog service declares it.
func catalogErr(err error) error {
	var ce *callError
	if !errors.As(err, &ce) {
		return err
	}
	code := catalogv1.ErrorCode(ce.code)
	switch ce.code {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.ResourceExhausted, codes.Unavailable, codes.Unauthenticated:
	case codes.DeadlineExceeded, codes.Canceled:
		code = catalogv1.ErrorCode_UNAVAILABLE // retry: the IDL has no code of its own for these
	default:
		return err // a TApplicationException (INTERNAL_ERROR)
	}
	return &catalogv1.CatalogError{Code: code, Message: ce.msg}
}

func thriftCreds(c *catalogv1.Credentials) creds {
	return creds{id: c.GetClientId(), token: c.GetToken()}
}

func thriftSession(p auth.Principal) *catalogv1.Session {
	return &catalogv1.Session{Token: p.Session, ExpiresUnixMs: unixMs(p.Expires)}
}

var thriftStatuses = map[catalog.Status]catalogv1.Status{
	catalog.StatusPlanned:  catalogv1.Status_PLANNED,
	catalog.StatusObserved: catalogv1.Status_OBSERVED,
	catalog.StatusBlocked:  catalogv1.Status_BLOCKED,
}

func thriftEntry(e catalog.Entry) *catalogv1.Entry {
	return &catalogv1.Entry{
		Group:         e.Group,
		Name:          e.Name,
		Code:          e.Code,
		DisplayName:   e.DisplayName,
		Schema:        string(e.Schema),
		Status:        thriftStatuses[e.Status],
		CreatedUnixMs: unixMs(e.Created),
		UpdatedUnixMs: unixMs(e.Updated),
	}
}

func (h thriftHandler) entryCall(ctx context.Context, method string, f func(context.Context) (catalog.Entry, auth.Principal, error)) (*catalogv1.EntryResult_, error) {
	var res *catalogv1.EntryResult_
	err := h.call(ctx, CatalogService+"/"+method, func(ctx context.Context) error {
		e, p, err := f(ctx)
		if err != nil {
			return err
		}
		res = &catalogv1.EntryResult_{Session: thriftSession(p), Entry: thriftEntry(e)}
		return nil
	})
	if err != nil {
		return nil, catalogErr(err)
	}
	return res, nil
}

func (h thriftHandler) Get(ctx context.Context, a *catalogv1.Credentials, group, name string) (*catalogv1.EntryResult_, error) {
	return h.entryCall(ctx, "Get", func(ctx context.Context) (catalog.Entry, auth.Principal, error) {
		return h.ts.s.get(ctx, thriftCreds(a), catalog.Key{Group: group, Name: name})
	})
}

func (h thriftHandler) List(ctx context.Context, a *catalogv1.Credentials, group string, pageSize int32, pageToken string) (*catalogv1.ListResult_, error) {
	var res *catalogv1.ListResult_
	err := h.call(ctx, CatalogService+"/List", func(ctx context.Context) error {
		es, next, p, err := h.ts.s.list(ctx, thriftCreds(a), group, pageSize, pageToken)
		if err != nil {
			return err
		}
		res = &catalogv1.ListResult_{Session: thriftSession(p), NextPageToken: next, Entries: make([]*catalogv1.Entry, len(es))}
		for i, e := range es {
			res.Entries[i] = thriftEntry(e)
		}
		return nil
	})
	if err != nil {
		return nil, catalogErr(err)
	}
	return res, nil
}

func (h thriftHandler) Upsert(ctx context.Context, a *catalogv1.Credentials, rq *catalogv1.UpsertRequest) (*catalogv1.EntryResult_, error) {
	return h.entryCall(ctx, "Upsert", func(ctx context.Context) (catalog.Entry, auth.Principal, error) {
		if rq == nil {
			return catalog.Entry{}, auth.Principal{}, failf(codes.InvalidArgument, "invalid argument: no UpsertRequest")
		}
		u := upsert{Change: Change{Key: catalog.Key{Group: rq.Group, Name: rq.Name}, DisplayName: rq.DisplayName, Schema: rq.Schema}}
		if rq.Status != nil {
			if u.Status = statusOf(thriftStatuses, *rq.Status); u.Status == "" {
				n := int32(*rq.Status)
				u.badStatus = &n
			}
		}
		return h.ts.s.upsert(ctx, thriftCreds(a), u)
	})
}

func (h thriftHandler) Block(ctx context.Context, a *catalogv1.Credentials, group, name string) (*catalogv1.EntryResult_, error) {
	return h.entryCall(ctx, "Block", func(ctx context.Context) (catalog.Entry, auth.Principal, error) {
		return h.ts.s.block(ctx, thriftCreds(a), catalog.Key{Group: group, Name: name})
	})
}

var _ thrift.TRichTransport = (*connTransport)(nil)
