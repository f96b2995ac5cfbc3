package worker

import "github.com/prometheus/client_golang/prometheus"

// Metrics are a worker's Prometheus metrics.
type Metrics struct {
	Handled        prometheus.Counter // requests the handler ran for
	Errors         prometheus.Counter // of those, the ones whose handler failed (502 reply)
	SkippedExpired prometheus.Counter // requests whose deadline had passed before a handler ran
	Late           prometheus.Counter // replies dropped because the handler finished after the deadline
	Malformed      prometheus.Counter // requests that could not be parsed
	ReplyFailures  prometheus.Counter // replies that could not be published
	InFlight       prometheus.Gauge   // handlers running
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "inlet_worker_" + name, Help: help})
	}
	m := &Metrics{
		Handled:        counter("handled_total", "Requests the handler ran for."),
		Errors:         counter("errors_total", "Requests whose handler failed: the caller gets 502."),
		SkippedExpired: counter("skipped_expired_total", "Requests skipped because their deadline had passed before a handler was free."),
		Late:           counter("late_total", "Replies dropped because the handler finished after the request's deadline."),
		Malformed:      counter("malformed_total", "Requests without a correlation id, reply address or deadline (no reply possible)."),
		ReplyFailures:  counter("reply_failures_total", "Replies that could not be published (Kafka or Redis): the caller times out."),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inlet_worker_in_flight",
			Help: "Requests being handled.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Handled, m.Errors, m.SkippedExpired, m.Late, m.Malformed, m.ReplyFailures, m.InFlight)
	}
	return m
}
