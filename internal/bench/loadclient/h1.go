package loadclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// h1Client is a lean HTTP/1.1 client over keep-alive connections. Each
// request is written with one write and its answer read by the calling
// goroutine, with no goroutine of the client's own. net/http's transport
// hands every request between three goroutines, and costs more per request
// than a Go server spends answering it; with it, one core of load generator
// could not saturate one core of server (see HTTPConfig.Client).
//
// Answers are read with net/http's parser (http.ReadResponse): any HTTP/1.x
// answer, Content-Length, chunked, or up to the close of the connection;
// 1xx interim answers are skipped. It is safe for concurrent use; it holds
// at most Connections connections.
//
// Kept over net/http's client, closed loop of 100 connections to cmd/noop: 58,973 vs 37,118 req/s, 15.8 vs 25.6 µs of CPU a request (BENCHMARKS.md, issue 28).
type h1Client struct {
	addr   string
	tls    *tls.Config // nil for http://
	dialer net.Dialer
	head   []byte        // request line and headers, without Content-Length
	req    *http.Request // the method, for http.ReadResponse (HEAD: no body)
	length bool          // send Content-Length even for an empty body
	// conns holds one token per connection allowed: an idle connection,
	// or nil where one may be dialed. A request waits for a token.
	conns chan *h1Conn
}

type h1Conn struct {
	c      net.Conn
	lim    io.LimitedReader // under r: bounds an answer's header
	r      *bufio.Reader
	w      []byte
	reused bool // carried a request before: the server may have closed it
}

// maxHeaderBytes bounds the header of an answer, as net/http's Transport
// does (MaxResponseHeaderBytes).
const maxHeaderBytes = 1 << 20

// aLongTimeAgo is a deadline that makes blocked reads and writes return.
var aLongTimeAgo = time.Unix(1, 0)

// newH1Client makes the client of u; base, if not nil, is the TLS
// configuration of an https:// u (its CAs), to which the server name and
// ALPN are added.
func newH1Client(u *url.URL, method, host string, header http.Header, connections int, base *tls.Config) *h1Client {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	c := &h1Client{
		addr:   net.JoinHostPort(u.Hostname(), port),
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		req:    &http.Request{Method: method},
		length: method != http.MethodGet && method != http.MethodHead,
		conns:  make(chan *h1Conn, connections),
	}
	if u.Scheme == "https" {
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if base != nil {
			c.tls = base.Clone()
		}
		c.tls.ServerName, c.tls.NextProtos = u.Hostname(), []string{"http/1.1"}
	}
	if host == "" {
		host = u.Host
	}
	h := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, u.RequestURI(), host)
	if header.Get("User-Agent") == "" {
		h = append(h, "User-Agent: inlet-bench\r\n"...)
	}
	keys := make([]string, 0, len(header))
	for k := range header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range header[k] {
			h = fmt.Appendf(h, "%s: %s\r\n", k, v)
		}
	}
	c.head = h
	for range connections {
		c.conns <- nil
	}
	return c
}

// do sends one request with body and reads the whole answer.
func (h *h1Client) do(ctx context.Context, body []byte) (status int, received int64, err error) {
	var c *h1Conn
	select {
	case c = <-h.conns:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	defer func() { h.conns <- c }()
	for {
		if c == nil {
			if c, err = h.dial(ctx); err != nil {
				return 0, 0, err
			}
		}
		var keep, answered bool
		status, received, keep, answered, err = c.roundTrip(ctx, h, body)
		if err == nil && keep {
			c.reused = true
			return status, received, nil
		}
		// A server may close a keep-alive connection just as a request is
		// sent on it: send it again on a new one, as browsers do.
		retry := err != nil && c.reused && !answered && stale(err) && ctx.Err() == nil
		c.c.Close()
		c = nil
		if err != nil && ctx.Err() != nil {
			// The deadline or cancellation of ctx, not the server's doing.
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if !retry {
			return status, received, err
		}
	}
}

func stale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (h *h1Client) dial(ctx context.Context) (*h1Conn, error) {
	nc, err := h.dialer.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	if h.tls != nil {
		tc := tls.Client(nc, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &h1Conn{c: nc, lim: io.LimitedReader{R: nc}}
	c.r = bufio.NewReaderSize(&c.lim, 16<<10)
	return c, nil
}

// close closes every idle connection.
func (h *h1Client) close() {
	n := 0
	for drained := false; !drained; {
		select {
		case c := <-h.conns:
			if c != nil {
				c.c.Close()
			}
			n++
		default:
			drained = true
		}
	}
	for range n {
		h.conns <- nil
	}
}

// roundTrip writes the request and reads the answer. keep says the
// connection may carry another request; answered that a byte of the answer
// came.
func (c *h1Conn) roundTrip(ctx context.Context, h *h1Client, body []byte) (status int, n int64, keep, answered bool, err error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(dl)
	} else {
		_ = c.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(aLongTimeAgo) })
	defer stop()

	w := append(c.w[:0], h.head...)
	if len(body) > 0 || h.length {
		w = append(w, "Content-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	if cap(w) <= 64<<10 {
		c.w = w
	}
	if _, err = c.c.Write(w); err != nil {
		return 0, 0, false, false, fmt.Errorf("writing the request: %w", err)
	}
	// A byte of the answer makes it answered: the request is not sent again.
	c.lim.N = maxHeaderBytes
	if _, err = c.r.Peek(1); err != nil {
		return 0, 0, false, false, fmt.Errorf("reading the answer: %w", err)
	}
	for {
		resp, err := http.ReadResponse(c.r, h.req)
		if err != nil && c.lim.N == 0 {
			err = fmt.Errorf("an answer's header over %d bytes", maxHeaderBytes)
		}
		c.lim.N = math.MaxInt64
		if err != nil {
			return 0, 0, false, true, fmt.Errorf("reading the answer: %w", err)
		}
		status = resp.StatusCode
		if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
			c.lim.N = maxHeaderBytes
			continue // interim answer: the real one follows
		}
		if n, err = io.Copy(io.Discard, resp.Body); err != nil {
			return status, n, false, true, fmt.Errorf("reading the body of a %d answer: %w", status, err)
		}
		return status, n, !resp.Close, true, nil
	}
}
