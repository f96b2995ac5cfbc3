package reply

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/membudget"
)

// Producer hands request records to Kafka.
type Producer interface {
	// Produce enqueues rec and returns at once, with an error when it
	// cannot (the buffer is full, say). done is then called once, from a
	// producer goroutine, with nil once Kafka acknowledged rec, or with
	// the failure; it must not block.
	Produce(rec *event.Record, done func(error)) error
}

// ProducerFunc is a function that is a Producer.
type ProducerFunc func(rec *event.Record, done func(error)) error

// Produce implements Producer.
func (f ProducerFunc) Produce(rec *event.Record, done func(error)) error { return f(rec, done) }

// Config configures the request-reply endpoint.
type Config struct {
	// Services are the services callers may address; "*" allows any. Empty
	// disables the endpoint (every service answers 404): each service is a
	// topic, and topics should not be made on a caller's whim.
	Services     []string
	TopicPrefix  string        // the request topic is TopicPrefix + service
	Timeout      time.Duration // when the caller sends no Inlet-Timeout
	MaxTimeout   time.Duration // Inlet-Timeout is capped to this
	MaxInFlight  int           // waiting requests; 503 past it
	MaxBodyBytes int64         // request body (413 past it)
	RetryAfter   time.Duration
	// ForwardHeaders are the credential headers (Authorization, Cookie)
	// copied into request records anyway; by default they are not, since
	// a request topic keeps what it holds for its retention, readable by
	// whoever may read the topic. Proxy-Authorization is never copied.
	ForwardHeaders []string
	// ForwardQuery copies the query string into request records; by
	// default it is not (it carries secrets too: tokens, signatures).
	ForwardQuery bool
	// Admit, when set, is asked about each call before anything of its
	// body is read (and before the service is looked up, so that a caller
	// without credentials learns nothing of the services): it returns the
	// id of the calling client, which the request record carries as
	// inlet-client, or why the call is refused, a *Refusal (any other
	// error answers 401).
	Admit func(r *http.Request) (client string, err error)
	// Budget is charged the request bodies held in memory, from their
	// first byte read until Kafka took them; past it a call is answered
	// 503. The gateway passes request-reply's share of its budget; nil
	// means a budget of the handler's own of DefaultBudgetBytes.
	Budget *membudget.Budget
}

// Refusal is why Config.Admit refused a call: the status the caller gets,
// headers for the answer (WWW-Authenticate, Retry-After) and the message.
type Refusal struct {
	Status int
	Header http.Header
	Msg    string
}

func (r *Refusal) Error() string { return r.Msg }

// DefaultBudgetBytes is the size of the handler's own body budget when
// Config.Budget is nil: ingest's default --max-inflight-bytes.
const DefaultBudgetBytes = 64 << 20

// credentialHeaders are the request headers withheld from request records
// unless Config.ForwardHeaders names them.
var credentialHeaders = []string{"Authorization", "Cookie"}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{TopicPrefix: "rpc.", Timeout: 10 * time.Second, MaxTimeout: 60 * time.Second,
		MaxInFlight: 50_000, MaxBodyBytes: 1 << 20, RetryAfter: time.Second}
}

var serviceName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Timeout <= 0 || c.MaxTimeout < c.Timeout:
		return fmt.Errorf("rpc: timeout %v and max timeout %v: want 0 < timeout <= max", c.Timeout, c.MaxTimeout)
	case c.MaxInFlight <= 0 || c.MaxBodyBytes <= 0:
		return errors.New("rpc: max in flight and max body must be positive")
	case c.Budget != nil && c.Budget.Max() < c.MaxBodyBytes:
		return fmt.Errorf("rpc: max body bytes (%d) is above the in-flight body budget (%d)", c.MaxBodyBytes, c.Budget.Max())
	}
	for _, h := range c.ForwardHeaders {
		if !slices.Contains(credentialHeaders, http.CanonicalHeaderKey(h)) {
			return fmt.Errorf("rpc: forward header %q: only %s are withheld, and can be allowed", h, strings.Join(credentialHeaders, " and "))
		}
	}
	for _, s := range c.Services {
		if s != "*" && !serviceName.MatchString(s) {
			return fmt.Errorf("rpc: service %q: letters, digits, '.', '_' and '-' only", s)
		}
	}
	return nil
}

// Handler serves POST /v1/rpc/{service}. It is safe for concurrent use.
type Handler struct {
	cfg       Config
	router    *Router
	transport Transport
	producer  Producer
	log       *slog.Logger
	any       bool
	services  map[string]bool
	budget    *membudget.Budget
	withheld  []string // credential headers not forwarded

	// The requests to produce, handed from the HTTP handlers to sender:
	// the producer's code path is deep, and run on a handler's goroutine
	// it grew the goroutine's stack, which the call then holds while it
	// waits (8 KiB per call in flight instead of 4; see BENCHMARKS.md).
	sendq   chan outgoing
	stop    chan struct{}
	stopped chan struct{}
}

// outgoing is a request record for the sender, and the bytes of the
// budget its body holds until Kafka took it or refused it.
type outgoing struct {
	rec   *event.Record // EventID is the correlation id
	taken int64
}

// sendQueue bounds the requests waiting for the sender goroutine; past
// it, calls are answered 503. It only fills if that goroutine gets no CPU.
const sendQueue = 8192

// NewHandler returns the endpoint, producing with p and receiving replies
// through t into r. With no service enabled, p and t may be nil: every call
// is answered 404. Close stops it.
func NewHandler(cfg Config, r *Router, t Transport, p Producer, log *slog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, router: r, transport: t, producer: p, log: log, services: map[string]bool{},
		budget: cfg.Budget, sendq: make(chan outgoing, sendQueue), stop: make(chan struct{}), stopped: make(chan struct{})}
	if h.budget == nil {
		h.budget = membudget.New(max(DefaultBudgetBytes, cfg.MaxBodyBytes))
	}
	for _, c := range credentialHeaders {
		if !slices.ContainsFunc(cfg.ForwardHeaders, func(f string) bool { return http.CanonicalHeaderKey(f) == c }) {
			h.withheld = append(h.withheld, c)
		}
	}
	for _, s := range cfg.Services {
		if s == "*" {
			h.any = true
		}
		h.services[s] = true
	}
	go h.sender()
	return h, nil
}

// Close stops the handler's sender goroutine. Call it once no request is
// served any more (after the HTTP server's shutdown); requests still
// queued then are not produced, and their callers get 504.
func (h *Handler) Close() {
	close(h.stop)
	<-h.stopped
	for {
		select {
		case o := <-h.sendq:
			h.budget.Release(o.taken)
		default:
			return
		}
	}
}

// sender hands queued requests to the producer until Close.
func (h *Handler) sender() {
	defer close(h.stopped)
	for {
		select {
		case o := <-h.sendq:
			id, taken := o.rec.EventID, o.taken
			done := func(err error) {
				h.budget.Release(taken) // Kafka has the body, or never will
				if err != nil {
					h.router.Fail(id, err)
				}
			}
			if err := h.producer.Produce(o.rec, done); err != nil {
				done(err)
			}
		case <-h.stop:
			return
		}
	}
}

// Register adds the route to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("/v1/rpc/{service}", h)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	code := h.serve(w, r, arrived)
	h.router.metrics.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
	h.router.metrics.Latency.Observe(time.Since(arrived).Seconds())
}

// serve answers one call. A call spends nearly all its life parked in
// wait, and its goroutine's stack is then the biggest part of its memory:
// the stack keeps the size it grew to. So the work before the wait
// (reading the body, building the record) is done in send, whose frames
// are gone by then, and the producer's deeper path runs on the sender
// goroutine: a parked call holds about 1.4 KiB of frames in a 4 KiB stack
// (8 KiB when the producer ran here; TestRPCStackPerWaitingCall).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, arrived time.Time) int {
	c, code := h.send(w, r, arrived)
	if c == nil {
		return code
	}
	defer h.router.Remove(c.id) // on every path: reply, timeout, client gone, error
	if s, ok := w.(SlotReleaser); ok {
		s.ReleaseSlot() // waiting, the call holds no body: MaxInFlight bounds it
	}
	return h.wait(w, r.Context().Done(), c)
}

// SlotReleaser is a ResponseWriter whose server counts the request against
// a limit of requests served at once, sized for requests that hold bodies
// (the gateway's --max-requests). The handler calls ReleaseSlot, on the
// request's goroutine, once the call's request is handed to the producer:
// from then on the call holds no body, only its waiter, which
// Config.MaxInFlight bounds.
type SlotReleaser interface{ ReleaseSlot() }

// call is a request on its way to Kafka or there, waiting for its reply.
type call struct {
	id       string
	service  string
	timeout  time.Duration
	deadline time.Time
	replies  <-chan Reply
}

// send checks the request, registers its waiter and hands the request
// record to the producer. It returns the call, or nil and the status it
// answered. On a nil call, nothing is left registered.
func (h *Handler) send(w http.ResponseWriter, r *http.Request, arrived time.Time) (*call, int) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, h.fail(w, http.StatusMethodNotAllowed, "method %s is not allowed on %s; use POST", cut(r.Method), cut(r.URL.Path))
	}
	var client string
	if h.cfg.Admit != nil {
		c, err := h.cfg.Admit(r)
		if err != nil {
			return nil, h.refuse(w, err)
		}
		client = c
	}
	service := r.PathValue("service")
	if !serviceName.MatchString(service) {
		return nil, h.fail(w, http.StatusBadRequest, "service %q: letters, digits, '.', '_' and '-' only, at most 100", cut(service))
	}
	if !h.any && !h.services[service] {
		return nil, h.fail(w, http.StatusNotFound, "service %q is not enabled on this gateway (see --rpc-services)", cut(service))
	}
	timeout := h.cfg.Timeout
	if v := r.Header.Get("Inlet-Timeout"); v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return nil, h.fail(w, http.StatusBadRequest, "Inlet-Timeout %q: %v", cut(v), err)
		}
		timeout = min(d, h.cfg.MaxTimeout)
	}
	// One deadline for everything, counted from the request's arrival
	// (time.Time.Add saturates; FormatDeadline too).
	deadline := arrived.Add(timeout)
	// The answer is written by the deadline and a margin, whatever the
	// server's WriteTimeout: a call may wait up to --rpc-max-timeout, and
	// one cut by the server's timeout left its caller with a reset
	// connection (and a retry of work that was done) instead of the reply
	// or a 504. Not every ResponseWriter can (a test's recorder).
	_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(writeMargin))
	// Checked before the body is read: reading it is what sends a client
	// waiting on "Expect: 100-continue" the go-ahead to upload it.
	if r.ContentLength > h.cfg.MaxBodyBytes {
		w.Header().Set("Connection", "close") // rather than read the body to its end
		return nil, h.fail(w, http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit (Content-Length: %d)", h.cfg.MaxBodyBytes, r.ContentLength)
	}
	if err := h.transport.Healthy(); err != nil {
		return nil, h.busy(w, "replies cannot arrive now: %v", err)
	}
	id := event.NewID()
	replies, err := h.router.Add(id)
	if err != nil {
		return nil, h.busy(w, "%d requests are waiting for replies, the limit; retry later", h.cfg.MaxInFlight)
	}
	sent := false
	var taken int64 // of the budget, given back when the body is done with
	defer func() {
		if !sent {
			h.router.Remove(id)
			h.budget.Release(taken)
		}
	}()

	body, err := h.readBody(w, r, &taken)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, h.fail(w, http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit", mbe.Limit)
		case errors.Is(err, membudget.ErrExhausted):
			w.Header().Set("Connection", "close") // rather than read the rest
			return nil, h.busy(w, "inlet holds too many request bodies in memory; retry later")
		}
		return nil, h.fail(w, http.StatusBadRequest, "reading body: %v", err)
	}
	query := ""
	if h.cfg.ForwardQuery {
		query = r.URL.RawQuery
	}
	addr := h.transport.Address()
	rec := RequestRecord(h.cfg.TopicPrefix+service, &Request{ID: id, Service: service, Deadline: deadline,
		ContentType: r.Header.Get("Content-Type"), Client: client, Query: query, Headers: h.forwarded(r.Header), Body: body,
		ReplyTo: addr, ReplyPartition: replyPartition(addr)})
	// Produced without waiting for Kafka's acknowledgement (the reply may
	// well come first); a refused produce ends the wait.
	select {
	case h.sendq <- outgoing{rec: &rec, taken: taken}:
	default:
		return nil, h.busy(w, "%d requests are waiting to be sent to kafka, the limit; retry later", sendQueue)
	}
	sent = true
	return &call{id: id, service: service, timeout: timeout, deadline: deadline, replies: replies}, 0
}

// cut is s for an error message: its first event.MaxQuoteBytes bytes
// and "...", when longer. A caller's 10,000-character service name was
// echoed whole.
func cut(s string) string {
	if len(s) <= event.MaxQuoteBytes {
		return s
	}
	return event.Prefix(s, event.MaxQuoteBytes) + "..."
}

// writeMargin is how long past its deadline a call's answer may take to
// be written.
const writeMargin = 10 * time.Second

// replyPartition is the partition of the reply topic a reply to addr goes
// to: 0 on Kafka (a reply topic has at least that one; KafkaTransport makes
// it with only that one, and reads every partition it has), none on Redis.
func replyPartition(addr Address) int32 {
	if addr.Kind == "kafka" {
		return 0
	}
	return -1
}

// readBody reads r's body, charging the memory it holds to the budget as
// the body arrives, and adding what it charged to *taken, which the caller
// releases: a stalled upload holds what it sent, not what it announced
// (but one announcing more than the budget has room for is refused before
// it is read).
// The buffer doubles as it fills, up to the Content-Length when there is
// one (never past it), and what is charged is its capacity. Past the
// budget it fails with membudget.ErrExhausted, past MaxBodyBytes with an
// *http.MaxBytesError.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, taken *int64) ([]byte, error) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength >= 0 { // at most MaxBodyBytes: checked before
		limit = r.ContentLength
	}
	// Before the first read sends a waiting client "100 Continue": a body
	// that does not fit the budget's room now is not asked for.
	if r.ContentLength > h.budget.Max()-h.budget.Used() {
		return nil, membudget.ErrExhausted
	}
	src := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == limit {
				// Full: the body must end here.
				var one [1]byte
				n, err := io.ReadFull(src, one[:])
				switch {
				case n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF):
					return buf, nil
				case err == nil:
					// More than Content-Length: net/http does not let
					// that happen; a body that r carries otherwise might.
					return nil, &http.MaxBytesError{Limit: limit}
				}
				return nil, err
			}
			grow := min(max(2*int64(cap(buf)), 4<<10), limit) - int64(cap(buf))
			if !h.budget.Take(grow) {
				return nil, membudget.ErrExhausted
			}
			*taken += grow
			nb := make([]byte, len(buf), cap(buf)+int(grow))
			copy(nb, buf)
			buf = nb
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			if r.ContentLength >= 0 && int64(len(buf)) < r.ContentLength {
				return nil, io.ErrUnexpectedEOF
			}
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// forwarded is the request headers a request record carries: hdr without
// the credential headers not allowed by Config.ForwardHeaders. It copies
// hdr only when there is one to take out.
func (h *Handler) forwarded(hdr http.Header) http.Header {
	var out http.Header
	for _, k := range h.withheld {
		if _, ok := hdr[k]; !ok {
			continue
		}
		if out == nil {
			out = hdr.Clone()
		}
		delete(out, k)
	}
	if out == nil {
		return hdr
	}
	return out
}

// wait answers c with its reply, or its failure: the produce refused, the
// deadline passed, or the caller gone (gone is closed then).
func (h *Handler) wait(w http.ResponseWriter, gone <-chan struct{}, c *call) int {
	timer := time.NewTimer(time.Until(c.deadline))
	defer timer.Stop()
	select {
	case rep := <-c.replies:
		if rep.unsent != nil {
			return h.busy(w, "request not sent to kafka: %v", rep.unsent)
		}
		return h.answer(w, rep)
	case <-timer.C:
		// The usual cause while setting up: no worker reads the topic.
		return h.fail(w, http.StatusGatewayTimeout, "no reply from service %q within %v: is a worker for it running and reading topic %s? (inlet worker --service %s --brokers HOST:PORT)", c.service, c.timeout, h.cfg.TopicPrefix+c.service, c.service)
	case <-gone:
		return 499 // the client went away; nobody to answer
	}
}

func (h *Handler) answer(w http.ResponseWriter, rep Reply) int {
	if rep.Err != "" {
		return h.fail(w, http.StatusBadGateway, "the worker failed: %s", rep.Err)
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	if !ValidStatus(status) {
		h.router.metrics.Malformed.Inc()
		return h.fail(w, http.StatusBadGateway, "the worker answered status %d; a reply must carry a final HTTP status, 200 to 599", rep.Status)
	}
	if rep.ContentType != "" {
		w.Header().Set("Content-Type", rep.ContentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rep.Body)))
	w.WriteHeader(status)
	_, _ = w.Write(rep.Body)
	return status
}

// parseTimeout reads Inlet-Timeout: a Go duration (1.5s, 250ms) or whole
// milliseconds, positive; the caller caps it to Config.MaxTimeout. A number
// of milliseconds past what a Duration holds (292 years) saturates to the
// greatest Duration rather than wrapping around (18446744073710 ms became
// 448 µs when it wrapped).
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, perr := strconv.ParseInt(v, 10, 64)
		switch {
		case errors.Is(perr, strconv.ErrRange) && !strings.HasPrefix(v, "-"),
			perr == nil && ms > math.MaxInt64/int64(time.Millisecond):
			return math.MaxInt64, nil
		case errors.Is(perr, strconv.ErrRange), perr == nil && ms <= 0:
			return 0, errors.New("must be positive")
		case perr != nil:
			return 0, errors.New("want a duration such as 2s or 500ms, or milliseconds")
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// refuse answers a call Config.Admit refused with err.
func (h *Handler) refuse(w http.ResponseWriter, err error) int {
	var rf *Refusal
	if !errors.As(err, &rf) {
		return h.fail(w, http.StatusUnauthorized, "credentials refused: %v", err)
	}
	for k, vs := range rf.Header {
		w.Header()[k] = vs
	}
	return h.fail(w, rf.Status, "%s", rf.Msg)
}

func (h *Handler) busy(w http.ResponseWriter, format string, args ...any) int {
	w.Header().Set("Retry-After", strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
	return h.fail(w, http.StatusServiceUnavailable, format, args...)
}

func (h *Handler) fail(w http.ResponseWriter, status int, format string, args ...any) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
	return status
}
