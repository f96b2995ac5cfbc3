package catalogrpc

import (
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
}

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
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.duration, m.conns, m.rejected)
	}
	return m
}

// observe counts one call.
func (m *metrics) observe(proto, method string, start time.Time, code codes.Code) {
	m.calls.WithLabelValues(proto, method, code.String()).Inc()
	m.duration.WithLabelValues(proto, method).Observe(time.Since(start).Seconds())
}
