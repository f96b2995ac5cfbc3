package catalogrpc

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics are the front ends' Prometheus metrics, labelled by proto (grpc
// or thrift).
type metrics struct {
	calls    *prometheus.CounterVec   // proto, method, code
	duration *prometheus.HistogramVec // proto, method
	conns    *prometheus.GaugeVec     // proto
	rejected *prometheus.CounterVec   // proto
	unauthed *prometheus.CounterVec   // proto
	refused  *prometheus.CounterVec   // proto, reason

	// methods are the children of each (proto, method) seen, resolved once
	// rather than by label values on every call.
	mu      sync.RWMutex
	methods map[methodKey]*methodMetrics
}

type methodKey struct{ proto, method string }

// methodMetrics are one method's children: its duration, and its count by
// code (each resolved on the code's first call, so that only codes that
// happened are exported, as before).
type methodMetrics struct {
	m        *metrics
	key      methodKey
	duration prometheus.Observer
	calls    [maxCode + 1]atomic.Pointer[prometheus.Counter]
}

// maxCode is the largest gRPC code (Unauthenticated).
const maxCode = codes.Unauthenticated

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_rpc_calls_total",
			Help: "Catalog RPC calls by front end (grpc, thrift), method and gRPC status code (the code Thrift's CatalogError carries too).",
		}, []string{"proto", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inlet_catalog_rpc_call_seconds",
			Help:    "Time to answer a catalog RPC call, by front end and method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"proto", "method"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inlet_catalog_rpc_connections",
			Help: "Open connections of the catalog's RPC front ends.",
		}, []string{"proto"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_rpc_connections_rejected_total",
			Help: "Connections closed at once because the front end had --catalog-rpc-max-conns open.",
		}, []string{"proto"}),
		unauthed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_rpc_connections_unauthenticated_total",
			Help: "Connections closed because no call on them presented valid credentials within --catalog-rpc-auth-timeout.",
		}, []string{"proto"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_rpc_refused_total",
			Help: "Catalog RPC requests refused before they were read, by front end and reason: budget (the in-flight byte budget or its share held by others), size (over --catalog-rpc-max-message-bytes or a name's limit).",
		}, []string{"proto", "reason"}),
		methods: map[methodKey]*methodMetrics{},
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration, m.conns, m.rejected, m.unauthed, m.refused)
	}
	return m
}

// method returns the children of (proto, method). The methods are the
// registered ones: the map is bounded.
func (m *metrics) method(proto, method string) *methodMetrics {
	k := methodKey{proto, method}
	m.mu.RLock()
	mm := m.methods[k]
	m.mu.RUnlock()
	if mm != nil {
		return mm
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mm = m.methods[k]; mm == nil {
		mm = &methodMetrics{m: m, key: k, duration: m.duration.WithLabelValues(proto, method)}
		m.methods[k] = mm
	}
	return mm
}

// observe counts one call.
func (m *metrics) observe(proto, method string, start time.Time, code codes.Code) {
	m.method(proto, method).observe(start, code)
}

// observe counts one call of the method.
func (mm *methodMetrics) observe(start time.Time, code codes.Code) {
	mm.duration.Observe(time.Since(start).Seconds())
	if code > maxCode {
		mm.m.calls.WithLabelValues(mm.key.proto, mm.key.method, code.String()).Inc()
		return
	}
	c := mm.calls[code].Load()
	if c == nil {
		cc := mm.m.calls.WithLabelValues(mm.key.proto, mm.key.method, code.String())
		c = &cc
		mm.calls[code].Store(c)
	}
	(*c).Inc()
}
