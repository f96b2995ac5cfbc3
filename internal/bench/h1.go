package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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
// It reads any HTTP/1.x answer: Content-Length, chunked, or up to the close
// of the connection; 1xx interim answers are skipped. It is safe for
// concurrent use; it holds at most Connections connections.
type h1Client struct {
	addr   string
	tls    *tls.Config // nil for http://
	dialer net.Dialer
	head   []byte // request line and headers, without Content-Length
	head0  bool   // HEAD: answers carry no body
	length bool   // send Content-Length even for an empty body
	// conns holds one token per connection allowed: an idle connection,
	// or nil where one may be dialed. A request waits for a token.
	conns chan *h1Conn
}

type h1Conn struct {
	c      net.Conn
	r      *bufio.Reader
	w      []byte
	reused bool // carried a request before: the server may have closed it
}

// errProtocol is an answer that is not HTTP/1.x.
var errProtocol = errors.New("bench: malformed HTTP answer")

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
		head0:  method == http.MethodHead,
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
	return &h1Conn{c: nc, r: bufio.NewReaderSize(nc, 16<<10)}, nil
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
// connection may carry another request; answered that a status line came.
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
	for {
		var chunked bool
		var length int64
		status, keep, chunked, length, err = c.readHead()
		if err != nil {
			return status, 0, false, status != 0, fmt.Errorf("reading the answer: %w", err)
		}
		if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
			continue // interim answer: the real one follows
		}
		switch {
		case h.head0 || status == http.StatusNoContent || status == http.StatusNotModified:
		case chunked:
			n, err = c.readChunked()
		case length >= 0:
			var m int
			m, err = c.r.Discard(int(length))
			n = int64(m)
		default:
			// No length: the body ends with the connection.
			n, err = io.Copy(io.Discard, c.r)
			keep = false
		}
		if err != nil {
			return status, n, false, true, fmt.Errorf("reading the body of a %d answer: %w", status, err)
		}
		return status, n, keep, true, nil
	}
}

// readHead reads a status line and headers.
func (c *h1Conn) readHead() (status int, keep, chunked bool, length int64, err error) {
	line, err := c.line()
	if err != nil {
		return 0, false, false, 0, err
	}
	// HTTP/1.1 200 OK
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, false, 0, fmt.Errorf("%w: status line %q", errProtocol, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, false, false, 0, fmt.Errorf("%w: status line %q", errProtocol, line)
	}
	http10 := line[7] == '0'
	keep, length = !http10, -1
	for {
		line, err = c.line()
		if err != nil {
			return status, false, false, 0, err
		}
		if len(line) == 0 {
			return status, keep, chunked, length, nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, false, false, 0, fmt.Errorf("%w: header %q", errProtocol, line)
		}
		v = bytes.TrimSpace(v)
		switch {
		case asciiEqualFold(k, "Content-Length"):
			if length, err = strconv.ParseInt(string(v), 10, 64); err != nil || length < 0 {
				return status, false, false, 0, fmt.Errorf("%w: Content-Length %q", errProtocol, v)
			}
		case asciiEqualFold(k, "Transfer-Encoding"):
			chunked = bytes.Contains(bytes.ToLower(v), []byte("chunked"))
		case asciiEqualFold(k, "Connection"):
			lv := bytes.ToLower(v)
			if bytes.Contains(lv, []byte("close")) {
				keep = false
			} else if http10 && bytes.Contains(lv, []byte("keep-alive")) {
				keep = true
			}
		}
	}
}

// readChunked reads a chunked body and its trailers.
func (c *h1Conn) readChunked() (n int64, err error) {
	for {
		line, err := c.line()
		if err != nil {
			return n, err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || size < 0 {
			return n, fmt.Errorf("%w: chunk size %q", errProtocol, line)
		}
		if size == 0 {
			for { // trailers, up to an empty line
				if line, err = c.line(); err != nil || len(line) == 0 {
					return n, err
				}
			}
		}
		m, err := c.r.Discard(int(size))
		n += int64(m)
		if err != nil {
			return n, err
		}
		if line, err = c.line(); err != nil || len(line) != 0 {
			return n, errors.Join(err, fmt.Errorf("%w: no CRLF after a chunk", errProtocol))
		}
	}
}

// line reads a line without its CRLF. It is valid until the next read.
func (c *h1Conn) line() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a line over %d bytes", errProtocol, c.r.Size())
		}
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
