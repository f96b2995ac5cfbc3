package reply

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBusy is returned by Router.Add when MaxInFlight requests wait already.
var ErrBusy = errors.New("reply: too many requests in flight")

// Router holds the requests waiting for a reply, by correlation id, and
// hands each reply to its waiter. It is safe for concurrent use. It is
// bounded: Add fails with ErrBusy at MaxInFlight (admission control), and
// every Add is paired with a Remove by its caller, on every path.
type Router struct {
	max     int
	metrics *Metrics

	mu      sync.Mutex
	waiters map[string]chan Reply // each buffered for one reply
	peak    int
}

// NewRouter returns a router admitting at most max waiting requests.
func NewRouter(max int, metrics *Metrics) *Router {
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	r := &Router{max: max, metrics: metrics, waiters: make(map[string]chan Reply)}
	metrics.observe(r)
	return r
}

// Add registers a waiter for id and returns the channel its reply arrives
// on. Call Remove(id) when done, whatever happened.
func (r *Router) Add(id string) (<-chan Reply, error) {
	ch := make(chan Reply, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.waiters) >= r.max {
		return nil, ErrBusy
	}
	r.waiters[id] = ch
	if n := len(r.waiters); n > r.peak {
		r.peak = n
	}
	return ch, nil
}

// Remove forgets the waiter for id.
func (r *Router) Remove(id string) {
	r.mu.Lock()
	delete(r.waiters, id)
	r.mu.Unlock()
}

// Deliver hands rep to its waiter without blocking. It returns false when
// nobody waits for it (it came too late, or twice), which is counted.
func (r *Router) Deliver(rep Reply) bool {
	r.mu.Lock()
	ch, ok := r.waiters[rep.ID]
	if ok {
		delete(r.waiters, rep.ID) // one reply per request
	}
	r.mu.Unlock()
	if !ok {
		r.metrics.Unmatched.Inc()
		return false
	}
	ch <- rep // buffered, and only one sender: never blocks
	return true
}

// deliver hands a decoded reply to its waiter, as Deliver does. A reply
// that failed to decode (err) is counted; when its correlation id was read,
// its caller is answered 502 with err at once instead of waiting for the
// deadline.
func (r *Router) deliver(rep Reply, err error) {
	if err != nil {
		r.metrics.Malformed.Inc()
		if rep.ID == "" {
			return
		}
		rep = Reply{ID: rep.ID, Err: err.Error()}
	}
	r.Deliver(rep)
}

// Fail ends the wait of id's caller with err: its request could not be
// sent. It does nothing when nobody waits for id any more.
func (r *Router) Fail(id string, err error) {
	r.mu.Lock()
	ch, ok := r.waiters[id]
	if ok {
		delete(r.waiters, id)
	}
	r.mu.Unlock()
	if ok {
		ch <- Reply{ID: id, unsent: err}
	}
}

// InFlight is the number of requests waiting now.
func (r *Router) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiters)
}

// Peak is the most requests that waited at once since the router started.
func (r *Router) Peak() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// Metrics are the request-reply metrics.
type Metrics struct {
	reg       prometheus.Registerer
	Requests  *prometheus.CounterVec
	Latency   prometheus.Histogram
	Unmatched prometheus.Counter
	Malformed prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_rpc_requests_total", Help: "Request-reply calls answered, by status code.",
		}, []string{"code"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inlet_rpc_latency_seconds", Help: "From the request's arrival to its answer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		Unmatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_rpc_unmatched_replies_total", Help: "Replies nobody waited for (late, or duplicated).",
		}),
		Malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_rpc_malformed_replies_total", Help: "Replies that could not be decoded, or whose status is not a final HTTP status (200-599): their callers get 502.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Latency, m.Unmatched, m.Malformed)
	}
	return m
}

func (m *Metrics) observe(r *Router) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_rpc_in_flight", Help: "Requests waiting for their reply."},
			func() float64 { return float64(r.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_rpc_in_flight_peak", Help: "The most requests that waited at once since start."},
			func() float64 { return float64(r.Peak()) }),
	)
}
