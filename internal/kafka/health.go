package kafka

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Health is what the producer's last results say about Kafka, for
// readiness: whether produces are failing, not only whether a metadata
// request is answered.
type Health struct {
	// Failing is the number of records that failed in a row since the
	// last one Kafka acknowledged, not counting failures that are the
	// record's own (IsPermanent), nor ErrFull or a closed client; and of
	// waits for acknowledgements that ran past their deadline.
	Failing int64
	// Err is the last of those failures, nil when Failing is 0.
	Err error
	// Since is when the first of them failed; At when the last did.
	Since, At time.Time
}

// Health returns the producer's recent produce results. It is safe for
// concurrent use.
func (p *Producer) Health() Health {
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	return p.health.h
}

// health follows every record's outcome (a kgo hook, so it sees all
// produce paths) and asks for a purge of a topic whose records fail with
// UNKNOWN_TOPIC_ID.
type health struct {
	p       *Producer
	failing atomic.Bool // h.Failing > 0: successes skip mu while it is false
	mu      sync.Mutex
	h       Health
}

var _ kgo.HookProduceRecordUnbuffered = (*health)(nil)

// OnProduceRecordUnbuffered implements kgo.HookProduceRecordUnbuffered. It
// runs in a client goroutine and does not block.
func (hc *health) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if errors.Is(err, kerr.UnknownTopicID) {
		hc.p.recreated(r)
	}
	if err != nil && !countsAsFailing(r, err) {
		return
	}
	if err == nil && !hc.failing.Load() {
		return // the common case, without a lock
	}
	now := time.Now()
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if err == nil {
		hc.h = Health{}
		hc.failing.Store(false)
		return
	}
	hc.failing.Store(true)
	if hc.h.Failing == 0 {
		hc.h.Since = now
	}
	hc.h.Failing++
	hc.h.Err = classify(err)
	hc.h.At = now
}

// countsAsFailing reports whether r's failure err says Kafka does not take
// records: not a failure of the record's own (IsPermanent), of the probe,
// of a full buffer or a closed client.
func countsAsFailing(r *kgo.Record, err error) bool {
	return !IsPermanent(err) && !isProbe(r) && !errors.Is(err, kgo.ErrMaxBuffered) && !errors.Is(err, kgo.ErrClientClosed)
}

// waitTimedOut counts a wait for acknowledgements that ran out of time
// (ProduceSync's deadline, ingest's --produce-timeout) as a failure, until
// Kafka acknowledges a record again.
func (hc *health) waitTimedOut(err error) {
	now := time.Now()
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.failing.Store(true)
	if hc.h.Failing == 0 {
		hc.h.Since = now
	}
	hc.h.Failing++
	hc.h.Err = err
	hc.h.At = now
}

// recreated notes that r's topic was deleted and created again (or the
// cluster behind the address was replaced): kgo holds on to the topic ID
// it first saw and fails every record of the topic with UNKNOWN_TOPIC_ID
// until the topic is purged from the client. The purger does that once
// per topic for records produced before the last purge of it, so that the
// failures of records already failed by a purge do not purge the topic
// again.
func (p *Producer) recreated(r *kgo.Record) {
	p.purgeMu.Lock()
	defer p.purgeMu.Unlock()
	if last, ok := p.purged[r.Topic]; ok && !r.Timestamp.After(last) {
		return
	}
	if _, ok := p.toPurge[r.Topic]; ok {
		return
	}
	if len(p.toPurge) >= maxPurgeTopics {
		return // bounded; the next failure asks again
	}
	p.toPurge[r.Topic] = struct{}{}
	select {
	case p.purgeKick <- struct{}{}:
	default:
	}
}

// maxPurgeTopics bounds the topics waiting for a purge.
const maxPurgeTopics = 64

// purger purges the topics recreated asks for, until quit is closed. It
// runs in its own goroutine because kgo's purge waits for the client's
// metadata loop, which may be what called the hook.
func (p *Producer) purger() {
	defer close(p.purgeDone)
	for {
		select {
		case <-p.quit:
			return
		case <-p.purgeKick:
		}
		p.purgeMu.Lock()
		topics := make([]string, 0, len(p.toPurge))
		for t := range p.toPurge {
			topics = append(topics, t)
		}
		clear(p.toPurge)
		p.purgeMu.Unlock()
		if len(topics) == 0 {
			continue
		}
		now := time.Now()
		p.cl.PurgeTopicsFromProducing(topics...)
		p.purgeMu.Lock()
		for _, t := range topics {
			if len(p.purged) >= maxPurgeTopics {
				clear(p.purged)
			}
			p.purged[t] = now
		}
		p.purgeMu.Unlock()
		p.metrics.TopicResets.Add(float64(len(topics)))
		p.log.Warn("kafka: topic has a new ID (deleted and recreated, or a new cluster at the same address): forgot it to produce to the new one; records produced meanwhile failed and are retried by their callers",
			"topics", topics)
	}
}
