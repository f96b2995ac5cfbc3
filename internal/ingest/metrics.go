package ingest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/event"
)

// Metrics are the ingest's Prometheus metrics.
type Metrics struct {
	Requests       *prometheus.CounterVec
	Duration       *prometheus.HistogramVec
	EventsAccepted prometheus.Counter
	EventsRejected *prometheus.CounterVec
	SinkErrors     *prometheus.CounterVec
	// AuthRejected counts requests refused for their credentials or their
	// client's rate (--auth), by reason.
	AuthRejected *prometheus.CounterVec
	// CatalogUnresolved counts events let through without a catalog code,
	// by reason (unavailable: the store is unreachable).
	CatalogUnresolved *prometheus.CounterVec
	// CatalogViolations counts tracking-plan violations found, by type and
	// mode (warn: let through; block, or blocked_event: rejected).
	CatalogViolations *prometheus.CounterVec
	// Redacted counts records redaction rules rewrote, by kind: record,
	// dead_letter, or withheld (a dead letter written without its value:
	// not JSON, it could not be redacted).
	Redacted *prometheus.CounterVec

	// lastAck is when an ingest request was last answered 2xx (its events
	// acknowledged), in Unix nanoseconds; 0 before the first.
	lastAck atomic.Int64

	// rejectedBy are EventsRejected's counters of the known reasons,
	// looked up once.
	rejectedBy map[event.Reason]prometheus.Counter
	violations sync.Map              // violationKey → prometheus.Counter
	redactedBy [3]prometheus.Counter // Redacted's, in redactedKinds order
}

// Kinds of Redacted, in redactedBy's order.
var redactedKinds = [...]string{redactedRecord: "record", redactedDeadLetter: "dead_letter", redactedWithheld: "withheld"}

const (
	redactedRecord = iota
	redactedDeadLetter
	redactedWithheld
)

// violationKey labels a counter of CatalogViolations.
type violationKey struct {
	t    catalog.ViolationType
	mode catalog.Mode
}

// violation is CatalogViolations' counter of type t in mode, looked up
// once: m.violations holds at most the violation types times the modes.
func (m *Metrics) violation(t catalog.ViolationType, mode catalog.Mode) prometheus.Counter {
	k := violationKey{t, mode}
	if c, ok := m.violations.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.violations.LoadOrStore(k, m.CatalogViolations.WithLabelValues(string(t), string(mode)))
	return c.(prometheus.Counter)
}

// sinkErrorKinds are the kinds of SinkErrors (Server.write).
var sinkErrorKinds = []string{"full", "timeout", "error", "client_gone", "too_large", "rejected"}

// acked records that an ingest request was answered 2xx at t.
func (m *Metrics) acked(t time.Time) { m.lastAck.Store(t.UnixNano()) }

// lastAckSeconds is when an ingest request was last answered 2xx, in Unix
// seconds; 0 before the first.
func (m *Metrics) lastAckSeconds() float64 {
	ns := m.lastAck.Load()
	if ns == 0 {
		return 0
	}
	return float64(ns) / 1e9
}

// rejected is EventsRejected's counter of reason.
func (m *Metrics) rejected(reason []byte) prometheus.Counter {
	if c, ok := m.rejectedBy[event.Reason(reason)]; ok {
		return c
	}
	return m.EventsRejected.WithLabelValues(string(reason))
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
			Help: "Requests the sink failed, by kind: full, timeout, error, client_gone (503); too_large (413); rejected (422).",
		}, []string{"kind"}),
		AuthRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_auth_rejected_total",
			Help: "Ingest requests refused for their credentials (401) or their client's rate (429), by reason.",
		}, []string{"reason"}),
		CatalogUnresolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_unresolved_events_total",
			Help: "Events accepted without a catalog code, by reason (unavailable: the catalog store was unreachable; error; not_found).",
		}, []string{"reason"}),
		CatalogViolations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_catalog_violations_total",
			Help: "Tracking-plan violations of events taken by the sink, by violation type and catalog mode.",
		}, []string{"type", "mode"}),
		Redacted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_redacted_records_total",
			Help: "Records redaction rules rewrote, by kind: record, dead_letter, withheld (a dead letter written without its value, which was not JSON).",
		}, []string{"kind"}),
		rejectedBy: map[event.Reason]prometheus.Counter{},
	}
	for _, r := range []event.Reason{event.ReasonMalformed, event.ReasonNotObject, event.ReasonTooLarge,
		event.ReasonMissingEvent, event.ReasonBadField, event.ReasonUnknownField,
		event.ReasonPlanViolation, event.ReasonForbiddenGroup} {
		m.rejectedBy[r] = m.EventsRejected.WithLabelValues(string(r)) // and export zeros
	}
	for _, kind := range sinkErrorKinds {
		m.SinkErrors.WithLabelValues(kind) // export zeros: rate() sees the first failure
	}
	m.CatalogUnresolved.WithLabelValues("unavailable")
	for i, kind := range redactedKinds {
		m.redactedBy[i] = m.Redacted.WithLabelValues(kind) // looked up once; zeros exported
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.EventsAccepted, m.EventsRejected, m.SinkErrors,
			m.AuthRejected, m.CatalogUnresolved, m.CatalogViolations, m.Redacted,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "inlet_last_ack_timestamp_seconds",
				Help: "Unix time of the last ingest request answered 2xx (its events acknowledged); 0 before the first.",
			}, m.lastAckSeconds))
	}
	return m
}
