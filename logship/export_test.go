package logship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/logsink"
)

// PipeSink is a Sink that pipelines, as KafkaSink does, for the tests:
// its sends wait, in order, until Answer answers them.
type PipeSink struct {
	mu      sync.Mutex
	pending []pipeSend
	got     [][]byte
	most    int // pending sends at most
	failNow int // sends to fail at once
	timed   int // sends whose context had a deadline
}

// Timed is the number of sends whose context had a deadline: franz-go
// fails a record whose context ends, out of order with those sent after
// it, so sends to a pipelining sink must have none.
func (p *PipeSink) Timed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timed
}

// FailNext makes the next n sends fail at once, before send returns (as
// franz-go fails a record it cannot buffer).
func (p *PipeSink) FailNext(n int) {
	p.mu.Lock()
	p.failNow = n
	p.mu.Unlock()
}

type pipeSend struct {
	recs [][]byte
	done func(error)
}

var _ logsink.Pipeliner = (*PipeSink)(nil)

// ErrPipeDown is what a failed Answer answers.
var ErrPipeDown = errors.New("pipe sink down")

func (p *PipeSink) Send(ctx context.Context, recs [][]byte, done func(error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := ctx.Deadline(); ok {
		p.timed++
	}
	if p.failNow > 0 {
		p.failNow--
		done(ErrPipeDown)
		return
	}
	p.pending = append(p.pending, pipeSend{recs, done})
	p.most = max(p.most, len(p.pending))
}

func (p *PipeSink) Buffered() int { return 1 << 20 }

func (p *PipeSink) Resume() {}

func (p *PipeSink) engineSink() logsink.Sink { return p }

func (p *PipeSink) Write(ctx context.Context, recs [][]byte) error {
	errc := make(chan error, 1)
	p.Send(ctx, recs, func(err error) { errc <- err })
	return <-errc
}

func (p *PipeSink) Close(context.Context) error { return nil }

// Answer answers every pending send in order: acknowledged (keeping their
// records), or failed, as franz-go fails every buffered record of a
// partition at once. It returns how many it answered.
func (p *PipeSink) Answer(ok bool) int {
	p.mu.Lock()
	sends := p.pending
	p.pending = nil
	if ok {
		for _, s := range sends {
			for _, r := range s.recs {
				p.got = append(p.got, bytes.Clone(r))
			}
		}
	}
	p.mu.Unlock()
	for _, s := range sends {
		if ok {
			s.done(nil)
		} else {
			s.done(ErrPipeDown)
		}
	}
	return len(sends)
}

// Pending is how many sends wait for an answer now, and at most so far.
func (p *PipeSink) Pending() (now, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending), p.most
}

// Got is the records acknowledged, in order.
func (p *PipeSink) Got() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.got...)
}

// MaxFlights is the most batches a handler keeps in flight to a sink that pipelines.
const MaxFlights = logsink.MaxFlights

// FakeProducer stands in for franz-go behind a KafkaSink (NewFakeKafkaSink):
// Produce buffers records, and Answer answers them in order, as Kafka and
// franz-go would: in batches of BatchRecords; a batch that holds a record
// over MaxBytes is refused as too large, and franz-go then fails it and
// every record buffered after it (its failAllRecords).
type FakeProducer struct {
	MaxBytes     int // of one record; 0: no limit
	BatchRecords int // records per batch (default 8)

	mu       sync.Mutex
	buf      []fakeRec
	produced [][]byte // every record handed over, in order
	landed   [][]byte
}

type fakeRec struct {
	r       *kgo.Record
	promise func(*kgo.Record, error)
}

// NewFakeKafkaSink returns a KafkaSink producing to p, whose topic's
// max.message.bytes is maxBytes (0: Kafka's default).
func NewFakeKafkaSink(p *FakeProducer, maxBytes int) *KafkaSink {
	return &KafkaSink{logsink.NewProducerSink(p, "fake", nil, maxBytes)}
}

func (p *FakeProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.produced = append(p.produced, bytes.Clone(r.Value))
	p.buf = append(p.buf, fakeRec{r, promise})
}

func (p *FakeProducer) Flush(context.Context) error { return nil }
func (p *FakeProducer) Close()                      {}

// Answer answers the records buffered now, in order, and returns how many.
func (p *FakeProducer) Answer() int {
	p.mu.Lock()
	recs := p.buf
	p.buf = nil
	per := p.BatchRecords
	if per <= 0 {
		per = 8
	}
	var (
		answers []error
		failed  error
	)
	for i := range recs {
		if i%per == 0 && failed == nil {
			for _, fr := range recs[i:min(i+per, len(recs))] {
				if p.MaxBytes > 0 && len(fr.r.Value) > p.MaxBytes {
					failed = fmt.Errorf("%w (uncompressed_bytes=%d)", kerr.MessageTooLarge, len(fr.r.Value))
				}
			}
		}
		if failed == nil {
			p.landed = append(p.landed, bytes.Clone(recs[i].r.Value))
		}
		answers = append(answers, failed)
	}
	p.mu.Unlock()
	for i, fr := range recs { // serially, in order, as franz-go's promises
		fr.r.Offset = -1 // as franz-go: an offset for a record acknowledged, -1 for a failed one
		if answers[i] == nil {
			fr.r.Offset = int64(i)
		}
		fr.promise(fr.r, answers[i])
	}
	return len(recs)
}

// Fail fails every record buffered now with err, as franz-go does when
// Kafka refuses a batch for good.
func (p *FakeProducer) Fail(err error) int {
	p.mu.Lock()
	recs := p.buf
	p.buf = nil
	p.mu.Unlock()
	for _, fr := range recs {
		fr.r.Offset = -1
		fr.promise(fr.r, err)
	}
	return len(recs)
}

// Buffered is how many records wait for an answer.
func (p *FakeProducer) Buffered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.buf)
}

// Landed is the records Kafka holds, in order.
func (p *FakeProducer) Landed() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.landed...)
}

// Produced is every record handed to the producer, in order.
func (p *FakeProducer) Produced() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.produced...)
}

// Engine is k's sink with its protocol with the engine (Send, Resume).
func Engine(k *KafkaSink) *logsink.KafkaSink { return k.s }

var Landed = logsink.Landed
