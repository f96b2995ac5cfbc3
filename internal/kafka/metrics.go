package kafka

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Metrics are the producer's Prometheus metrics. They also serve as kgo hooks.
type Metrics struct {
	reg            prometheus.Registerer
	ProduceLatency prometheus.Histogram
	Undelivered    prometheus.Counter
	BrokerErrors   *prometheus.CounterVec
	RecordErrors   prometheus.Counter
	TopicResets    prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		ProduceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "inlet_produce_latency_seconds",
			Help:    "Time from handing a request's records to the producer until Kafka acknowledged all of them.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		Undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_producer_undelivered_records_total",
			Help: "Records accepted with ack=none that Kafka never acknowledged (lost).",
		}),
		BrokerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_kafka_broker_errors_total",
			Help: "Errors talking to Kafka brokers, by operation (connect, write, read).",
		}, []string{"op"}),
		RecordErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_kafka_record_errors_total",
			Help: "Records that failed to produce (any ack mode).",
		}),
		TopicResets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_kafka_topic_resets_total",
			Help: "Times the producer forgot a topic that came back with a new ID (deleted and recreated, or a new cluster) to produce to the new one.",
		}),
	}
	for _, op := range []string{"connect", "write", "read"} {
		m.BrokerErrors.WithLabelValues(op) // export zeros
	}
	if reg != nil {
		reg.MustRegister(m.ProduceLatency, m.Undelivered, m.BrokerErrors, m.RecordErrors, m.TopicResets)
	}
	return m
}

func (m *Metrics) bufferedBytes(cl *kgo.Client, topics prometheus.Collector) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_producer_buffered_bytes",
			Help: "Bytes of records handed to the producer and not yet acknowledged by Kafka.",
		}, func() float64 { return float64(cl.BufferedProduceBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_producer_buffered_records",
			Help: "Records handed to the producer and not yet acknowledged by Kafka.",
		}, func() float64 { return float64(cl.BufferedProduceRecords()) }),
		topics,
	)
}

var (
	_ kgo.HookBrokerConnect           = (*Metrics)(nil)
	_ kgo.HookBrokerWrite             = (*Metrics)(nil)
	_ kgo.HookBrokerRead              = (*Metrics)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*Metrics)(nil)
)

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (m *Metrics) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		m.BrokerErrors.WithLabelValues("connect").Inc()
	}
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (m *Metrics) OnBrokerWrite(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		m.BrokerErrors.WithLabelValues("write").Inc()
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (m *Metrics) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		m.BrokerErrors.WithLabelValues("read").Inc()
	}
}

// OnProduceRecordUnbuffered implements kgo.HookProduceRecordUnbuffered.
func (m *Metrics) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil && !isProbe(r) {
		m.RecordErrors.Inc()
	}
}

// Logger adapts log to kgo.Logger for the franz-go clients of every package.
// franz-go's warnings and errors are logged once per LogInterval for each
// of its messages, with the count of those suppressed ("repeated"): an
// unreachable broker is retried four times a second, each a WARN.
func Logger(log *slog.Logger) kgo.Logger {
	return &kgoLogger{l: log, interval: LogInterval}
}

// LogInterval is how often a client's repeated warning or error (the same
// franz-go message) is logged at most.
const LogInterval = 10 * time.Second

// kgoLogger adapts slog to kgo.Logger, keeping kgo's chatter at debug and
// its warnings and errors at their level, each message through a
// ratelog.Limiter of its own.
type kgoLogger struct {
	l        *slog.Logger
	interval time.Duration
	limiters sync.Map // slog.Level and message -> *ratelog.Limiter
}

type limitKey struct {
	level slog.Level
	msg   string
}

func (k *kgoLogger) Level() kgo.LogLevel {
	if k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (k *kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	default:
		l = slog.LevelDebug
	}
	if l < slog.LevelWarn {
		k.l.Log(context.Background(), l, "kafka: "+msg, keyvals...)
		return
	}
	// franz-go's messages are constant strings: a bounded set of limiters.
	key := limitKey{l, msg}
	lim, ok := k.limiters.Load(key)
	if !ok {
		lim, _ = k.limiters.LoadOrStore(key, ratelog.New(k.l, l, "kafka: "+msg, k.interval))
	}
	lim.(*ratelog.Limiter).Log(keyvals...)
}
