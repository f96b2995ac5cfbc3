// Package fastfront serves a plain HTTP listener with two servers: the hot
// HTTP/1.1 paths (inlet's ingest endpoints) on fasthttp, everything else on
// a net/http server.
//
// net/http costs about 40% of inlet's CPU per ingest request on one core
// (BENCHMARKS.md): a goroutine per connection that reads in the background
// while the handler waits for Kafka (three read syscalls per request where
// fasthttp makes two), a header map and a Request per request. fasthttp
// reuses all of it per connection. What fasthttp does not do, net/http
// keeps doing:
//
//   - HTTP/2 without TLS (h2c, prior knowledge): a connection that opens
//     with the HTTP/2 preface goes to the net/http server before fasthttp
//     reads a byte of it. So does one whose first request line ends in a
//     bare LF, not CRLF (which fasthttp does not take).
//   - Every other path (request-reply, /metrics, probes, the web UI and its
//     event stream, pprof): the first request on a fasthttp connection for
//     a path that is not a fast one hands the whole connection over to the
//     net/http server (the request written out again, its body read first,
//     up to Config.MaxHandoffBody), which serves it and all that follow.
//
// fasthttp answers Expect: 100-continue before the handler runs; what the
// header alone decides is asked first (Config.Precheck),
// so that a request refused on its header (401, 413) is answered without
// its body being sent. Only chunked is taken as a Transfer-Encoding (501
// otherwise, as net/http).
//
// The fast paths run the same http.Handler as net/http does, through an
// adapter that gives it an *http.Request and an http.ResponseWriter reused
// per connection: the handler's code, limits and answers are the same on
// both servers. Its rules: the handler must not keep the request, its
// header or its body after it returns; the answer is buffered and written
// when the handler returns (Flush does nothing); Hijack is not offered;
// http.ResponseController's SetReadDeadline and SetWriteDeadline work.
// The request's context carries what Config.ConnContext put in the
// connection's; it is cancelled when the connection closes, not when the
// client goes away (fasthttp does not read while the handler runs) nor when
// the handler returns. Several Cookie lines reach the handler as one (as
// fasthttp joins them), and the Date of an answer is fasthttp's.
package fastfront

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Config configures a Front.
type Config struct {
	// Fast are the paths served on fasthttp, matched exactly against the
	// path of the request target (no escapes, no dot segments: any other
	// spelling goes to net/http, which cleans or refuses it as usual).
	Fast []string
	// Handler serves the fast paths. It is the net/http server's handler
	// as a rule, so that both count against the same limits.
	Handler http.Handler
	// ConnContext, when set, derives each fasthttp connection's context,
	// as http.Server.ConnContext does; the requests of the connection get it.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	// ReadHeaderTimeout bounds the wait for a request's header (and, for a
	// new connection, for its first bytes); ReadTimeout then bounds the
	// rest of the request, its body, from when its header was read.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// BodyStartTimeout, when set, bounds the wait for the first byte of a
	// body, which fasthttp reads before the handler runs (the body idle
	// timeout of the handler, as a rule); ReadTimeout applies from then on.
	BodyStartTimeout time.Duration
	// WriteTimeout bounds writing an answer, from when the handler returns.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (431 past it).
	MaxHeaderBytes int
	// Precheck, when set, is called for a fast path's request with Expect:
	// 100-continue before fasthttp sends 100, with the header alone (no
	// body): it answers a request it refuses through w and returns false,
	// and the client is spared sending the body (the connection closes);
	// true goes on (Handler runs once the body comes).
	Precheck func(w http.ResponseWriter, r *http.Request) bool
	// MaxHandoffBody bounds the body of a request handed over to net/http,
	// which is read whole before the handover (413 past it).
	MaxHandoffBody int64
	Log            *slog.Logger
}

// Front serves one listener: fasthttp for Config.Fast, the net/http server
// (through the listener NetListener returns) for the rest.
type Front struct {
	cfg  Config
	fast map[string]string // the interned path, by itself
	srv  *fasthttp.Server
	// fastLn and netLn are the listeners the two servers accept from.
	fastLn, netLn *chanListener
	log           *slog.Logger

	mu     sync.Mutex
	ln     net.Listener // what Serve accepts from
	closed bool
	// conns are the connections being told apart and fasthttp's (until
	// they close), for Close.
	conns map[net.Conn]struct{}
}

// New returns a Front for cfg.
func New(cfg Config) *Front {
	f := &Front{cfg: cfg, fast: map[string]string{}, log: cfg.Log,
		fastLn: newChanListener(), netLn: newChanListener()}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	for _, p := range cfg.Fast {
		f.fast[p] = p
	}
	readHeader := cfg.ReadHeaderTimeout
	if readHeader <= 0 {
		readHeader = cfg.ReadTimeout
	}
	f.srv = &fasthttp.Server{
		Handler: f.serve,
		// The header's bound; HeaderReceived gives the body ReadTimeout.
		ReadTimeout:  readHeader,
		WriteTimeout: cfg.WriteTimeout,
		IdleTimeout:  cfg.IdleTimeout,
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: cmp.Or(cfg.BodyStartTimeout, cfg.ReadTimeout), MaxRequestBodySize: noReadAhead}
		},
		ErrorHandler: f.requestError,
		// fasthttp answers 100-continue before the handler runs; Precheck
		// refuses a fast path's request on its header before it (expect).
		ExpectHandler: f.expect,
		// The header must fit the read buffer, which each connection
		// keeps (ReduceMemoryUsage would give it back between requests
		// at the cost of a read syscall of one byte per request).
		ReadBufferSize: max(cfg.MaxHeaderBytes, 4096),
		// The handler reads the body, into buffers charged to its memory
		// budget and under its own deadlines (the body idle timeout):
		// fasthttp streams every body larger than MaxRequestBodySize, and
		// reads that much of it ahead.
		StreamRequestBody:  true,
		MaxRequestBodySize: noReadAhead,
		// Otherwise fasthttp parses multipart bodies, to temporary files,
		// before the handler runs.
		DisablePreParseMultipartForm: true,
		// The handoff passes a connection on to net/http.
		KeepHijackedConns:     true,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		// fasthttp's errors about a malformed request otherwise quote the
		// request, secrets (Authorization, cookies, a pixel's key) and all;
		// they go into answers and the log.
		SecureErrorLogMessage: true,
		Logger:                fastLogger{ratelog.New(f.log, slog.LevelWarn, "fasthttp: serving a connection failed", logEvery)},
	}
	return f
}

// noReadAhead is the MaxRequestBodySize of fasthttp: the bytes of a body it
// reads before the handler runs (it waits for them, under ReadTimeout).
const noReadAhead = 1

// NetListener is the listener of the net/http server's share: h2c
// connections and those handed over. Serve it with the net/http server;
// its Shutdown closes it.
func (f *Front) NetListener() net.Listener { return f.netLn }

// Serve accepts connections on ln until Shutdown or Close, and serves
// those of HTTP/1 on fasthttp. It returns nil after Shutdown or Close.
func (f *Front) Serve(ln net.Listener) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		ln.Close()
		return nil
	}
	f.ln = ln
	f.mu.Unlock()
	errs := make(chan error, 1)
	go func() { errs <- f.srv.Serve(f.fastLn) }()
	var tempDelay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if f.isClosed() {
				break
			}
			// As net/http: a temporary failure (EMFILE: out of file
			// descriptors under a flood of connections) backs off and
			// goes on, rather than stop serving.
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				f.log.Warn("accepting a connection failed; retrying", "err", err, "in", tempDelay)
				time.Sleep(tempDelay)
				continue
			}
			f.fastLn.Close()
			<-errs
			return err
		}
		tempDelay = 0
		go f.sniff(c)
	}
	f.fastLn.Close() // ends fasthttp's Serve if Shutdown did not
	return <-errs
}

func (f *Front) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// stopAccepting closes the listener Serve accepts from.
func (f *Front) stopAccepting() {
	f.mu.Lock()
	f.closed = true
	ln := f.ln
	f.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// Shutdown stops accepting, then waits for fasthttp's requests in flight
// to be answered and its connections to go idle, within ctx. The net/http
// server's share is its own Shutdown's.
func (f *Front) Shutdown(ctx context.Context) error {
	f.stopAccepting()
	return f.srv.ShutdownWithContext(ctx)
}

// Close stops accepting and closes every connection of fasthttp's, and
// those not yet told apart, at once.
func (f *Front) Close() error {
	f.stopAccepting()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no wait
	_ = f.srv.ShutdownWithContext(ctx)
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return nil
}

// track records c as one of the front's (false once closed).
func (f *Front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if f.conns == nil {
		f.conns = map[net.Conn]struct{}{}
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Front) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// h2Preface is how a connection of HTTP/2 with prior knowledge (h2c)
// starts; no HTTP/1 request starts so.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniff reads the first bytes of c, within ReadHeaderTimeout, and gives it
// to the server of its protocol.
func (f *Front) sniff(c net.Conn) {
	if !f.track(c) {
		c.Close()
		return
	}
	if d := cmp.Or(f.cfg.ReadHeaderTimeout, f.cfg.ReadTimeout); d > 0 {
		_ = c.SetReadDeadline(time.Now().Add(d))
	}
	buf := make([]byte, 0, 1024)
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if isH2(buf) || firstLine(buf) != nil || len(buf) == cap(buf) {
			break
		}
		if err != nil && len(buf) > 0 && !bytes.HasPrefix([]byte(h2Preface), buf) {
			break // part of an HTTP/1 request line: fasthttp answers it (408, 400)
		}
		if err != nil { // nothing said: closed, or too slow to start
			f.untrack(c)
			c.Close()
			return
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if isH2(buf) || bareLF(buf) {
		f.untrack(c) // net/http's
		f.netLn.push(&prefixConn{Conn: c, prefix: buf})
		return
	}
	fc := &fastConn{prefixConn: prefixConn{Conn: c, prefix: buf}, remote: c.RemoteAddr().String(), front: f}
	fc.ctx, fc.cancel = context.WithCancel(context.Background())
	if f.cfg.ConnContext != nil {
		fc.ctx = f.cfg.ConnContext(fc.ctx, c)
	}
	f.fastLn.push(fc)
}

func isH2(buf []byte) bool { return bytes.HasPrefix(buf, []byte(h2Preface[:4])) }

// firstLine returns the request line at the start of buf, with its line
// end, past the empty lines a client may send before it; nil until buf
// holds a whole one.
func firstLine(buf []byte) []byte {
	buf = bytes.TrimLeft(buf, "\r\n")
	if i := bytes.IndexByte(buf, '\n'); i > 0 {
		return buf[:i+1]
	}
	return nil
}

// bareLF reports whether the request line at the start of buf ends in a
// bare LF. RFC 9112 lets a server take one for CRLF, and net/http does;
// fasthttp waits for a CRLF that never comes, so such a connection goes to
// net/http, as an h2c one does.
func bareLF(buf []byte) bool {
	l := firstLine(buf)
	return len(l) > 0 && (len(l) < 2 || l[len(l)-2] != '\r')
}

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		if len(c.prefix) == 0 {
			c.prefix = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// fastConn is a connection fasthttp serves, with what its requests reuse.
type fastConn struct {
	prefixConn
	remote string
	ctx    context.Context
	ex     *exchange // made at the first fast request
	// linger is set when the server closes the connection on a client
	// that may still be sending a body (413): Close then shuts the write
	// side and reads out what comes for a moment before it closes, as
	// net/http does, so that the answer is not lost to a reset.
	linger atomic.Bool
	front  *Front
	cancel context.CancelFunc
	closed atomic.Bool
}

// A lingering close reads out and throws away what the client still sends
// after the answer, until the client closes, nothing came for lingerIdle,
// lingerFor passed or lingerMax bytes were read, whichever comes first (the
// lingering close of nginx). A client that reads its answer only once it has
// written its whole body gets it as long as the body is within lingerMax; a
// fixed short read-out (net/http reads 256 KiB for 500 ms) resets the
// connection under a client still writing a 1 MiB body, and the reset takes
// the unread answer with it (inlet's net/http front reads out as this one
// does: gateway's limited.readOut). At most maxLingering connections linger
// at once; past that they close at once.
const (
	lingerIdle   = 2 * time.Second
	lingerFor    = 5 * time.Second
	lingerMax    = 32 << 20
	maxLingering = 256
)

// lingering counts the connections being read out (lingerFor).
var lingering atomic.Int32

func (c *fastConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	tc, ok := c.Conn.(interface{ CloseWrite() error })
	if !c.linger.Load() || !ok {
		c.front.untrack(c.Conn)
		return c.Conn.Close()
	}
	if lingering.Add(1) > maxLingering {
		lingering.Add(-1)
		c.front.untrack(c.Conn)
		return c.Conn.Close()
	}
	_ = tc.CloseWrite()
	// Tracked until closed: Front.Close ends a lingering read at once.
	go func() {
		defer lingering.Add(-1)
		defer c.front.untrack(c.Conn)
		defer c.Conn.Close()
		readOut(c.Conn, time.Now().Add(lingerFor))
	}()
	return nil
}

// readOut reads and throws away what comes on conn until it ends, nothing
// comes for lingerIdle, the deadline passes or lingerMax bytes were read.
func readOut(conn net.Conn, deadline time.Time) {
	buf := make([]byte, 16<<10)
	for n := 0; n < lingerMax; {
		d := time.Now().Add(lingerIdle)
		if d.After(deadline) {
			d = deadline
		}
		_ = conn.SetReadDeadline(d)
		k, err := conn.Read(buf)
		n += k
		if err != nil {
			return
		}
	}
}

// requestError answers a request fasthttp could not read, in JSON as the
// handlers answer; fasthttp closes the connection after it.
func (f *Front) requestError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		answer(ctx, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request header larger than %d bytes, the limit", f.srv.ReadBufferSize))
	case errors.As(err, &ne) && ne.Timeout():
		msg := fmt.Sprintf("request not received within the read timeout (its header within %s", f.cfg.ReadHeaderTimeout)
		if f.cfg.BodyStartTimeout > 0 {
			msg += fmt.Sprintf(", the first byte of its body within %s", f.cfg.BodyStartTimeout)
		}
		answer(ctx, http.StatusRequestTimeout, msg+")")
	default:
		answer(ctx, http.StatusBadRequest, "malformed HTTP request: "+unquoted(err.Error()))
	}
}

// unquoted is msg, one of fasthttp's error messages, cut where it would
// quote the request's bytes (", contents: ..."), should any message do so
// despite SecureErrorLogMessage.
func unquoted(msg string) string {
	if i := strings.Index(msg, ", contents:"); i >= 0 {
		return msg[:i]
	}
	return msg
}

// serve is fasthttp's handler.
func (f *Front) serve(ctx *fasthttp.RequestCtx) {
	if f.cfg.BodyStartTimeout > 0 && hasBody(&ctx.Request.Header) {
		// The first byte of the body came (fasthttp read it ahead): the
		// rest of the request has ReadTimeout.
		var dl time.Time
		if f.cfg.ReadTimeout > 0 {
			dl = time.Now().Add(f.cfg.ReadTimeout)
		}
		_ = ctx.SetReadDeadline(dl)
	}
	if h := &ctx.Request.Header; h.ContentLength() > 0 && hasTransferEncoding(h.RawHeaders()) {
		// Transfer-Encoding: identity, which fasthttp drops and frames the
		// body by its Content-Length: a body whose length a proxy before
		// inlet may read otherwise (RFC 9112, 6.3). As net/http: 501.
		fail(ctx, http.StatusNotImplemented, "Transfer-Encoding other than chunked is not supported: send chunked or a Content-Length")
		return
	}
	fc, ok := ctx.Conn().(*fastConn)
	target := ctx.Request.Header.RequestURI()
	p, fast := f.fast[string(targetPath(target))]
	if !ok || !fast {
		f.handoff(ctx)
		return
	}
	if fc.ex == nil {
		fc.ex = newExchange(fc)
	}
	ex := fc.ex
	ex.reset(ctx, p, target)
	defer ex.done()
	f.cfg.Handler.ServeHTTP(&ex.w, &ex.r)
	ex.w.finish()
}

// handoff passes the connection of ctx's request over to the net/http
// server, with the request written out again before what the client sends
// next. The body is read whole first (fasthttp took its first bytes).
func (f *Front) handoff(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	var body []byte
	if hasBody(h) {
		limit := f.cfg.MaxHandoffBody
		if limit <= 0 {
			limit = 1 << 20
		}
		var err error
		body, err = io.ReadAll(io.LimitReader(ctx.RequestBodyStream(), limit+1))
		switch {
		case err != nil:
			fail(ctx, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		case int64(len(body)) > limit:
			fail(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes, the limit", limit))
			return
		}
		h.SetContentLength(len(body)) // and no Transfer-Encoding
	}
	h.Del("Expect") // fasthttp answered 100-continue already
	raw := h.AppendBytes(make([]byte, 0, 512+len(body)))
	f.hijack(ctx, append(raw, body...))
}

// expect decides on a request with Expect: 100-continue before fasthttp
// sends 100: a fast path's request Precheck refuses is answered as it
// says, without the body being sent (the connection then closes).
func (f *Front) expect(ctx *fasthttp.RequestCtx) int {
	h := &ctx.Request.Header
	target := h.RequestURI()
	p, fast := f.fast[string(targetPath(target))]
	if !fast {
		return http.StatusContinue
	}
	fc, ok := ctx.Conn().(*fastConn)
	if f.cfg.Precheck == nil || !ok {
		return http.StatusContinue
	}
	if fc.ex == nil {
		fc.ex = newExchange(fc)
	}
	ex := fc.ex
	ex.reset(ctx, p, target)
	ex.r.Body = http.NoBody // not asked for yet
	defer ex.done()
	if f.cfg.Precheck(&ex.w, &ex.r) {
		ctx.Response.Reset()
		return http.StatusContinue
	}
	ex.w.finish()
	closeLingering(ctx)
	return ctx.Response.StatusCode()
}

// hijack has fasthttp pass ctx's connection, once done with it, to the
// net/http server, with raw before what the client sends next.
func (f *Front) hijack(ctx *fasthttp.RequestCtx, raw []byte) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		f.netLn.push(&prefixConn{Conn: c, prefix: raw})
	})
}

// hasBody reports whether the request of h has a body, of any method:
// fasthttp reads the first byte of one ahead whenever it is framed.
func hasBody(h *fasthttp.RequestHeader) bool {
	cl := h.ContentLength()
	return cl > 0 || cl == -1
}

// hasTransferEncoding reports whether the raw header has a
// Transfer-Encoding line.
func hasTransferEncoding(raw []byte) bool {
	const name = "transfer-encoding:"
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) >= len(name) && (line[0] == 't' || line[0] == 'T') && bytes.EqualFold(line[:len(name)], []byte(name)) {
			return true
		}
	}
	return false
}

// targetPath is the path of a request target.
func targetPath(target []byte) []byte {
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		return target[:i]
	}
	return target
}

// fail answers a request fasthttp cannot hand over, and ends its
// connection.
func fail(ctx *fasthttp.RequestCtx, status int, msg string) {
	answer(ctx, status, msg)
	closeLingering(ctx)
}

// closeLingering has fasthttp close ctx's connection after the answer,
// reading out for a moment what the client still sends (fastConn.linger).
func closeLingering(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	if fc, ok := ctx.Conn().(*fastConn); ok {
		fc.linger.Store(true)
	}
}

// answer answers {"error": msg}.
func answer(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(append(b, '\n'))
}

// chanListener is a net.Listener of connections pushed to it.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept, or closes it when the listener is closed.
func (l *chanListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return chanAddr{} }

type chanAddr struct{}

func (chanAddr) Network() string { return "fastfront" }
func (chanAddr) String() string  { return "fastfront" }

// fastLogger logs fasthttp's messages (connections that failed: broken
// requests, timeouts) at warn, at most once per logEvery with a count, as
// a client can cause one per connection.
type fastLogger struct{ l *ratelog.Limiter }

const logEvery = 10 * time.Second

func (l fastLogger) Printf(format string, args ...any) {
	l.l.Log("err", unquoted(fmt.Sprintf(format, args...)))
}
