package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
)

// Metrics are the ingest's Prometheus metrics.
type Metrics struct {
	Requests       *prometheus.CounterVec
	Duration       *prometheus.HistogramVec
	EventsAccepted prometheus.Counter
	EventsRejected *prometheus.CounterVec
	SinkErrors     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_http_requests_total",
			Help: "HTTP requests answered, by handler and status code.",
		}, []string{"handler", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inlet_http_request_duration_seconds",
			Help:    "Time from reading a request to answering it, by handler.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"handler"}),
		EventsAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_events_accepted_total",
			Help: "Events accepted and written to the sink.",
		}),
		EventsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_events_rejected_total",
			Help: "Events rejected as invalid (and dead-lettered), by reason.",
		}, []string{"reason"}),
		SinkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_sink_errors_total",
			Help: "Requests answered 503 because the sink failed, by kind (full, timeout, error).",
		}, []string{"kind"}),
	}
	for _, r := range []event.Reason{event.ReasonMalformed, event.ReasonNotObject, event.ReasonTooLarge,
		event.ReasonMissingEvent, event.ReasonBadField, event.ReasonUnknownField} {
		m.EventsRejected.WithLabelValues(string(r)) // export zeros
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.EventsAccepted, m.EventsRejected, m.SinkErrors)
	}
	return m
}
