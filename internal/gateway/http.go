package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/reply"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/netutil"
)

// routes adds the gateway's own endpoints to mux. Of net/http/pprof's,
// /debug/pprof/cmdline is left out: it shows the command line, with any
// secret given there as a flag (--kafka-sasl-password).
func (g *Gateway) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", g.serveRoot)
	mux.HandleFunc("GET /healthz", g.serveHealth)
	mux.HandleFunc("GET /readyz", g.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	if g.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
}

// newServer is the HTTP server: HTTP/1.1 and HTTP/2 without TLS (h2c), so a
// caller with many requests in flight needs few connections.
//
// Bounds against clients that hold the server's memory: at most
// HTTP2MaxStreams requests per HTTP/2 connection and MaxRequests at once
// in all (past it 503 at once, see limitRequests); an answer a client does
// not read within ResponseWriteTimeout is cut (a zero-window HTTP/2 peer
// held a handler goroutine per stream for the whole WriteTimeout); and each
// connection gets its membudget.Conn, so that its requests hold at most
// their share of the body budget.
func newServer(cfg Config, h http.Handler, log *slog.Logger) (*http.Server, error) {
	return newServerTLS(cfg, h, log, nil)
}

// newServerTLS is newServer that also serves HTTPS, HTTP/1.1 and HTTP/2 by
// ALPN, with tc on the listeners given to ServeTLS (nil: none).
func newServerTLS(cfg Config, h http.Handler, log *slog.Logger, tc *tls.Config) (*http.Server, error) {
	srv := &http.Server{
		TLSConfig:         tc,
		Handler:           limitRequests(cfg, h),
		ConnContext:       membudget.ConnContext,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		// An answer may wait for the body, then for Kafka.
		WriteTimeout:   cfg.ReadTimeout + cfg.Ingest.WriteTimeout + 5*time.Second,
		IdleTimeout:    cfg.IdleTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		// net/http names a connection's address in its errors, before any
		// client is known: they follow --ip-policy.
		ErrorLog:  slog.NewLogLogger(cfg.Ingest.Privacy.LogHandler(log.Handler()), slog.LevelWarn),
		Protocols: new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.Protocols.SetHTTP2(tc != nil)
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

// closeAmbiguous has an HTTP/1.x connection closed after the answer to a
// request whose framing a proxy in front may have read otherwise: one with
// a chunked body, and any HTTP/1.0 one. net/http reads a request with both
// Transfer-Encoding: chunked and a Content-Length by its chunks and keeps
// the connection, and it ignores Transfer-Encoding on HTTP/1.0 (keep-alive)
// — dropping the field it did not follow before a handler can see it. A
// proxy that framed the request by that field takes what follows for a
// body while inlet serves it as the next request (request smuggling); RFC
// 9112 §6.1 requires the close in both cases. As they cannot be told apart
// here, every chunked or HTTP/1.0 request gets it (browsers and inlet's
// SDKs send HTTP/1.1 with a length). TestSmuggling and FuzzFraming fail
// without it.
// limited.ServeHTTP calls it first, for every request.
func closeAmbiguous(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0) {
		w.Header().Set("Connection", "close")
	}
}

// opsPath reports whether path is an operator's endpoint: what
// --ops-listen moves off the public listener (publicView, opsView).
func opsPath(path string) bool {
	return path == "/metrics" || path == "/ui" || strings.HasPrefix(path, "/ui/") ||
		path == "/debug/pprof" || strings.HasPrefix(path, "/debug/")
}

// publicView is mux without the operators' endpoints (opsPath): 404 for
// them, as for any path it does not serve.
func publicView(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opsPath(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// opsView is mux with only the operators' endpoints, the probes
// (/healthz, /readyz, which both listeners serve) and GET /; 404 for the rest.
func opsView(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			r = withOps(r) // GET / lists this listener's endpoints
		} else if !opsPath(r.URL.Path) && !unlimited[r.URL.Path] {
			http.NotFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// unlimited are the paths limitRequests lets through when full: probes
// answer at once, and a liveness probe refused under load would have the
// gateway restarted.
var unlimited = map[string]bool{"/healthz": true, "/readyz": true}

// Request classes: each has its own share of --max-requests (and ingest
// and request-reply each their own share of --max-inflight-bytes, see
// bodyShares), so that one kind of traffic cannot take what another
// needs: 400 stalled request-reply uploads, or 1,000 slow clients of the
// live page, made ingest answer 503 when they shared one limit.
const (
	classIngest = iota // ingest.Paths()
	classRPC           // /v1/rpc/{service}, until the call's request is sent
	classOther         // the rest: operators' endpoints, the UI, unknown paths
	numClasses
)

// classNames name the classes in messages and metrics.
var classNames = [numClasses]string{"ingest", "rpc", "other"}

// classQuarters is each class's share of --max-requests, in quarters.
var classQuarters = [numClasses]int{2, 1, 1}

// classLimits are the classes' shares of max requests at once, each at
// least 1.
func classLimits(n int) (l [numClasses]int64) {
	for c, q := range classQuarters {
		l[c] = int64(max(n*q/4, 1))
	}
	return l
}

// limitRequests runs h for at most cfg.maxRequests() requests at once,
// each class of requests (classOf) within its share (classLimits): past it
// a request is answered 503 with Retry-After at once, rather than a
// goroutine (and its buffers) held per request, which 20 HTTP/2
// connections of 1,000 streams took to 20,000 (480 MB). Each answer gets
// ResponseWriteTimeout to be written from its first byte.
//
// A request-reply call gives its slot back once its request is sent
// (reply.Handler calls ReleaseSlot on the ResponseWriter): waiting for its
// reply it holds no body, and --rpc-max-in-flight bounds the waiting calls.
//
// Its frame sits under every waiting request-reply call, whose stack is
// most of the call's memory (TestRPCStackPerWaitingCall): keep it small,
// the refusal out of line.
func limitRequests(cfg Config, h http.Handler) http.Handler {
	l := &limited{h: h, limit: classLimits(cfg.maxRequests()), ingest: map[string]bool{}, writeTimeout: cfg.ResponseWriteTimeout,
		retry: strconv.Itoa(int((cfg.Ingest.RetryAfter + time.Second - 1) / time.Second))}
	for _, p := range ingest.Paths() {
		l.ingest[p] = true
	}
	return l
}

func (l *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	closeAmbiguous(w, r)
	dw := &deadlineWriter{ResponseWriter: w, d: l.writeTimeout}
	l.serve(dw, r)
	if dw.code == http.StatusRequestEntityTooLarge && r.ProtoMajor == 1 {
		l.readOut(dw, r)
	}
}

// limited is the state of limitRequests. It is a prometheus.Collector of
// its counts.
type limited struct {
	h            http.Handler
	limit        [numClasses]int64
	inFlight     [numClasses]atomic.Int64
	refused      [numClasses]atomic.Int64
	ingest       map[string]bool // ingest.Paths()
	writeTimeout time.Duration
	retry        string
	readingOut   atomic.Int64 // readOut calls running
}

// Bounds of readOut: what it reads of one body, for how long in all and
// without a byte, and how many bodies at once.
const (
	readOutMax     = 32 << 20
	readOutTotal   = 5 * time.Second
	readOutIdle    = 2 * time.Second
	readOutAtOnce  = 256
	readOutBufSize = 32 << 10
)

// readOut reads and drops the rest of the body of a request answered 413,
// after sending the answer. net/http reads at most 256 KiB of what a
// handler left (none after http.MaxBytesReader's limit) and closes the
// connection with the rest unread: the kernel then resets it, and a client
// that writes its whole body before reading (Python's http.client, ab, a
// beacon library) gets "connection reset" or "broken pipe" instead of the
// 413, and retries the same body for ever. Reading to the body's end, the
// client reads its answer; the connection is closed as usual after it when
// the limit was met in the body. Bounded: readOutMax bytes, readOutTotal,
// readOutIdle without a byte, readOutAtOnce bodies at once (past it,
// net/http's own handling). Not for a request that asked for 100 Continue:
// its client waits for the answer before sending the body, and has it.
func (l *limited) readOut(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return
	}
	if l.readingOut.Add(1) > readOutAtOnce {
		l.readingOut.Add(-1)
		return
	}
	defer l.readingOut.Add(-1)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	// net/http sets the next request's deadlines only when it has
	// timeouts; leave none behind for a server without them.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	end := time.Now().Add(readOutTotal)
	buf := make([]byte, readOutBufSize)
	for n := 0; n < readOutMax; {
		d := time.Now().Add(readOutIdle)
		if d.After(end) {
			d = end
		}
		if rc.SetReadDeadline(d) != nil {
			return
		}
		m, err := r.Body.Read(buf)
		n += m
		if err != nil {
			return
		}
	}
}

// classOf is the class of a request for path.
func (l *limited) classOf(path string) int {
	switch {
	case l.ingest[path]:
		return classIngest
	case strings.HasPrefix(path, "/v1/rpc/"):
		return classRPC
	}
	return classOther
}

// serve runs h for r within its class's share. Its slot is given back
// when h returns, or before by the handler through w.ReleaseSlot when w is
// a *deadlineWriter.
func (l *limited) serve(w http.ResponseWriter, r *http.Request) {
	if unlimited[r.URL.Path] {
		l.h.ServeHTTP(w, r)
		return
	}
	c := l.classOf(r.URL.Path)
	n := &l.inFlight[c]
	if n.Add(1) > l.limit[c] {
		n.Add(-1)
		l.refuse(w, c)
		return
	}
	if dw, ok := w.(*deadlineWriter); ok {
		dw.slot = n
		defer dw.ReleaseSlot()
	} else {
		defer n.Add(-1)
	}
	l.h.ServeHTTP(w, r)
}

// refuse answers a request past its class's share of --max-requests.
func (l *limited) refuse(w http.ResponseWriter, c int) {
	l.refused[c].Add(1)
	w.Header().Set("Retry-After", l.retry)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "{\"error\":\"inlet is serving %d %s requests, the most it serves at once (their share of --max-requests); retry later\"}\n", l.limit[c], classNames[c])
}

var (
	inFlightDesc = prometheus.NewDesc("inlet_http_requests_in_flight", "HTTP requests being served, by class (request-reply calls until their request is sent).", []string{"class"}, nil)
	limitDesc    = prometheus.NewDesc("inlet_http_requests_limit", "Each class's share of --max-requests.", []string{"class"}, nil)
	refusedDesc  = prometheus.NewDesc("inlet_http_requests_refused_total", "HTTP requests answered 503 because their class had its share of --max-requests in flight.", []string{"class"}, nil)
)

// Describe implements prometheus.Collector.
func (l *limited) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- limitDesc
	ch <- refusedDesc
}

// Collect implements prometheus.Collector.
func (l *limited) Collect(ch chan<- prometheus.Metric) {
	for c, name := range classNames {
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(l.inFlight[c].Load()), name)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(l.limit[c]), name)
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(l.refused[c].Load()), name)
	}
}

// deadlineWriter gives the answer d to be written, from when its header
// goes out: a client that reads nothing (a zero HTTP/2 window, a full TCP
// buffer) has its stream or connection cut then, and the handler's
// goroutine ends. It unwraps for http.ResponseController.
type deadlineWriter struct {
	http.ResponseWriter
	d     time.Duration // 0: none
	armed bool
	code  int           // the answer's status, once WriteHeader is called
	slot  *atomic.Int64 // the class's count the request holds a slot of (limited.serve), nil once given back
}

var _ reply.SlotReleaser = (*deadlineWriter)(nil)

// Unwrap returns the wrapped ResponseWriter.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReleaseSlot gives back the request's slot of --max-requests, if it
// holds one: reply.Handler calls it when a call's request is sent. Call it
// from the handler's goroutine.
func (w *deadlineWriter) ReleaseSlot() {
	if s := w.slot; s != nil {
		w.slot = nil
		s.Add(-1)
	}
}

func (w *deadlineWriter) arm() {
	if !w.armed && w.d > 0 {
		w.armed = true
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	if code >= 200 { // not for 1xx: the answer has not started
		w.arm()
		if w.code == 0 {
			w.code = code
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

// Flush keeps the http.Flusher of the wrapped writer.
func (w *deadlineWriter) Flush() {
	w.arm()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// listen listens on addr with at most MaxConns connections open at once
// (netutil.LimitListener: past it, Accept waits for one to close).
func (g *Gateway) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || g.cfg.MaxConns == 0 {
		return ln, err
	}
	return netutil.LimitListener(ln, g.cfg.MaxConns), nil
}

// startHTTP serves mux with one net/http server on every listener: the
// plain one (HTTP/1.1 and h2c) and the HTTPS one (HTTP/1.1 and HTTP/2 by
// ALPN). One parser per port: nothing sniffs a connection or hands it from
// one HTTP stack to another, where request smuggling lives (issue 27).
func (g *Gateway) startHTTP(mux *http.ServeMux) error {
	var tc *tls.Config
	if g.cfg.TLSCert != "" {
		r, err := newCertReloader(g.cfg.TLSCert, g.cfg.TLSKey, g.log)
		if err != nil {
			return err
		}
		g.certs, tc = r, r.tlsConfig()
		if iv := g.cfg.TLSReloadInterval; iv > 0 {
			r.watch(iv)
			g.lc.started("HTTPS certificate watcher", 0, func(context.Context) error { r.Close(); return nil })
		}
	}
	var public http.Handler = mux
	if g.cfg.OpsListen != "" {
		public = publicView(mux)
	}
	srv, err := newServerTLS(g.cfg, public, g.log, tc)
	if err != nil {
		return err
	}
	ln, err := g.listen(g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.cfg.Listen, err)
	}
	g.srv, g.ln = srv, ln
	type listener struct {
		srv *http.Server
		ln  net.Listener
		tls bool
	}
	lns := []listener{{srv, ln, tc != nil && g.cfg.TLSListen == ""}}
	closeAll := func() {
		for _, l := range lns {
			l.ln.Close()
		}
	}
	if tc != nil && g.cfg.TLSListen != "" {
		tln, err := g.listen(g.cfg.TLSListen)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on %s (--tls-listen): %w", g.cfg.TLSListen, err)
		}
		lns = append(lns, listener{srv, tln, true})
		g.tlsLn = tln
	} else if lns[0].tls {
		g.tlsLn = ln
	}
	if g.cfg.OpsListen != "" {
		osrv, err := newServer(g.cfg, opsView(mux), g.log)
		if err != nil {
			closeAll()
			return err
		}
		oln, err := net.Listen("tcp", g.cfg.OpsListen)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on %s (--ops-listen): %w", g.cfg.OpsListen, err)
		}
		lns = append(lns, listener{osrv, oln, false})
		g.opsLn = oln
	}
	servers := []*http.Server{srv}
	if g.opsLn != nil {
		servers = append(servers, lns[len(lns)-1].srv)
	}
	g.servers = servers
	stopAll := func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(lns))
	for _, l := range lns {
		wg.Go(func() {
			var err error
			if l.tls {
				err = l.srv.ServeTLS(l.ln, "", "") // the certificate comes from TLSConfig.GetCertificate
			} else {
				err = l.srv.Serve(l.ln)
			}
			if err = serveErr(err); err != nil {
				errs <- err
				stopAll() // one listener failed: stop serving, as with a single one
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			g.served <- err
		}
		close(g.served)
	}()
	g.lc.started("HTTP server", weightHTTP, func(ctx context.Context) error {
		var swg sync.WaitGroup
		for _, s := range servers {
			swg.Go(func() {
				if err := s.Shutdown(ctx); err != nil {
					// Requests still running were not answered, so nothing
					// they carried was acknowledged: their clients retry.
					g.log.Warn("requests still in flight at their share of the shutdown deadline; closing their connections", "err", err)
					_ = s.Close()
				}
			})
		}
		swg.Wait()
		<-done
		return nil
	})
	return nil
}
