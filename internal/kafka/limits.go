package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// recordOverhead is what a record of an event takes beyond the event's
// bytes as sent: the batch and record framing, the key, the headers and
// the fields ingest adds. An allowance, not an exact bound.
const recordOverhead = 1 << 10

// CheckLimits compares maxEventBytes, the largest event ingest accepts,
// with what Kafka takes on topic: the topic's max.message.bytes, or, when
// the topic does not exist yet (auto-created on first produce), a broker's
// message.max.bytes, and the producer's BatchMaxBytes. It returns a
// warning to log when an accepted event could be refused as too large
// (413 with ack=kafka, dead-lettered by the spool's forwarder), or "". err
// is a failure to learn the limits (an unreachable Kafka, no permission to
// describe configs); the warning is then "". It blocks for the admin
// requests, bounded by ctx.
func (p *Producer) CheckLimits(ctx context.Context, topic string, maxEventBytes int) (warning string, err error) {
	adm := kadm.NewClient(p.cl) // not closed: that would close the producer's client
	limit, source, err := topicLimit(ctx, adm, topic)
	if err != nil {
		return "", err
	}
	if b := int(p.cfg.BatchMaxBytes); b > 0 && b < limit {
		limit, source = b, "the producer's batch limit"
	}
	if maxEventBytes+recordOverhead <= limit {
		return "", nil
	}
	return fmt.Sprintf("kafka may refuse events that inlet accepts: events up to %d bytes are accepted, but topic %s takes records up to %d bytes (%s); larger ones get 413 with --ack kafka and are dead-lettered with --ack spool: lower --max-event-bytes below %d or raise the topic's max.message.bytes",
		maxEventBytes, topic, limit, source, max(limit-recordOverhead, 0)), nil
}

// TopicReady asks the brokers for topic's metadata as the producer does,
// letting a broker that creates topics on first use create it, and returns
// nil once the topic has partitions, each with a leader, and the producer
// has its idempotent producer ID, the topic's partitions (learnPartitions)
// and a produce connection to each broker: records sent to it now go out
// at once. Otherwise the error says why not (being created, no leader, not
// there and not created, not authorized). Without those, the first records
// wait in the producer's buffer for them.
func (p *Producer) TopicReady(ctx context.Context, topic string) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = true
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("asking for topic %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("topic %s: the brokers answered for %d topics", topic, len(resp.Topics))
	}
	t := resp.Topics[0]
	switch err := kerr.ErrorForCode(t.ErrorCode); {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("topic %s does not exist (yet: brokers with auto.create.topics.enable create it now; others need it created)", topic)
	case errors.Is(err, kerr.LeaderNotAvailable):
		return fmt.Errorf("topic %s is being created", topic)
	case err != nil:
		return fmt.Errorf("topic %s: %w", topic, err)
	case len(t.Partitions) == 0:
		return fmt.Errorf("topic %s has no partitions yet", topic)
	}
	for _, pt := range t.Partitions {
		if err := kerr.ErrorForCode(pt.ErrorCode); pt.Leader < 0 || err != nil && !errors.Is(err, kerr.ReplicaNotAvailable) {
			return fmt.Errorf("topic %s: partition %d has no leader (%v)", topic, pt.Partition, err)
		}
	}
	if _, _, err := p.cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("getting the idempotent producer ID: %w", err)
	}
	if err := p.learnPartitions(ctx, topic); err != nil {
		return err
	}
	if err := p.cl.EnsureProduceConnectionIsOpen(ctx); err != nil {
		return fmt.Errorf("opening produce connections to the brokers: %w", err)
	}
	return nil
}

// probe is learnPartitions' record in flight; err is set before done is
// closed.
type probe struct {
	done chan struct{}
	err  error
}

// probeHeader is the header key of learnPartitions' probe record.
const probeHeader = "inlet-partitions-probe"

// isProbe reports whether r is learnPartitions' probe record, for the hooks
// that count records: it is never sent, and its failure is no failure.
func isProbe(r *kgo.Record) bool {
	return len(r.Headers) == 1 && r.Headers[0].Key == probeHeader
}

// learnPartitions makes the producing client load topic's partitions now.
// The client learns a topic's partitions only when it is first given a
// record for it, in a metadata round trip of its own, and every record
// given meanwhile waits in its buffer (with this and the produce
// connections opened before ready, the first ack=kafka request after ready
// took 3.8 ms instead of 5.8, median of 8, on a loopback broker). kgo has
// no call that registers a topic for
// producing, so this gives it a record too large for a batch of its own: it
// waits for the partitions like any first record, then fails in the client
// with MESSAGE_TOO_LARGE as it is partitioned, before it could join a batch,
// so it is never sent and fails no other record. It is marked with
// probeHeader so that the metrics and the health hooks pass it by, and it
// has no context to be canceled with: while it is the first record waiting
// for the topic, its contexts would end the wait for every record behind
// it. One probe is in flight at a time; a call that returns on ctx leaves it
// to the next.
func (p *Producer) learnPartitions(ctx context.Context, topic string) error {
	if leader, _, _ := p.cl.PartitionLeader(topic, 0); leader >= 0 {
		return nil
	}
	size, _ := p.cl.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	if size <= 0 || int(size) >= p.cfg.MaxBufferedBytes {
		// The buffer would refuse the probe before the topic is looked
		// at; the first records learn the partitions, as without it.
		return nil
	}
	p.probeMu.Lock()
	pr := p.probe
	start := pr == nil
	if start {
		pr = &probe{done: make(chan struct{})}
		p.probe = pr
	}
	p.probeMu.Unlock()
	if start {
		r := &kgo.Record{
			Topic:   topic,
			Value:   make([]byte, size),
			Headers: []kgo.RecordHeader{{Key: probeHeader}},
		}
		p.cl.TryProduce(context.Background(), r, func(_ *kgo.Record, err error) {
			p.probeMu.Lock()
			p.probe = nil
			p.probeMu.Unlock()
			pr.err = err
			close(pr.done)
		})
	}
	select {
	case <-pr.done:
		switch err := pr.err; {
		case errors.Is(err, kerr.MessageTooLarge):
			return nil
		case err == nil:
			return fmt.Errorf("topic %s: a probe record of %d bytes was sent, larger than the producer's batch limit", topic, size)
		default:
			return fmt.Errorf("the producer learning the partitions of topic %s: %w", topic, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("the producer learning the partitions of topic %s: %w", topic, ctx.Err())
	}
}

// BatchLimit returns the largest record batch Kafka takes on every one of
// topics: the smallest of their max.message.bytes (a broker's
// message.max.bytes for a topic not created yet). Set Config.BatchMaxBytes
// to at most this before NewProducer: a record larger than the batch limit
// then fails alone in the client (MESSAGE_TOO_LARGE, see IsPermanent),
// where the broker would refuse its whole batch, failing the other records
// of its partition that happened to share it, other requests' included. It
// uses a client of its own with sec's TLS and SASL, closed on return, and
// blocks for the admin requests, bounded by ctx.
func BatchLimit(ctx context.Context, brokers []string, sec Security, topics ...string) (int32, error) {
	opts, err := sec.Opts(nil)
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	limit := 0
	for _, t := range topics {
		n, _, err := topicLimit(ctx, adm, t)
		if err != nil {
			return 0, err
		}
		if limit == 0 || n < limit {
			limit = n
		}
	}
	if limit <= 0 {
		return 0, errors.New("kafka: no topics to learn a batch limit from")
	}
	return int32(min(limit, 1<<30)), nil
}

// topicLimit is the largest record batch Kafka takes on topic, and where
// the limit comes from.
func topicLimit(ctx context.Context, adm *kadm.Client, topic string) (int, string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, "", fmt.Errorf("describing the configs of topic %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	switch {
	case err == nil:
		n, err := configInt(rc, "max.message.bytes")
		if err != nil {
			return 0, "", fmt.Errorf("topic %s: %w", topic, err)
		}
		return n, "its max.message.bytes", nil
	case !errors.Is(err, kerr.UnknownTopicOrPartition):
		return 0, "", fmt.Errorf("describing the configs of topic %s: %w", topic, err)
	}
	// Not created yet: it gets the brokers' default.
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("listing brokers: %w", err)
	}
	if len(md.Brokers) == 0 {
		return 0, "", errors.New("listing brokers: none")
	}
	rcs, err = adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return 0, "", fmt.Errorf("describing the configs of broker %d: %w", md.Brokers[0].NodeID, err)
	}
	if len(rcs) != 1 || rcs[0].Err != nil {
		return 0, "", fmt.Errorf("describing the configs of broker %d: %v", md.Brokers[0].NodeID, rcs)
	}
	n, err := configInt(rcs[0], "message.max.bytes")
	if err != nil {
		return 0, "", fmt.Errorf("broker %d: %w", md.Brokers[0].NodeID, err)
	}
	return n, "the brokers' message.max.bytes, as the topic does not exist yet", nil
}

func configInt(rc kadm.ResourceConfig, key string) (int, error) {
	for _, c := range rc.Configs {
		if c.Key != key {
			continue
		}
		if c.Value == nil {
			return 0, fmt.Errorf("%s has no value", key)
		}
		n, err := strconv.Atoi(*c.Value)
		if err != nil {
			return 0, fmt.Errorf("parsing %s: %w", key, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("no %s in the described configs", key)
}
