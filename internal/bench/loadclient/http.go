// Package loadclient holds the targets package bench measures: HTTP (a lean
// HTTP/1.1 client, net/http, and an h2c client for tens of thousands of
// requests in flight), the Kafka producer, and the catalog over gRPC and
// Thrift; the sampler of a target's Prometheus /metrics; and the runs of
// `inlet bench`'s subcommands on them (RunHTTP, RunRPC, RunCatalog,
// RunKafka: a config in, the reports written).
package loadclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/klauspost/compress/gzip"
)

// HTTPConfig is an HTTP target.
type HTTPConfig struct {
	URL    string
	Method string
	Header http.Header
	// Body, if set, is sent as is with every request. Otherwise each request
	// carries a JSON array of Events events of about EventBytes bytes each,
	// every one with an id of its own.
	Body       []byte
	Events     int
	EventBytes int
	// Shape is the generated events' wire format: ShapeInlet (inlet's
	// events, a JSON array) or ShapeSegment (Segment track messages in a
	// batch wrapper, the same size each), to compare the two.
	Shape string
	// Gzip compresses every body (Content-Encoding: gzip).
	Gzip bool
	// Connections bounds the keep-alive connections to the target, with
	// ClientH1 and ClientStd. ClientH2C does not use it: it keeps H2Conns
	// connections, and what bounds its requests in flight is the run's
	// Config.Workers (which inlet bench sets from --connections).
	Connections int
	// Client is the HTTP client: ClientH1 (the default), lean enough that
	// one core of it outruns one core of a Go server, ClientStd, Go's
	// net/http (HTTP/2 where the server offers it over TLS), or ClientH2C.
	Client string
	// Run prefixes the event ids: <Run>-<n>. Empty: a random one.
	Run string
	// H2Conns is the number of TCP connections the h2c client multiplexes
	// its requests over, round robin. Each carries at most the streams the
	// server's SETTINGS_MAX_CONCURRENT_STREAMS allows at once; the requests
	// beyond that wait in their connection's queue until a stream ends or
	// their deadline passes.
	H2Conns int
	// TLS is the client TLS configuration for an https:// URL (its CAs,
	// InsecureSkipVerify); nil: the system's CAs. The server name and ALPN
	// are set from the URL and the client.
	TLS *tls.Config
}

// DefaultHTTPConfig posts batches of 5 events of about 100 bytes to a local
// inlet over at most 100 connections.
func DefaultHTTPConfig() HTTPConfig {
	return HTTPConfig{URL: "http://127.0.0.1:8080/v1/batch", Method: http.MethodPost, Events: 5, EventBytes: 100, Connections: 100, Client: ClientH1, H2Conns: 16}
}

// HTTP clients.
const (
	ClientH1  = "h1"
	ClientStd = "net/http"
	// ClientH2C is a lean HTTP/2 client without TLS (prior knowledge):
	// many requests in flight over H2Conns connections, asynchronous (see
	// HTTP.Async), so that tens of thousands in flight cost little.
	ClientH2C = "h2c"
)

// maxBody bounds a generated or given body.
const maxBody = 64 << 20

// Validate reports the first invalid setting.
func (c HTTPConfig) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return fmt.Errorf("bench: target %q: want http://host[:port]/path: %w", c.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("bench: target %q: want http://host[:port]/path or https://...", c.URL)
	case c.Method == "" || strings.ContainsAny(c.Method, " \t\r\n"):
		return fmt.Errorf("bench: invalid method %q", c.Method)
	case c.Client != "" && c.Client != ClientH1 && c.Client != ClientStd && c.Client != ClientH2C:
		return fmt.Errorf("bench: client %q: want %s, %s or %s", c.Client, ClientH1, ClientStd, ClientH2C)
	case c.Client == ClientH2C && !strings.HasPrefix(c.URL, "http://"):
		return fmt.Errorf("bench: client h2c is HTTP/2 without TLS: want an http:// target")
	case c.Connections <= 0:
		return errors.New("bench: connections must be positive")
	case c.Body == nil && c.Events <= 0:
		return errors.New("bench: events per request must be positive")
	case c.Shape != "" && c.Shape != ShapeInlet && c.Shape != ShapeSegment:
		return fmt.Errorf("bench: shape %q: want %s or %s", c.Shape, ShapeInlet, ShapeSegment)
	case c.Body == nil && c.EventBytes < 0:
		return errors.New("bench: event bytes must not be negative")
	case len(c.Body) > maxBody || c.Body == nil && int64(c.Events)*int64(max(c.EventBytes, 64)) > maxBody:
		return fmt.Errorf("bench: a body may be at most %d bytes", maxBody)
	}
	return nil
}

// HTTP is an HTTP target over keep-alive connections. Its Do is a Target.
type HTTP struct {
	cfg       HTTPConfig
	url       string
	host      string // Host header, if given
	client    *http.Client
	transport *http.Transport
	h1        *h1Client  // with ClientH1
	h2c       *h2cClient // with ClientH2C
	pad       string
	size      int    // of a generated body, about
	static    []byte // the body of every request, if not generated
	seq       atomic.Uint64
	bufs      sync.Pool // *bytes.Buffer
	gzips     sync.Pool // *gzip.Writer
}

// NewHTTP makes an HTTP target. Close it to close its connections.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Run == "" {
		cfg.Run = runName()
	}
	header := cfg.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	host := header.Get("Host")
	header.Del("Host")
	if header.Get("Content-Type") == "" && (cfg.Body == nil || looksJSON(cfg.Body)) {
		header.Set("Content-Type", "application/json")
	}
	if cfg.Gzip {
		header.Set("Content-Encoding", "gzip")
	}
	cfg.Header = header
	h := &HTTP{cfg: cfg, url: cfg.URL, host: host, pad: strings.Repeat("x", max(cfg.EventBytes, 0))}
	h.bufs.New = func() any { return new(bytes.Buffer) }
	h.size = cfg.Events*(max(cfg.EventBytes, 64)+32) + 2
	if h.static = cfg.Body; cfg.Body != nil && cfg.Gzip {
		h.static = h.gzip(cfg.Body)
	}
	u, _ := url.Parse(cfg.URL) // checked by Validate
	switch cfg.Client {
	case ClientH1, "":
		h.h1 = newH1Client(u, cfg.Method, host, header, cfg.Connections, cfg.TLS)
		return h, nil
	case ClientH2C:
		h.h2c = newH2CClient(u, cfg.Method, host, header, cfg.H2Conns)
		return h, nil
	}
	h.transport = &http.Transport{
		Proxy:               nil, // measure the target, never a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Connections,
		MaxIdleConnsPerHost: cfg.Connections,
		MaxConnsPerHost:     cfg.Connections,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     cfg.TLS.Clone(), // nil stays nil: the system's CAs
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   true,
	}
	h.client = &http.Client{
		Transport: h.transport,
		// A redirect is an answer to count, not to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h, nil
}

func looksJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '[' || b[0] == '{')
}

// String is the method and URL.
func (h *HTTP) String() string { return h.cfg.Method + " " + h.url }

// Close closes the idle connections; with ClientH2C, every connection
// (those going away after a GOAWAY too), failing the requests still in
// flight, and returns once the connections' goroutines have ended.
func (h *HTTP) Close() {
	switch {
	case h.h1 != nil:
		h.h1.close()
	case h.h2c != nil:
		h.h2c.close()
	default:
		h.transport.CloseIdleConnections()
	}
}

// Async returns the target as an AsyncTarget (for RunAsync) if its client
// is asynchronous (ClientH2C), else nil.
func (h *HTTP) Async() bench.AsyncTarget {
	if h.h2c == nil {
		return nil
	}
	return h.start
}

// start is the AsyncTarget of ClientH2C.
func (h *HTTP) start(ctx context.Context, deadline time.Time, done func(bench.Result)) {
	b := h.static
	if b == nil {
		b = h.body()
	}
	h.h2c.start(ctx, deadline, b, h.cfg.Events, done)
}

// Do sends one request and reads the whole answer. It is a Target: safe for
// concurrent use.
func (h *HTTP) Do(ctx context.Context) bench.Result {
	if h.h2c != nil {
		return bench.Blocking(h.start)(ctx)
	}
	b := h.static
	if b == nil {
		b = h.body()
	}
	n := int64(len(b))
	events := h.cfg.Events
	if h.h1 != nil {
		code, got, err := h.h1.do(ctx, b)
		if err != nil {
			return bench.Result{Err: err, Sent: n, Received: got, Events: events}
		}
		return bench.Result{Status: strconv.Itoa(code), OK: code/100 == 2, Sent: n, Received: got, Events: events}
	}
	// A *bytes.Reader lets the transport send headers and body in one
	// write; another reader would cost a second one.
	req, err := http.NewRequestWithContext(ctx, h.cfg.Method, h.url, bytes.NewReader(b))
	if err != nil {
		return bench.Result{Err: err}
	}
	req.Header = h.cfg.Header.Clone()
	if h.host != "" {
		req.Host = h.host
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return bench.Result{Err: err, Events: events}
	}
	got, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return bench.Result{Err: fmt.Errorf("reading the answer after status %d: %w", resp.StatusCode, err), Sent: n, Received: got, Events: events}
	}
	return bench.Result{Status: strconv.Itoa(resp.StatusCode), OK: resp.StatusCode/100 == 2, Sent: n, Received: got, Events: events}
}

// body makes the next request's body from the template. The body is the
// caller's: the transport may still be writing it after Do returns.
func (h *HTTP) body() []byte {
	raw := h.batch(make([]byte, 0, h.size))
	if !h.cfg.Gzip {
		return raw
	}
	return h.gzip(raw)
}

func (h *HTTP) gzip(raw []byte) []byte {
	buf := h.bufs.Get().(*bytes.Buffer)
	defer h.bufs.Put(buf)
	buf.Reset()
	zw, _ := h.gzips.Get().(*gzip.Writer)
	if zw == nil {
		zw, _ = gzip.NewWriterLevel(buf, gzip.BestSpeed)
	} else {
		zw.Reset(buf)
	}
	_, _ = zw.Write(raw)
	_ = zw.Close()
	h.gzips.Put(zw)
	return bytes.Clone(buf.Bytes())
}

// The shapes of generated bodies (HTTPConfig.Shape).
const (
	ShapeInlet   = "inlet"
	ShapeSegment = "segment"
)

// batch appends a JSON array of events to b: each
// {"event":"bench","id":"<run>-<n>","props":{"pad":"xxx"}}, padded to
// EventBytes where it is longer than that without padding. With
// ShapeSegment, {"batch":[...],"sentAt":"..."} of Segment track messages
// {"type":"track","event":"bench","messageId":"<run>-<n>","anonymousId":"a","properties":{"pad":"xxx"}},
// padded the same.
func (h *HTTP) batch(b []byte) []byte {
	head, mid, tail := `{"event":"bench","id":"`, `","props":{"pad":"`, `"}}`
	if h.cfg.Shape == ShapeSegment {
		head, mid = `{"type":"track","event":"bench","messageId":"`, `","anonymousId":"a","properties":{"pad":"`
		b = append(b, `{"batch":`...)
	}
	b = append(b, '[')
	for i := range h.cfg.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, head...)
		b = append(b, h.cfg.Run...)
		b = append(b, '-')
		start := len(b)
		b = strconv.AppendUint(b, h.seq.Add(1), 10)
		idLen := len(b) - start
		b = append(b, mid...)
		if pad := h.cfg.EventBytes - (len(head) + len(h.cfg.Run) + 1 + idLen + len(mid) + len(tail)); pad > 0 {
			b = append(b, h.pad[:pad]...)
		}
		b = append(b, tail...)
	}
	b = append(b, ']')
	if h.cfg.Shape == ShapeSegment {
		b = append(b, `,"sentAt":"`...)
		b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
	}
	return b
}
