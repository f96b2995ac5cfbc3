package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/spool"
)

// The three ack modes are the central decision of inlet: what a 2xx
// answer promises. Each is an ingest.Sink; ingest answers the request once
// Write returned nil, and 503 with Retry-After when it did not.
//
//	--ack spool  spoolSink    Write returns once the records are appended to
//	                          the write-ahead spool and fsynced (group commit).
//	                          The forwarder delivers them to Kafka later, in
//	                          order, and frees a segment only once Kafka has all
//	                          of it. Survives kill -9, a machine crash (with
//	                          --spool-sync always) and a Kafka outage; costs
//	                          local disk.
//	--ack kafka  kafkaSink    Write returns once Kafka acknowledged every record
//	                          (acks=all, idempotent producer). Nothing is held
//	                          only by inlet; a Kafka outage is a 503.
//	--ack none   enqueueSink  Write returns once the records are in the
//	                          producer's memory (answered 202). Fastest; what is
//	                          buffered when the process dies is lost.
//
// In every mode a full buffer or spool is a 503 at once (ingest.ErrSinkFull),
// never a silent drop, never the oldest data evicted.

// spoolSink answers once the records are in the spool, fsynced (ack=spool).
type spoolSink struct{ s *spool.Spool }

func (s spoolSink) Write(ctx context.Context, recs []event.Record) error {
	return sinkErr(s.s.Append(ctx, recs))
}

// kafkaSink answers once Kafka acknowledged every record (ack=kafka).
type kafkaSink struct{ p *kafka.Producer }

func (s kafkaSink) Write(ctx context.Context, recs []event.Record) error {
	return sinkErr(s.p.ProduceSync(ctx, recs))
}

// enqueueSink answers once the records are in the producer's buffer
// (ack=none). The producer keeps recs until Kafka has them: ingest never
// reuses a record's bytes after Write.
type enqueueSink struct{ p *kafka.Producer }

func (s enqueueSink) Write(_ context.Context, recs []event.Record) error {
	return sinkErr(s.p.TryProduce(recs))
}

func sinkErr(err error) error {
	if errors.Is(err, kafka.ErrFull) || errors.Is(err, spool.ErrFull) {
		return fmt.Errorf("%w: %w", ingest.ErrSinkFull, err)
	}
	return err
}

// ackStatus is the status of a successful answer in an ack mode.
func ackStatus(ack string) int {
	if ack == AckNone {
		return http.StatusAccepted
	}
	return http.StatusOK
}

// forwarding adapts the producer to what the spool's forwarder needs.
type forwarding struct{ p *kafka.Producer }

func (f forwarding) Produce(recs []event.Record) (spool.Delivery, error) {
	d, err := f.p.Produce(recs)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return d, nil
}

var (
	_ ingest.Sink    = spoolSink{}
	_ ingest.Sink    = kafkaSink{}
	_ ingest.Sink    = enqueueSink{}
	_ spool.Producer = forwarding{}
)
