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
	"strconv"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
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
}

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

	// The requests to produce, handed from the HTTP handlers to sender:
	// the producer's code path is deep, and run on a handler's goroutine
	// it grew the goroutine's stack, which the call then holds while it
	// waits (8 KiB per call in flight instead of 4; see BENCHMARKS.md).
	sendq   chan *event.Record // EventID is the correlation id
	stop    chan struct{}
	stopped chan struct{}
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
		sendq: make(chan *event.Record, sendQueue), stop: make(chan struct{}), stopped: make(chan struct{})}
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
}

// sender hands queued requests to the producer until Close.
func (h *Handler) sender() {
	defer close(h.stopped)
	for {
		select {
		case rec := <-h.sendq:
			done := func(err error) {
				if err != nil {
					h.router.Fail(rec.EventID, err)
				}
			}
			if err := h.producer.Produce(rec, done); err != nil {
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
	return h.wait(w, r.Context().Done(), c)
}

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
//
//go:noinline (its frame must not stay on the stack of the waiting call)
func (h *Handler) send(w http.ResponseWriter, r *http.Request, arrived time.Time) (*call, int) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, h.fail(w, http.StatusMethodNotAllowed, "method %s is not allowed on %s; use POST", r.Method, r.URL.Path)
	}
	service := r.PathValue("service")
	if !serviceName.MatchString(service) {
		return nil, h.fail(w, http.StatusBadRequest, "service %q: letters, digits, '.', '_' and '-' only", service)
	}
	if !h.any && !h.services[service] {
		return nil, h.fail(w, http.StatusNotFound, "service %q is not enabled on this gateway (see --rpc-services)", service)
	}
	timeout := h.cfg.Timeout
	if v := r.Header.Get("Inlet-Timeout"); v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return nil, h.fail(w, http.StatusBadRequest, "Inlet-Timeout %q: %v", v, err)
		}
		timeout = min(d, h.cfg.MaxTimeout)
	}
	// One deadline for everything, counted from the request's arrival.
	deadline := arrived.Add(timeout)
	if err := h.transport.Healthy(); err != nil {
		return nil, h.busy(w, "replies cannot arrive now: %v", err)
	}
	id := event.NewID()
	replies, err := h.router.Add(id)
	if err != nil {
		return nil, h.busy(w, "%d requests are waiting for replies, the limit; retry later", h.cfg.MaxInFlight)
	}
	sent := false
	defer func() {
		if !sent {
			h.router.Remove(id)
		}
	}()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, h.fail(w, http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit", mbe.Limit)
		}
		return nil, h.fail(w, http.StatusBadRequest, "reading body: %v", err)
	}
	rec := RequestRecord(h.cfg.TopicPrefix+service, Request{ID: id, Service: service, Deadline: deadline,
		ContentType: r.Header.Get("Content-Type"), Query: r.URL.RawQuery, Headers: r.Header, Body: body,
		ReplyTo: h.transport.Address()})
	// Produced without waiting for Kafka's acknowledgement (the reply may
	// well come first); a refused produce ends the wait.
	select {
	case h.sendq <- &rec:
	default:
		return nil, h.busy(w, "%d requests are waiting to be sent to kafka, the limit; retry later", sendQueue)
	}
	sent = true
	return &call{id: id, service: service, timeout: timeout, deadline: deadline, replies: replies}, 0
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
		return h.fail(w, http.StatusGatewayTimeout, "no reply from service %q within %v", c.service, c.timeout)
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
	if !validStatus(status) {
		return h.fail(w, http.StatusBadGateway, "the worker answered an invalid status %d", rep.Status)
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
// milliseconds, positive and at most math.MaxInt64 nanoseconds (292 years);
// the caller caps it to Config.MaxTimeout.
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, perr := strconv.ParseInt(v, 10, 64)
		switch {
		case errors.Is(perr, strconv.ErrRange) || ms > math.MaxInt64/int64(time.Millisecond):
			return 0, errors.New("out of range: at most 292 years")
		case perr != nil:
			return 0, errors.New("want a duration such as 2s or 500ms, or milliseconds")
		case ms <= 0:
			return 0, errors.New("must be positive")
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
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
