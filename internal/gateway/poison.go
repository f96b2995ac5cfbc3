package gateway

import (
	"context"
	"fmt"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/spool"
)

// reasonKafkaRefused is the inlet-reason of the dead-letter record of a
// spooled event Kafka refused for good.
const reasonKafkaRefused = "kafka_refused"

// forwarderConfig is the forwarder's configuration with how the gateway
// settles a spooled record Kafka refuses for good (kafka.IsPermanent: too
// large for its topic, invalid, not authorized): it goes to the dead-letter
// topic, whole, with Kafka's reason; a dead-letter record refused for good,
// or one the dead-letter topic refuses too, is parked by the spool under
// <spool dir>/parked/. Either way delivery goes on behind it.
func (g *Gateway) forwarderConfig() spool.ForwarderConfig {
	fc := g.cfg.Forwarder
	fc.Permanent = kafka.IsPermanent
	fc.Poison = g.deadLetterRefused
	return fc
}

// deadLetterRoom is the largest value a dead-letter record keeps: the
// producer's batch limit less room for the record's framing and headers.
func (g *Gateway) deadLetterRoom() int {
	return max(int(g.batchMax)-2<<10, 1<<10)
}

// deadLetterRefused sends the dead-letter record of e, which Kafka refused
// for good with cause, and waits for Kafka's acknowledgement (bounded by
// ctx and the producer's delivery timeout). A record that already is a
// dead letter is not wrapped again: cause is returned, and the spool parks
// it.
func (g *Gateway) deadLetterRefused(ctx context.Context, e spool.Entry, cause error) error {
	dlq := g.cfg.Ingest.DeadLetterTopicName()
	if e.Record.Topic == dlq {
		return cause
	}
	// Truncated to fit the producer's batches (kept within both topics'
	// max.message.bytes), with the inlet-truncated header: a record too
	// large for its topic would otherwise be too large here too.
	reason := fmt.Sprintf("kafka refused the record for topic %s for good: %v", e.Record.Topic, cause)
	dl := event.DeadLetter(dlq, e.Record.Value, reason, e.AppendedAt, g.deadLetterRoom())
	dl.Key = e.Record.Key // the dead letters of one user stay in order
	dl.EventID = e.Record.EventID
	dl.Headers = append(dl.Headers, event.Header{Key: event.HeaderReason, Value: []byte(reasonKafkaRefused)})
	for _, h := range e.Record.Headers {
		if h.Key == event.HeaderEventID || h.Key == event.HeaderEventName {
			dl.Headers = append(dl.Headers, h)
		}
	}
	if err := g.prod.ProduceSync(ctx, []event.Record{dl}); err != nil {
		return fmt.Errorf("sending to the dead-letter topic %s: %w", dlq, err)
	}
	return nil
}
