package logship

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/client"
)

// Sink is where a Handler delivers its records (encoded inlet events).
type Sink interface {
	// Write delivers records in order and returns nil once the sink
	// acknowledged every one. Any other error means some may have been
	// delivered and the caller writes them all again (duplicates, never a
	// loss), except a *RejectedError: those records are refused for good.
	// It is called by one goroutine at a time; records are valid only
	// until it returns.
	Write(ctx context.Context, records [][]byte) error
	// Close releases the sink within ctx.
	Close(ctx context.Context) error
}

// ErrRejected is what a *RejectedError matches with errors.Is.
var ErrRejected = errors.New("logship: rejected")

// RejectedError reports that N records of a Write were refused for good
// (the others were delivered); they are not written again.
type RejectedError struct {
	N   int
	Err error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("logship: %d records rejected: %v", e.N, e.Err)
}
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }
func (e *RejectedError) Unwrap() error        { return e.Err }

// InletSink delivers records to inlet with c.Post (one attempt per Write;
// the handler retries). A 413 splits the batch; a record that alone is
// too large, and records inlet rejects, are reported as rejected.
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
// (resume): a batch handed over meanwhile would land ahead of it.
type KafkaSink struct {
	p        producer
	topic    string
	key      []byte
	maxBytes int

	fails   atomic.Uint64 // records failed (not refused for good) so far, counted by promises
	resumed atomic.Uint64 // fails when the handler last began sending again
}

// producer is what a KafkaSink needs of franz-go's client; the tests fake it.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	Close()
}

var (
	_ pipeliner = (*KafkaSink)(nil)
	_ producer  = (*kgo.Client)(nil)
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
	return newKafkaSink(cl, cfg.Topic, cfg.Key, int(maxBytes)), nil
}

func newKafkaSink(p producer, topic string, key []byte, maxBytes int) *KafkaSink {
	return &KafkaSink{p: p, topic: topic, key: key, maxBytes: maxBytes}
}

// kafkaBuffered is franz-go's MaxBufferedRecords for a KafkaSink.
const kafkaBuffered = 64 << 10

func (s *KafkaSink) buffered() int { return kafkaBuffered }

// resume lets batches through again after a failure: the handler calls it
// with nothing in flight, before sending the failed batch again.
func (s *KafkaSink) resume() { s.resumed.Store(s.fails.Load()) }

// Send hands records to franz-go and returns without waiting for Kafka
// (it waits only while franz-go's buffer of 64Ki records is full, until
// ctx is done), for a caller that keeps several batches in flight, as a
// Handler does. done is called once, with what Write would have returned,
// serially and in the order of the Sends; it must not block. Records
// whose ctx ends before they are written fail, so give in-flight batches
// no per-batch deadline. After a record failed, every later Send fails at
// once, unproduced, until Resume: wait for every Send in flight, call
// Resume, and send the failed batch and those after it again, in order.
// records are the sink's until done is called. Not safe for concurrent use.
func (s *KafkaSink) Send(ctx context.Context, records [][]byte, done func(error)) {
	s.send(ctx, records, done)
}

// Resume lets Sends through again after a failure; call it with nothing in flight.
func (s *KafkaSink) Resume() { s.resume() }

// Write produces records and waits for their acknowledgement, or for ctx
// (then some may still land). It is not for use while sends are in flight.
func (s *KafkaSink) Write(ctx context.Context, records [][]byte) error {
	s.resume() // the caller heard of every earlier write
	errc := make(chan error, 1)
	s.send(ctx, records, func(err error) { errc <- err })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("logship: producing to %s: %w", s.topic, ctx.Err())
	}
}

// send produces records without waiting for Kafka; done gets nil once all
// were acknowledged, a *RejectedError for those too large, else the first
// error. franz-go calls promises serially, in order within a partition,
// so the dones of successive sends come in order.
func (s *KafkaSink) send(ctx context.Context, records [][]byte, done func(error)) {
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
		// Offset -1 until Kafka acknowledges the record (see Landed).
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

// Landed is how many of the first records of a failed KafkaSink Send or
// Write Kafka had acknowledged before the failure, 0 for any other error.
// Sent again, they would be duplicates; left out, no order changes, as
// long as nothing sent before them is still to be sent again: the rest of
// the records follow them. A batch Kafka refuses as too large fails every
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

// Close waits for what is in flight, within ctx, and closes the client.
func (s *KafkaSink) Close(ctx context.Context) error {
	err := s.p.Flush(ctx)
	s.p.Close()
	return err
}
