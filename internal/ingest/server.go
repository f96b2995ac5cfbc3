package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/internal/membudget"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
)

// sinkWarnEvery is how often a failing sink is logged: an outage fails every
// request, and one line per 503 would flood the log.
const sinkWarnEvery = 10 * time.Second

// Server serves the ingest endpoints. It is safe for concurrent use.
type Server struct {
	cfg     Config
	sink    Sink
	log     *slog.Logger
	metrics *Metrics
	anyOrig bool
	origins map[string]bool
	now     func() time.Time
	budget  *membudget.Budget
	// inflate holds a token per decompression running, at most one per CPU.
	inflate chan struct{}
	zstd    *sync.Pool // *zstd.Decoder, bounded by the config
	// sinkWarn logs failed sink writes once per sinkWarnEvery, with a count.
	sinkWarn *ratelog.Limiter

	// With WithAuth and WithCatalog (plan.go); nil without.
	auth           Authenticator
	cat            Catalog
	routes         Routes
	mode           catalog.Mode // cat's
	defaultGroup   string
	unresolvedWarn *ratelog.Limiter
}

// New creates a Server writing to sink, with the parts opts add
// (credentials, the catalog). reg may be nil.
func New(cfg Config, sink Sink, log *slog.Logger, reg prometheus.Registerer, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, sink: sink, log: log, metrics: NewMetrics(reg), origins: map[string]bool{}, now: time.Now,
		budget:   membudget.NewShared(cfg.MaxInflightBytes, cfg.connShare()),
		inflate:  make(chan struct{}, runtime.GOMAXPROCS(0)),
		zstd:     newZstdPool(cfg.MaxDecompressedBytes),
		sinkWarn: ratelog.New(log, slog.LevelWarn, "sink write failed", sinkWarnEvery)}
	for _, o := range cfg.AllowedOrigins {
		if o == "*" {
			s.anyOrig = true
		} else {
			s.origins[strings.TrimRight(o, "/")] = true
		}
	}
	for _, o := range opts {
		o(s)
	}
	s.initPlan()
	return s, nil
}

// Budget is the in-flight body budget (MaxInflightBytes) the server charges
// what it reads to; give it to the gateway's other endpoints, so that every
// request body in memory counts against one bound.
func (s *Server) Budget() *membudget.Budget { return s.budget }

// Paths are the paths Register serves.
func Paths() []string {
	return append([]string{"/v1/batch", "/v1/track", "/i", "/i.gif"}, segmentPaths()...)
}

// Register adds the ingest routes to mux, at Paths.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("/v1/batch", s.route("batch", []string{http.MethodPost}, s.serveBatch))
	mux.Handle("/v1/track", s.route("track", []string{http.MethodPost}, s.serveTrack))
	s.registerSegment(mux)
	pixel := s.route("pixel", []string{http.MethodGet, http.MethodHead}, s.servePixel)
	mux.Handle("/i", pixel)
	mux.Handle("/i.gif", pixel)
}

// statusWriter records the status for metrics. Unwrap lets
// http.ResponseController reach the connection through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	// segment: the request is a Segment call; errors are answered in the
	// shape its SDKs read (writeError).
	segment bool
}

// Unwrap returns the wrapped ResponseWriter.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// routeMetrics are one route's metric children, resolved once rather than
// per request: the duration observer when the route is made, the request
// counter of a status the first time the route answers it. It is safe for
// concurrent use.
type routeMetrics struct {
	name     string
	m        *Metrics
	requests *prometheus.CounterVec
	duration prometheus.Observer
	// codes maps a status (int) to its prometheus.Counter. It holds at most
	// the statuses the server answers, a dozen.
	codes sync.Map
}

func newRouteMetrics(m *Metrics, name string) *routeMetrics {
	return &routeMetrics{name: name, m: m, requests: m.Requests, duration: m.Duration.WithLabelValues(name)}
}

// observe counts one answer with status code, started at start and
// finished at end; a 2xx answer to a request that sends events (not a
// preflight, not HEAD) is an acknowledgement (inlet_last_ack_timestamp_seconds).
func (m *routeMetrics) observe(method string, code int, start, end time.Time) {
	c, ok := m.codes.Load(code)
	if !ok {
		c, _ = m.codes.LoadOrStore(code, m.requests.WithLabelValues(m.name, strconv.Itoa(code)))
	}
	c.(prometheus.Counter).Inc()
	m.duration.Observe(end.Sub(start).Seconds())
	if code >= 200 && code < 300 && method != http.MethodOptions && method != http.MethodHead {
		m.m.acked(end)
	}
}

// route wraps a handler with method checks, CORS and metrics.
func (s *Server) route(name string, methods []string, h http.HandlerFunc) http.Handler {
	allow := strings.Join(append(append([]string{}, methods...), http.MethodOptions), ", ")
	rm := newRouteMetrics(s.metrics, name)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		defer func() {
			code := w.status
			if code == 0 {
				code = http.StatusOK
			}
			rm.observe(r.Method, code, start, time.Now())
		}()
		if r.Method == http.MethodOptions {
			s.preflight(w, r, allow)
			return
		}
		s.cors(w, r)
		for _, m := range methods {
			if r.Method == m {
				h(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		s.writeError(w, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; use %s", clip(r.Method), clip(r.URL.Path), strings.Join(methods, " or ")))
	})
}

func (s *Server) originAllowed(origin string) bool {
	return origin != "" && (s.anyOrig || s.origins[origin])
}

// cors sets the CORS headers of an actual (non-preflight) request.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	w.Header().Add("Vary", "Origin")
	if s.originAllowed(origin) {
		w.Header().Set("Access-Control-Allow-Origin", origin)
	}
}

// preflight answers a CORS preflight: 204 with the allowed methods and
// headers when the origin is allowed, 403 otherwise.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, allow string) {
	origin := r.Header.Get("Origin")
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	if origin == "" || r.Header.Get("Access-Control-Request-Method") == "" {
		h.Set("Allow", allow)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !s.originAllowed(origin) {
		s.writeError(w, errorf(http.StatusForbidden, "origin %s is not allowed (see --cors-origins)", clip(origin)))
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", allow)
	if s.auth != nil {
		h.Set("Access-Control-Allow-Headers", "Content-Type, Content-Encoding, Authorization")
	} else {
		h.Set("Access-Control-Allow-Headers", "Content-Type, Content-Encoding")
	}
	h.Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
}

// Rejection is one rejected event in an answer.
type Rejection struct {
	Index int    `json:"index"`
	Error string `json:"error"`
	// Reason is the rejection's reason code, for rejections by routing
	// (--routes): forbidden_topic, bad_topic, route_rule.
	Reason string `json:"reason,omitempty"`
	// Violations are how the event breaks the tracking plan, when that is
	// why it was rejected (--catalog-mode block, or a blocked event type).
	Violations []catalog.Violation `json:"violations,omitempty"`
}

// Answer is the body of a batch or track answer.
type Answer struct {
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
}

func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, callBatch) }
func (s *Server) serveTrack(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, callTrack) }

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request, c *call) {
	f, p, deferred, herr := s.precheck(r, c)
	if herr != nil {
		s.writeError(w, herr)
		return
	}
	hold := &membudget.Hold{B: s.budget, Conn: membudget.ConnFrom(r.Context())}
	defer hold.Release()
	body, herr := s.readBody(w, r, hold)
	if herr != nil {
		s.writeError(w, herr)
		return
	}
	defer putBuf(body)
	ib := itemsPool.Get().(*[][]byte)
	defer putItems(ib)
	items, sb, err := s.frame((*ib)[:0], body, f, c, w)
	*ib = items
	if err != nil {
		s.writeError(w, bodyError(err))
		return
	}
	if deferred != nil {
		if p, herr = s.authenticateKey(r, body, items, sb, deferred); herr != nil {
			s.writeError(w, herr)
			return
		}
	}
	meta := s.meta(r)
	meta.Client = clientID(p)
	b := event.NewBatch(s.cfg.Topic, meta, s.cfg.MaxEventBytes)
	done := false // the sink holds nothing of the records: recycle their memory
	defer func() {
		if done {
			b.Recycle()
		} else {
			b.Release()
		}
	}()
	if herr := s.add(b, items, body, f, c, sb); herr != nil {
		s.writeError(w, herr)
		return
	}
	if herr := s.admit(p, len(items)); herr != nil {
		s.writeError(w, herr)
		return
	}
	recs, ans, t := s.records(r, c.name, b, items, meta, p)
	var ok bool
	if ok, done = s.write(w, detached(r), recs); !ok {
		return
	}
	s.count(ans.Accepted, recs)
	t.count(s.metrics, s.mode)
	if isSegment(w) {
		writeSegmentAnswer(w, &ans)
		return
	}
	status := s.cfg.AckStatus
	if ans.Accepted == 0 {
		status = http.StatusBadRequest
	}
	writeAnswer(w, status, &ans)
}

// checkHeader refuses an events request by its header alone, before any of
// its body is read: its credentials first (with --auth, a caller without
// valid ones learns nothing else: 401 whatever the content type, encoding
// or length), then its Content-Type, its body's announced length and
// Content-Encoding. net/http sends 100 Continue only when the body is
// first read, so a request refused here never gets it.
func (s *Server) checkHeader(r *http.Request, single bool) (event.Format, auth.Principal, *httpError) {
	p, herr := s.authenticate(r)
	if herr != nil {
		return 0, p, herr
	}
	f, herr := format(r, single)
	if herr != nil {
		return 0, p, herr
	}
	return f, p, s.bodyHeaderError(r)
}

// itemsPool keeps the slices that hold a request's events between
// requests; putItems drops those of more than maxPooledItems.
// Gain: 5.6% less CPU and 6 allocations per request of 10 events (BenchmarkIngest -cpu 1, 2026-12-05).
var itemsPool = sync.Pool{New: func() any { return new([][]byte) }}

const maxPooledItems = 4096

func putItems(ib *[][]byte) {
	if cap(*ib) > maxPooledItems {
		return
	}
	clear(*ib) // keep no body alive
	*ib = (*ib)[:0]
	itemsPool.Put(ib)
}

// add reads each event of the request into b, once. Frame left the events'
// insides unchecked: a body whose fault an event's rejection hides
// (event.BodyFault: a syntax error inside an event of a JSON body, or of
// the single event of /v1/track) is answered as a whole (400 with the
// offset), not as a rejected event.
func (s *Server) add(b *event.Batch, items [][]byte, body []byte, f event.Format, c *call, sb *event.SegmentBatch) *httpError {
	for _, raw := range items {
		var bad *event.Invalid
		if c.segment || sb != nil || event.IsSegment(raw) {
			bad = b.AddSegment(raw, c.typ, sb)
		} else {
			bad = b.Add(raw)
		}
		if err := event.BodyFault(body, raw, f, bad); err != nil {
			return bodyError(err)
		}
	}
	return nil
}

// records turns a request's events, read into b (add), into their records,
// and the answer that says which were rejected and why.
func (s *Server) records(r *http.Request, endpoint string, b *event.Batch, items [][]byte, meta event.Meta, p auth.Principal) ([]event.Record, Answer, tally) {
	if s.planned() {
		return s.recordsPlanned(r, endpoint, b, items, meta, p)
	}
	b.Build()
	recs := b.RecordSlice(len(items))
	ans := Answer{Rejected: []Rejection{}}
	for i, raw := range items {
		if bad := b.Invalid(i); bad != nil {
			ans.Rejected = append(ans.Rejected, Rejection{Index: i, Error: bad.Msg})
			recs[i] = s.deadLetter(raw, bad, meta)
			continue
		}
		recs[i] = b.Record(i)
		ans.Accepted++
	}
	return recs, ans, tally{}
}

// deadLetter builds the dead-letter record of an invalid event. It aliases
// nothing of raw.
func (s *Server) deadLetter(raw []byte, bad *event.Invalid, meta event.Meta) event.Record {
	// Copy: raw aliases the pooled body buffer, and the sink may still
	// hold the record after Write returns (ack=none).
	cp := append([]byte(nil), raw...)
	rec := event.DeadLetter(s.cfg.DeadLetterTopicName(), cp, bad.Msg, meta.ReceivedAt, s.cfg.MaxEventBytes)
	rec.Headers = append(rec.Headers, event.Header{Key: event.HeaderReason, Value: []byte(bad.Reason)})
	return rec
}

// count records accepted and rejected events once the sink took them.
func (s *Server) count(accepted int, recs []event.Record) {
	s.metrics.EventsAccepted.Add(float64(accepted))
	for i := range recs {
		if recs[i].Topic == s.cfg.Topic {
			continue
		}
		for _, h := range recs[i].Headers {
			if h.Key == event.HeaderReason {
				s.metrics.rejected(h.Value).Inc()
			}
		}
	}
}

// write hands recs to the sink within the write timeout; on failure it
// answers and returns false: 413 when Kafka refused a record as too large
// (ErrSinkTooLarge) and 422 with the reason when it refused one for good
// (ErrSinkRejected), both without Retry-After as the same request cannot
// succeed; 503 with Retry-After for everything else. done is the sink's
// RecordsDone: recs' memory may serve another request.
func (s *Server) write(w http.ResponseWriter, parent context.Context, recs []event.Record) (ok, done bool) {
	if len(recs) == 0 { // every event dropped by a routes rule: nothing to store
		return true, true
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.WriteTimeout)
	defer cancel()
	err := s.sink.Write(ctx, recs)
	if rd, is := s.sink.(RecordsDone); is {
		done = rd.RecordsDone(err)
	}
	if err == nil {
		return true, done
	}
	kind, status, msg := "error", http.StatusServiceUnavailable, "events not stored: "+err.Error()
	switch {
	case errors.Is(err, ErrSinkFull):
		kind, msg = "full", "inlet is at capacity; retry later"
		// Which room ran out (the spool, the producer's buffer), as the
		// sink said beside ErrSinkFull.
		if cause := fullCause(err); cause != nil {
			msg = "inlet is at capacity (" + cause.Error() + "); retry later"
		}
	// Kafka refused a record for good. The request is not a transaction:
	// its other events may be stored, so it must not be sent again as is.
	case errors.Is(err, ErrSinkTooLarge):
		kind, status = "too_large", http.StatusRequestEntityTooLarge
		msg = "an event is larger than Kafka takes on this topic; not all events were stored: " + err.Error()
	case errors.Is(err, ErrSinkRejected):
		kind, status = "rejected", http.StatusUnprocessableEntity
		msg = "Kafka refused the events for good; not all events were stored: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		kind, msg = "timeout", "events not acknowledged within "+s.cfg.WriteTimeout.String()+"; retry later"
	case errors.Is(err, context.Canceled) && parent.Err() != nil:
		kind, msg = "client_gone", "client went away before events were acknowledged"
	}
	s.metrics.SinkErrors.WithLabelValues(kind).Inc()
	s.sinkWarn.Log("kind", kind, "records", len(recs), "err", err)
	herr := errorf(status, "%s", msg)
	herr.retry = status == http.StatusServiceUnavailable
	s.writeError(w, herr)
	return false, done
}

// fullCause is the error a sink wrapped beside ErrSinkFull (as in
// fmt.Errorf("%w: %w", ErrSinkFull, cause)) somewhere in err, or nil.
func fullCause(err error) error {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return fullCause(u.Unwrap())
	case interface{ Unwrap() []error }:
		es := u.Unwrap()
		if i := slices.Index(es, ErrSinkFull); i >= 0 {
			return errors.Join(append(es[:i:i], es[i+1:]...)...)
		}
		for _, e := range es {
			if c := fullCause(e); c != nil {
				return c
			}
		}
	}
	return nil
}

// detached is r's context, but one that the client going away does not
// cancel, for the sink write: a sink that took the records stores them even if its
// Write is cancelled, so the answer must say what happened to them (200
// once stored), not that the client went away. A client that shuts its
// write side but still reads (a half-close) ends the request's context in
// net/http. The write stays bounded by WriteTimeout.
func detached(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}

// meta is what the server knows about the request.
func (s *Server) meta(r *http.Request) event.Meta {
	return event.Meta{ReceivedAt: s.now(), IP: s.clientIP(r), UA: r.UserAgent()}
}

// ClientIP is the address of r's client, as events record it (ip) and as
// failed credentials are throttled by: the peer address, or, when the
// peer is a trusted proxy (--trusted-proxies), the rightmost
// X-Forwarded-For address that is not itself a trusted proxy.
func (s *Server) ClientIP(r *http.Request) string { return s.clientIP(r) }

func (s *Server) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	peer = peer.Unmap()
	if !s.trusted(peer) {
		if peer.Is4() && !strings.Contains(host, ":") {
			return host // as peer.String() has it (ParseAddr takes no other form of IPv4), without allocating
		}
		return peer.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return peer.String() // a forged or broken header: trust only the peer
			}
			if a = a.Unmap(); !s.trusted(a) {
				return a.String()
			}
			peer = a
		}
	}
	return peer.String()
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func bodyError(err error) *httpError {
	var be *event.BodyError
	if !errors.As(err, &be) {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	status := http.StatusBadRequest
	if errors.Is(err, event.ErrTooManyEvents) {
		status = http.StatusRequestEntityTooLarge
	}
	return &httpError{status: status, msg: be.Msg, offset: be.Offset}
}

type errorBody struct {
	Error  string `json:"error"`
	Offset *int64 `json:"offset,omitempty"`
}

// writeError answers e, with Retry-After where the client should retry,
// and WWW-Authenticate with a 401.
func (s *Server) writeError(w http.ResponseWriter, e *httpError) {
	s.errorHeaders(w.Header(), e)
	if isSegment(w) {
		writeSegmentError(w, e)
		return
	}
	b := errorBody{Error: e.msg}
	if e.offset >= 0 {
		b.Offset = &e.offset
	}
	writeJSON(w, e.status, b)
}

// errorHeaders sets the headers e's answer needs.
func (s *Server) errorHeaders(h http.Header, e *httpError) {
	switch {
	case e.retryAfter > 0:
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	case e.retry:
		h.Set("Retry-After", strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	if e.challenge != "" {
		// Bearer only: a Basic challenge has browsers prompt for a
		// password, which a page's beacons and pixels must not cause.
		h.Set("WWW-Authenticate", e.challenge)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages quote <, > and & as they are: this is not HTML
	_ = enc.Encode(v)
}
