package logship

import (
	"context"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/logsink"
	"github.com/inlet-dev/inlet/internal/relay"
)

// Sink is where a Handler delivers its records (encoded inlet events).
// Write delivers records in order and returns nil once the sink
// acknowledged every one; any other error means some may have been
// delivered and the Handler writes them all again (duplicates, never a
// loss), except a *RejectedError: those records are refused for good.
// Write is called by one goroutine at a time; records are valid only
// until it returns. Close releases the sink within ctx.
type Sink = logsink.Sink

// RejectedError reports that N records of a Write were refused for good
// (the others were delivered); they are not written again.
type RejectedError = logsink.RejectedError

// ErrTooLarge is what errors.Is matches in a write Kafka refused as too
// large: a record over KafkaConfig.MaxMessageBytes, refused for good (in
// a *RejectedError), or a batch, which the Handler sends again one record
// at a time.
var ErrTooLarge = logsink.ErrTooLarge

// InletSink delivers records to inlet with client.Post (one attempt per
// Write; the Handler retries). A 413 splits the batch; a record that
// alone is too large, and records inlet rejects, are reported as rejected.
type InletSink = logsink.InletSink

// NewInletSink returns a sink posting to inlet through c; Close closes c.
func NewInletSink(c *client.Client) *InletSink { return logsink.NewInletSink(c) }

// KafkaConfig configures a KafkaSink.
type KafkaConfig = logsink.KafkaConfig

// KafkaSink produces records straight to Kafka with franz-go's idempotent
// producer (acks=all). A Handler keeps several batches in flight to it,
// in order (the "Order" section of inlet's docs/ack-modes.md).
type KafkaSink struct{ s *logsink.KafkaSink }

// NewKafkaSink returns a sink producing to cfg.Topic; Close closes its client.
func NewKafkaSink(cfg KafkaConfig) (*KafkaSink, error) {
	s, err := logsink.NewKafkaSink(cfg)
	if err != nil {
		return nil, err
	}
	return &KafkaSink{s}, nil
}

// Write produces records and waits for their acknowledgement, or for ctx
// (then some may still land). It is not for use while a Handler sends.
func (k *KafkaSink) Write(ctx context.Context, records [][]byte) error {
	return k.s.Write(ctx, records)
}

// Close waits for what is in flight, within ctx, and closes the client.
func (k *KafkaSink) Close(ctx context.Context) error { return k.s.Close(ctx) }

func (k *KafkaSink) engineSink() logsink.Sink { return k.s }

// relaySink is sink as the sink of the Handler's engine: logship's own
// sinks with their protocol, any other one batch at a time.
func relaySink(sink Sink, o Options) (relay.Sink[[]byte], relay.Config[[]byte]) {
	var inner logsink.Sink = struct{ Sink }{sink} // only Write and Close, whatever else it has
	if e, ok := sink.(interface{ engineSink() logsink.Sink }); ok {
		inner = e.engineSink()
	}
	return logsink.Relay(inner, o.SendTimeout, o.BatchSize)
}
