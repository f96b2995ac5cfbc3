package kafka

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
)

// Per-topic shares of the producer's buffer. franz-go has one buffer for
// every topic, and keeps a record Kafka does not take (topic deleted,
// partition without a leader, writes refused with a retriable error) until
// the delivery timeout: without a share, one such topic fills the buffer
// in seconds and every other topic's requests get ErrFull.
// TestTopicIsolation measures it. Each topic may hold at most
// Config.TopicShare of the buffer's records and bytes; a request that
// would take its topic past it fails with ErrTopicFull (a 503), leaving the
// rest of the buffer to the other topics. The share is checked before the
// records are buffered, as the buffer's own limit is (fits): requests
// checked at the same moment may each pass, so a topic can hold its share
// plus one request per caller in flight, which the 10% fits keeps free
// and kgo's hard limit bounds.

// ErrTopicFull is ErrFull for one topic: the records of the request's
// topic already take its share of the buffer (Config.TopicShare), most
// likely because Kafka is not taking that topic. errors.Is(err, ErrFull)
// holds.
var ErrTopicFull = fmt.Errorf("%w: a topic holds its share of it", ErrFull)

// topicFullError is ErrTopicFull naming the topic, for the answer's
// message.
type topicFullError struct{ topic string }

func (e topicFullError) Error() string {
	return fmt.Sprintf("kafka: topic %q holds its share of the producer's buffer (--max-buffered-topic-share): Kafka is not taking it as fast as it comes", e.topic)
}

func (e topicFullError) Unwrap() error { return ErrTopicFull }

// topicLoad is one topic's records in the buffer, counted by kgo's hooks
// (so every produce path and the probe are counted, exactly once each),
// and the records refused for the topic's share.
type topicLoad struct {
	bytes, records atomic.Int64
	refused        atomic.Int64
	refusedAt      atomic.Int64 // unix nanoseconds of the last refusal

	// Records that failed in a row, as health counts them for the
	// producer; failing skips mu on a success while it is false.
	failing atomic.Bool
	mu      sync.Mutex
	fail    Health // guarded by mu
}

// topicLoads is every topic's topicLoad; a kgo hook, and a Prometheus
// collector of them. Topics are never forgotten: there are as many as the
// routes make.
type topicLoads struct {
	m    sync.Map                  // topic → *namedLoad
	last atomic.Pointer[namedLoad] // the last topic get returned
}

// namedLoad is a topic's load with its name.
type namedLoad struct {
	topic string
	load  *topicLoad
}

// get returns topic's load. Its hooks call it twice per record: the last
// topic is kept apart, to skip the map's hashing in the common case of
// consecutive records to one topic.
func (t *topicLoads) get(topic string) *topicLoad {
	if n := t.last.Load(); n != nil && n.topic == topic {
		return n.load
	}
	n, ok := t.m.Load(topic)
	if !ok {
		n, _ = t.m.LoadOrStore(topic, &namedLoad{topic, &topicLoad{}})
	}
	t.last.Store(n.(*namedLoad)) // no allocation: topics alternating cost a map load each
	return n.(*namedLoad).load
}

// kgoSize is what kgo counts of r in its buffer (Record.userSize).
func kgoSize(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

var (
	_ kgo.HookProduceRecordBuffered   = (*topicLoads)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*topicLoads)(nil)
)

// OnProduceRecordBuffered implements kgo.HookProduceRecordBuffered.
func (t *topicLoads) OnProduceRecordBuffered(r *kgo.Record) {
	l := t.get(r.Topic)
	l.bytes.Add(kgoSize(r))
	l.records.Add(1)
}

// OnProduceRecordUnbuffered implements kgo.HookProduceRecordUnbuffered.
func (t *topicLoads) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	l := t.get(r.Topic)
	l.bytes.Add(-kgoSize(r))
	l.records.Add(-1)
	if err == nil && !l.failing.Load() || err != nil && !countsAsFailing(r, err) {
		return // the common case, without a lock
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.fail = Health{}
		l.failing.Store(false)
		return
	}
	l.failing.Store(true)
	if l.fail.Failing == 0 {
		l.fail.Since = now
	}
	l.fail.Failing++
	l.fail.Err = classify(err)
	l.fail.At = now
}

// topicFits reports whether topic's share has room for records records of
// bytes bytes, counting a refusal when it has not. A topic that holds
// nothing takes any batch the buffer has room for (fits): a batch larger
// than the share, such as a spool window of many small records, would else
// be refused for ever and stall the forwarder.
func (p *Producer) topicFits(topic string, bytes, records int) bool {
	if p.cfg.TopicShare >= 1 {
		return true
	}
	l := p.topics.get(topic)
	held := l.records.Load()
	if held == 0 || l.bytes.Load()+int64(bytes) <= p.shareBytes && held+int64(records) <= p.shareRecords {
		return true
	}
	l.refused.Add(int64(records))
	l.refusedAt.Store(time.Now().UnixNano())
	return false
}

// room checks recs against the buffer (fits) and each of their topics
// against its share (topicFits), returning ErrFull or ErrTopicFull when
// they do not fit.
func (p *Producer) room(recs []event.Record) error {
	n, one := 0, true
	for i := range recs {
		n += recs[i].Size()
		one = one && recs[i].Topic == recs[0].Topic
	}
	if !p.fits(n, len(recs)) {
		return ErrFull
	}
	if len(recs) == 0 {
		return nil
	}
	if one {
		if !p.topicFits(recs[0].Topic, n, len(recs)) {
			return topicFullError{recs[0].Topic}
		}
		return nil
	}
	type load struct{ bytes, records int }
	per := map[string]load{}
	for i := range recs {
		l := per[recs[i].Topic]
		l.bytes += recs[i].Size()
		l.records++
		per[recs[i].Topic] = l
	}
	// Every topic is checked, so that each counts its refusal.
	var err error
	for topic, l := range per {
		if !p.topicFits(topic, l.bytes, l.records) && err == nil {
			err = topicFullError{topic}
		}
	}
	return err
}

var (
	topicBufferedBytesDesc = prometheus.NewDesc("inlet_producer_topic_buffered_bytes",
		"Bytes of a topic's records handed to the producer and not yet acknowledged by Kafka.", []string{"topic"}, nil)
	topicBufferedRecordsDesc = prometheus.NewDesc("inlet_producer_topic_buffered_records",
		"A topic's records handed to the producer and not yet acknowledged by Kafka.", []string{"topic"}, nil)
	topicRefusedDesc = prometheus.NewDesc("inlet_producer_topic_refused_records_total",
		"Records refused at once (503) because their topic held its share of the producer's buffer (--max-buffered-topic-share).", []string{"topic"}, nil)
)

// Describe implements prometheus.Collector.
func (t *topicLoads) Describe(ch chan<- *prometheus.Desc) {
	ch <- topicBufferedBytesDesc
	ch <- topicBufferedRecordsDesc
	ch <- topicRefusedDesc
}

// Collect implements prometheus.Collector.
func (t *topicLoads) Collect(ch chan<- prometheus.Metric) {
	t.m.Range(func(k, v any) bool {
		topic, l := k.(string), v.(*namedLoad).load
		ch <- prometheus.MustNewConstMetric(topicBufferedBytesDesc, prometheus.GaugeValue, float64(l.bytes.Load()), topic)
		ch <- prometheus.MustNewConstMetric(topicBufferedRecordsDesc, prometheus.GaugeValue, float64(l.records.Load()), topic)
		ch <- prometheus.MustNewConstMetric(topicRefusedDesc, prometheus.CounterValue, float64(l.refused.Load()), topic)
		return true
	})
}

// TopicLoad is a topic's records in the producer's buffer, its records
// refused for its share, and its records that failed.
type TopicLoad struct {
	Bytes, Records, Refused int64
	// ShareBytes and ShareRecords are the most the topic may hold.
	ShareBytes, ShareRecords int64
	// RefusedAt is when a record was last refused for the share; zero if
	// never.
	RefusedAt time.Time
	// Failing is the topic's records that failed in a row, counted as the
	// producer's Health counts them.
	Failing Health
}

// TopicLoads returns every topic's load, by topic.
func (p *Producer) TopicLoads() map[string]TopicLoad {
	out := map[string]TopicLoad{}
	p.topics.m.Range(func(k, v any) bool {
		l := v.(*namedLoad).load
		tl := TopicLoad{Bytes: l.bytes.Load(), Records: l.records.Load(), Refused: l.refused.Load(),
			ShareBytes: p.shareBytes, ShareRecords: p.shareRecords}
		if at := l.refusedAt.Load(); at != 0 {
			tl.RefusedAt = time.Unix(0, at)
		}
		l.mu.Lock()
		tl.Failing = l.fail
		l.mu.Unlock()
		out[k.(string)] = tl
		return true
	})
	return out
}
