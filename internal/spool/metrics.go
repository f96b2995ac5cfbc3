package spool

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the spool's and the forwarder's Prometheus metrics.
type Metrics struct {
	reg           prometheus.Registerer
	AppendLatency prometheus.Histogram
	FsyncLatency  prometheus.Histogram
	GroupSize     prometheus.Histogram
	Fsyncs        prometheus.Counter
	WriteErrors   prometheus.Counter
	Full          prometheus.Counter
	CursorErrors  prometheus.Counter
	Recovered     prometheus.Counter
	Quarantined   prometheus.Counter
	Parked        prometheus.Counter

	Forwarded      prometheus.Counter
	ForwardErrors  prometheus.Counter
	ForwarderState *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18)
	m := &Metrics{
		reg: reg,
		AppendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inlet_spool_append_latency_seconds", Buckets: buckets,
			Help: "Time from a request's append to its events being durable (group commit included).",
		}),
		FsyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inlet_spool_fsync_latency_seconds", Buckets: buckets,
			Help: "Time one fsync of the active segment took.",
		}),
		GroupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "inlet_spool_group_commit_requests", Buckets: prometheus.ExponentialBuckets(1, 2, 12),
			Help: "Appends that shared one write (and fsync).",
		}),
		Fsyncs:      prometheus.NewCounter(prometheus.CounterOpts{Name: "inlet_spool_fsyncs_total", Help: "fsyncs of spool segments."}),
		WriteErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "inlet_spool_write_errors_total", Help: "Failed writes or fsyncs of the spool."}),
		Full:        prometheus.NewCounter(prometheus.CounterOpts{Name: "inlet_spool_full_total", Help: "Appends refused because the spool was full."}),
		CursorErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_spool_cursor_write_errors_total", Help: "Failed writes of the spool's cursor (retried; delivered segments are deleted all the same).",
		}),
		Recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_spool_corrupt_tails_total", Help: "Segments whose torn or corrupt frames were cut out (on start, or by the forwarder); each is first copied to <segment>.corrupt.",
		}),
		Quarantined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_spool_quarantined_records_total",
			Help: "Records given up because their frames were damaged or their segment was missing; the damaged segment is kept as <segment>.corrupt.",
		}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_spool_parked_records_total",
			Help: "Records Kafka refused for good, and the dead-letter topic too, written to <spool dir>/parked/ instead.",
		}),
		Forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_forwarder_records_total", Help: "Spooled records Kafka acknowledged.",
		}),
		ForwardErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_forwarder_errors_total", Help: "Failed attempts to forward a window of spooled records (retried).",
		}),
		ForwarderState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inlet_forwarder_state", Help: "1 for the forwarder's current state: idle, forwarding, stalled, retrying, stuck, stopped.",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.AppendLatency, m.FsyncLatency, m.GroupSize, m.Fsyncs, m.WriteErrors, m.Full, m.CursorErrors, m.Recovered, m.Quarantined, m.Parked,
			m.Forwarded, m.ForwardErrors, m.ForwarderState)
	}
	return m
}

// observe registers the gauges that read s.
func (m *Metrics) observe(s *Spool) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_spool_bytes", Help: "Bytes of spool segments on disk."},
			func() float64 { return float64(s.Stats().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_spool_max_bytes", Help: "The spool's size limit (503 past it)."},
			func() float64 { return float64(s.cfg.MaxBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_spool_segments", Help: "Spool segment files."},
			func() float64 { return float64(s.Stats().Segments) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_spool_unforwarded_records", Help: "Spooled records Kafka has not acknowledged."},
			func() float64 { return float64(s.Stats().Unforwarded) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inlet_spool_disk_full", Help: "1 while appends fail for lack of disk space (ENOSPC, EDQUOT)."},
			func() float64 {
				if s.Stats().DiskFull != "" {
					return 1
				}
				return 0
			}),
	)
}
