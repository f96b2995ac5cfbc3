package reply

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// Producer hands a request record to Kafka and returns at once.
type Producer interface {
	Produce(recs []event.Record) (Pending, error)
}

// Pending is a produce on its way: Done is closed once Kafka acknowledged
// or refused it, and Err then says which.
type Pending interface {
	Done() <-chan struct{}
	Err() error
}

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
}

// NewHandler returns the endpoint, producing with p and receiving replies
// through t into r.
func NewHandler(cfg Config, r *Router, t Transport, p Producer, log *slog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, router: r, transport: t, producer: p, log: log, services: map[string]bool{}}
	for _, s := range cfg.Services {
		if s == "*" {
			h.any = true
		}
		h.services[s] = true
	}
	return h, nil
}

// Register adds the route to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("/v1/rpc/{service}", h)
}

// hop-by-hop and framing headers are not forwarded to the worker.
var notForwarded = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Proxy-Connection": true, "Content-Length": true, "Host": true,
	"Content-Type": true, "Inlet-Timeout": true}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	code := h.serve(w, r, arrived)
	h.router.metrics.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
	h.router.metrics.Latency.Observe(time.Since(arrived).Seconds())
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, arrived time.Time) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return h.fail(w, http.StatusMethodNotAllowed, "method %s is not allowed on %s; use POST", r.Method, r.URL.Path)
	}
	service := r.PathValue("service")
	if !serviceName.MatchString(service) {
		return h.fail(w, http.StatusBadRequest, "service %q: letters, digits, '.', '_' and '-' only", service)
	}
	if !h.any && !h.services[service] {
		return h.fail(w, http.StatusNotFound, "service %q is not enabled on this gateway (see --rpc-services)", service)
	}
	timeout := h.cfg.Timeout
	if v := r.Header.Get("Inlet-Timeout"); v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return h.fail(w, http.StatusBadRequest, "Inlet-Timeout %q: %v", v, err)
		}
		timeout = min(d, h.cfg.MaxTimeout)
	}
	// One deadline for everything, counted from the request's arrival.
	deadline := arrived.Add(timeout)
	if err := h.transport.Healthy(); err != nil {
		return h.busy(w, "replies cannot arrive now: %v", err)
	}
	id := event.NewID()
	replies, err := h.router.Add(id)
	if err != nil {
		return h.busy(w, "%d requests are waiting for replies, the limit; retry later", h.cfg.MaxInFlight)
	}
	defer h.router.Remove(id) // on every path: reply, timeout, client gone, error

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return h.fail(w, http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit", mbe.Limit)
		}
		return h.fail(w, http.StatusBadRequest, "reading body: %v", err)
	}
	rec := event.Record{
		Topic:   h.cfg.TopicPrefix + service,
		Key:     []byte(id),
		Value:   body,
		EventID: id,
		Headers: []event.Header{
			{Key: HeaderCorrelationID, Value: []byte(id)},
			{Key: HeaderReplyTo, Value: []byte(h.transport.Address().String())},
			{Key: HeaderDeadline, Value: []byte(FormatDeadline(deadline))},
			{Key: HeaderService, Value: []byte(service)},
		},
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		rec.Headers = append(rec.Headers, event.Header{Key: HeaderContentType, Value: []byte(ct)})
	}
	if r.URL.RawQuery != "" {
		rec.Headers = append(rec.Headers, event.Header{Key: HeaderQuery, Value: []byte(r.URL.RawQuery)})
	}
	for k, vs := range r.Header {
		if !notForwarded[k] && len(vs) > 0 {
			rec.Headers = append(rec.Headers, event.Header{Key: HTTPHeaderPrefix + strings.ToLower(k), Value: []byte(strings.Join(vs, ", "))})
		}
	}
	// Produce without waiting for Kafka's acknowledgement: the reply may
	// well come first. A refused produce ends the wait below.
	pending, err := h.producer.Produce([]event.Record{rec})
	if err != nil {
		return h.busy(w, "request not sent to kafka: %v", err)
	}
	produced := pending.Done()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case rep := <-replies:
			return h.answer(w, rep)
		case <-produced:
			if err := pending.Err(); err != nil {
				return h.busy(w, "request not sent to kafka: %v", err)
			}
			produced = nil // sent; keep waiting for the reply
		case <-timer.C:
			return h.fail(w, http.StatusGatewayTimeout, "no reply from service %q within %v", service, timeout)
		case <-r.Context().Done():
			return 499 // the client went away; nobody to answer
		}
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
	if status < 100 || status > 999 {
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

// parseTimeout reads Inlet-Timeout: a Go duration (1.5s, 250ms) or whole milliseconds.
func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		ms, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return 0, errors.New("want a duration such as 2s or 500ms, or milliseconds")
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
