// Package logsink holds the sinks of logship's Handler and `inlet ship`,
// and runs them as the sink of an internal/relay engine (Relay). logship
// exports them without the protocol they share with the engine.
package logsink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/relay"
)

// Sink is logship.Sink, whose doc says what Write and Close promise.
type Sink interface {
	Write(ctx context.Context, records [][]byte) error
	Close(ctx context.Context) error
}

// Pipeliner is a Sink that takes the next batch while earlier ones are in
// flight (KafkaSink). Send hands records over and returns without waiting
// for the sink, except while the sink's own bounded buffer is full (until
// ctx is done); done is called once, with what Write would have returned,
// and must not block. A batch fails only together with every batch sent
// after it that is not yet answered (franz-go fails every buffered record
// of a partition at once), so sending them again in order keeps the order.
// records are the sink's until done is called.
type Pipeliner interface {
	Send(ctx context.Context, records [][]byte, done func(error))
	// Buffered is how many records the sink holds without Send waiting.
	Buffered() int
	// Resume is called, with nothing in flight, before the batches that
	// failed are sent again: a sink may refuse (fail at once) every send
	// after a failure until then, so that none lands ahead of the resend.
	Resume()
}

// MaxFlights bounds the batches in flight to a sink that pipelines: with
// BatchSize records each, enough to keep Kafka busy across its round
// trips, and a bound on the memory they hold.
const MaxFlights = 16

// Relay returns sink as the sink of an internal/relay engine, and the
// engine's settings for it, but for backoff and hooks: up to MaxFlights
// batches of batchSize in flight to a Pipeliner (KafkaSink),
// each without a deadline (franz-go retries them, in order); to any other
// one batch at a time, each Write within timeout. A batch refused as too
// large is sent again one record at a time; a *RejectedError settles its
// batch; a failed KafkaSink batch's first records that landed are not sent
// again. logship's Handler runs on it, and so does `inlet ship`.
func Relay(sink Sink, timeout time.Duration, batchSize int) (relay.Sink[[]byte], relay.Config[[]byte]) {
	cfg := relay.Config[[]byte]{Windows: 1, MaxBackoff: 5 * time.Second, Drain: true, Landed: Landed,
		Permanent: func(err error) bool { return errors.Is(err, ErrTooLarge) },
		Dropped:   rejected}
	pl, ok := sink.(Pipeliner)
	if !ok {
		return oneAtATime{sink, timeout}, cfg
	}
	// Within what the sink buffers: a send that waited for room could
	// fail on its own after later ones got in.
	cfg.Windows = min(MaxFlights, max(1, pl.Buffered()/max(1, batchSize)))
	cfg.Resume = pl.Resume
	return pipelined{pl}, cfg
}

// pipelined is a Pipeliner as a relay sink.
type pipelined struct{ pl Pipeliner }

// Send reports a send the sink failed at once (after an earlier failure,
// until Resume) as not taken: the engine sends nothing after it.
func (p pipelined) Send(ctx context.Context, recs [][]byte) (relay.Pending, error) {
	a := &answer{c: make(chan struct{})}
	p.pl.Send(ctx, recs, func(err error) {
		a.err = err
		close(a.c)
	})
	select {
	case <-a.c:
		if a.err != nil && !rejected(a.err) {
			return nil, a.err
		}
	default:
	}
	return a, nil
}

// oneAtATime is a Sink as a relay sink: Send waits for Write, within timeout.
type oneAtATime struct {
	Sink
	timeout time.Duration
}

func (o oneAtATime) Send(ctx context.Context, recs [][]byte) (relay.Pending, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	a := &answer{err: o.Write(ctx, recs), c: closed}
	return a, nil
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// answer is a relay.Pending: err once c is closed.
type answer struct {
	c   chan struct{}
	err error
}

func (a *answer) Wait(ctx context.Context) error {
	select {
	case <-a.c:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RejectedError is logship.RejectedError: N records refused for good.
type RejectedError struct {
	N   int
	Err error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("logship: %d records rejected: %v", e.N, e.Err)
}
func (e *RejectedError) Unwrap() error { return e.Err }

func rejected(err error) bool {
	var rej *RejectedError
	return errors.As(err, &rej)
}

// InletSink is logship.InletSink: a 413 splits the batch; a record that
// alone is too large, and records inlet rejects, are a *RejectedError.
type InletSink struct {
	c *client.Client
}

// NewInletSink returns a sink posting to inlet through c; Close closes c.
func NewInletSink(c *client.Client) *InletSink { return &InletSink{c: c} }

func (s *InletSink) Write(ctx context.Context, records [][]byte) error {
	ans, err := s.c.Post(ctx, records)
	var se *client.StatusError
	switch {
	case err == nil:
		if len(ans.Rejected) > 0 {
			return &RejectedError{N: len(ans.Rejected), Err: &client.RejectedError{Rejected: ans.Rejected}}
		}
		return nil
	case errors.As(err, &se) && se.Code == http.StatusRequestEntityTooLarge && len(records) > 1:
		var rej *RejectedError
		for _, half := range [][][]byte{records[:len(records)/2], records[len(records)/2:]} {
			if err := s.Write(ctx, half); errors.As(err, &rej) {
				continue
			} else if err != nil {
				return err
			}
		}
		return nil
	case errors.As(err, &se) && !se.Temporary():
		return &RejectedError{N: len(records), Err: err}
	}
	return err
}

func (s *InletSink) Close(ctx context.Context) error { return s.c.Close(ctx) }

// KafkaConfig configures a KafkaSink.
type KafkaConfig struct {
	Brokers []string
	Topic   string
	// Key is every record's key. Without one, every record goes to
	// partition 0, so that the records of a handler stay in order; with
	// one, records go to the key's partition (in order too).
	Key []byte
	// MaxMessageBytes is the topic's max.message.bytes (default Kafka's
	// 1000012). franz-go makes no batch larger, and a record larger is
	// refused at once, dropped as DropTooLarge, without failing the
	// records around it. Set it when the topic's limit is lower: a batch
	// Kafka refuses as too large fails every record buffered with it, and
	// costs a resend of the batch one record at a time (which finds the
	// record that alone is too large).
	MaxMessageBytes int32
	// Opts are more franz-go options (TLS, SASL, compression ...).
	Opts []kgo.Opt
}

// KafkaSink produces records straight to Kafka with franz-go's idempotent
// producer (acks=all). A Handler keeps several batches in flight to it
// (franz-go batches and compresses them as it sends), in order: one
// partition, and a failed batch fails those after it too.
//
// Once a record failed, the sink refuses every batch handed to it (fails
// it at once, without producing it) until the handler, having heard of
// every batch in flight, begins sending again with the failed one
// (Resume): a batch handed over meanwhile would land ahead of it.
type KafkaSink struct {
	p        Producer
	topic    string
	key      []byte
	maxBytes int

	fails   atomic.Uint64 // records failed (not refused for good) so far, counted by promises
	resumed atomic.Uint64 // fails when the handler last began sending again
}

// Producer is what a KafkaSink needs of franz-go's client; the tests fake it.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	Close()
}

var (
	_ Pipeliner = (*KafkaSink)(nil)
	_ Producer  = (*kgo.Client)(nil)
)

// ErrTooLarge is what errors.Is matches in a write Kafka refused as too
// large: a record over MaxMessageBytes (in a *RejectedError: refused for
// good), or a batch, which is a failure (franz-go fails every record it
// buffered with it): send its records again one at a time, alone in
// flight, and a record refused alone is too large for good.
var ErrTooLarge = errors.New("logship: too large for the topic")

// errEarlierFailed is the answer to a batch the sink refused because an
// earlier one failed and the handler has not resumed since.
var errEarlierFailed = errors.New("logship: an earlier batch failed; sent again after it")

// defaultMaxMessageBytes is Kafka's default max.message.bytes (franz-go's
// default ProducerBatchMaxBytes).
const defaultMaxMessageBytes = 1000012

// NewKafkaSink returns a sink producing to cfg.Topic; Close closes its client.
func NewKafkaSink(cfg KafkaConfig) (*KafkaSink, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("logship: kafka sink needs brokers and a topic")
	}
	maxBytes := cfg.MaxMessageBytes
	if maxBytes <= 0 {
		maxBytes = defaultMaxMessageBytes
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent with acks=all (franz-go's default)
		// The handler sends batches of up to Options.BatchSize, so franz-go
		// need not wait for more; what arrives while a request is in
		// flight goes into the next one.
		kgo.ProducerLinger(0),
		// Bounds what franz-go holds; the handler keeps fewer records
		// than this in flight, so that a send never waits for room.
		kgo.MaxBufferedRecords(kafkaBuffered),
		kgo.ProducerBatchMaxBytes(max(maxBytes, 512)), // franz-go's least
		kgo.AllowAutoTopicCreation(),
		kgo.ClientID("inlet-logship"),
	}
	if cfg.Key == nil {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	cl, err := kgo.NewClient(append(opts, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("logship: creating kafka client: %w", err)
	}
	return NewProducerSink(cl, cfg.Topic, cfg.Key, int(maxBytes)), nil
}

// NewProducerSink returns a sink producing to topic through p (the tests'
// fake), whose max.message.bytes is maxBytes (0: Kafka's default).
func NewProducerSink(p Producer, topic string, key []byte, maxBytes int) *KafkaSink {
	if maxBytes <= 0 {
		maxBytes = defaultMaxMessageBytes
	}
	return &KafkaSink{p: p, topic: topic, key: key, maxBytes: maxBytes}
}

// kafkaBuffered is franz-go's MaxBufferedRecords for a KafkaSink.
const kafkaBuffered = 64 << 10

func (s *KafkaSink) Buffered() int { return kafkaBuffered }

// Resume lets batches through again after a failure: the handler calls it
// with nothing in flight, before sending the failed batch again.
func (s *KafkaSink) Resume() { s.resumed.Store(s.fails.Load()) }

// Write produces records and waits for their acknowledgement, or for ctx
// (then some may still land). It is not for use while sends are in flight.
func (s *KafkaSink) Write(ctx context.Context, records [][]byte) error {
	s.Resume() // the caller heard of every earlier write
	errc := make(chan error, 1)
	s.Send(ctx, records, func(err error) { errc <- err })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("logship: producing to %s: %w", s.topic, ctx.Err())
	}
}

// Send produces records without waiting for Kafka (it waits only while
// franz-go's buffer of 64Ki records is full, until ctx is done); done gets
// nil once all were acknowledged, a *RejectedError for those too large,
// else the first error. franz-go calls promises serially, in order within
// a partition, so the dones of successive sends come in order. Records
// whose ctx ends before they are written fail, so in-flight batches get no
// per-batch deadline. After a record failed, every later send fails at
// once, unproduced, until Resume. records are the sink's until done is
// called. Not safe for concurrent use.
func (s *KafkaSink) Send(ctx context.Context, records [][]byte, done func(error)) {
	if len(records) == 0 {
		done(nil)
		return
	}
	if s.fails.Load() != s.resumed.Load() {
		done(errEarlierFailed)
		return
	}
	b := &kafkaBatch{sink: s, done: done}
	b.left.Store(int32(len(records)))
	b.recs = make([]kgo.Record, len(records))
	for i, r := range records {
		// Offset -1 until Kafka acknowledges the record (see landed).
		b.recs[i] = kgo.Record{Topic: s.topic, Key: s.key, Value: r, Offset: -1}
	}
	promise := b.promise // one method value, not one a record
	for i := range b.recs {
		r := &b.recs[i]
		switch {
		case len(r.Key)+len(r.Value) > s.maxBytes:
			promise(r, &tooLargeRecord{size: len(r.Key) + len(r.Value), max: s.maxBytes})
		case s.fails.Load() != s.resumed.Load():
			// An earlier record failed while this batch was being
			// handed over: the rest would land ahead of its resend.
			promise(r, errEarlierFailed)
		default:
			s.p.Produce(ctx, r, promise)
		}
	}
}

// Landed is how many of the first records of a failed KafkaSink send Kafka
// had acknowledged before the failure, 0 for any other error. Sent again,
// they would be duplicates; left out, no order changes, as long as
// nothing sent before them is still to be sent again: the rest of the
// records follow them. A batch Kafka refuses as too large fails every
// record franz-go buffered with it, while those of earlier requests
// landed: a send's first records can land and its others fail.
func Landed(err error) int {
	var l *landedError
	if errors.As(err, &l) {
		return l.n
	}
	return 0
}

// landedError is a send's error with how many of its first records landed.
type landedError struct {
	n   int
	err error
}

func (e *landedError) Error() string { return e.err.Error() }
func (e *landedError) Unwrap() error { return e.err }

// tooLargeRecord is a record over MaxMessageBytes, refused before franz-go.
type tooLargeRecord struct{ size, max int }

func (e *tooLargeRecord) Error() string {
	return fmt.Sprintf("a record of %d bytes is over max.message.bytes %d", e.size, e.max)
}
func (e *tooLargeRecord) Unwrap() error { return ErrTooLarge }

// kafkaBatch gathers the answers of one send's records.
type kafkaBatch struct {
	sink     *KafkaSink
	done     func(error)
	recs     []kgo.Record
	left     atomic.Int32
	mu       sync.Mutex // guards rejected and first: a record failed at once is answered on the producing goroutine
	rejected int
	first    error // the first error that is not a rejection
	tooLarge error
}

func (b *kafkaBatch) promise(_ *kgo.Record, err error) {
	if err != nil {
		var tl *tooLargeRecord
		b.mu.Lock()
		switch {
		case errors.As(err, &tl):
			b.rejected++
			if b.tooLarge == nil {
				b.tooLarge = err
			}
		case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
			// Kafka refused the batch franz-go made, which may hold
			// records of other sends; franz-go failed every record it
			// buffered with it. Not a verdict on this record alone.
			b.sink.fails.Add(1)
			if b.first == nil {
				b.first = fmt.Errorf("%w: %w", ErrTooLarge, err)
			}
		default:
			if !errors.Is(err, errEarlierFailed) {
				b.sink.fails.Add(1)
			}
			if b.first == nil {
				b.first = err
			}
		}
		b.mu.Unlock()
	}
	if b.left.Add(-1) > 0 {
		return
	}
	b.mu.Lock()
	var res error
	switch {
	case b.first != nil:
		res = fmt.Errorf("logship: producing to %s: %w", b.sink.topic, b.first)
		// franz-go gives an acknowledged record its offset, a failed one
		// -1; one partition keeps them in order.
		landed := 0
		for landed < len(b.recs) && b.recs[landed].Offset >= 0 {
			landed++
		}
		if landed > 0 {
			res = &landedError{n: landed, err: res}
		}
	case b.rejected > 0:
		res = &RejectedError{N: b.rejected, Err: b.tooLarge}
	}
	b.mu.Unlock()
	b.recs = nil
	b.done(res)
}

// Ping asks the brokers for metadata: nil once one answers (with the
// client's TLS and SASL). A fake Producer without Ping answers nil.
func (s *KafkaSink) Ping(ctx context.Context) error {
	if p, ok := s.p.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Close waits for what is in flight, within ctx, and closes the client.
func (s *KafkaSink) Close(ctx context.Context) error {
	err := s.p.Flush(ctx)
	s.p.Close()
	return err
}
