package loadclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/kafka"
)

// KafkaConfig is a Kafka producer target: one request is one record,
// produced and awaited, as kafka-producer-perf-test measures it.
type KafkaConfig struct {
	Brokers []string
	Topic   string
	// RecordBytes is the size of each record's value: random capital
	// letters (as kafka-producer-perf-test makes them), a fresh one per
	// record so that compression meets no repeats, after a header of
	// KafkaHeaderBytes when there is room for one.
	RecordBytes int
	// Acks is "all" (with the idempotent producer), "1" or "0" (both
	// without idempotence, which Kafka allows with acks=all only).
	Acks        string
	Linger      time.Duration
	Compression string // none, gzip, snappy, lz4 or zstd
	// E2E ends each request when a consumer of the topic in this process
	// has read the record, not when the broker acknowledged it: latency is
	// then from produce to consume. It needs RecordBytes >= KafkaHeaderBytes.
	E2E bool
	// InFlight is the most records produced and not yet answered at once
	// (the run's workers); the producer's buffer is sized for them.
	InFlight int
	ClientID string
	// Security is TLS and SASL to the brokers.
	Security kafka.Security
}

// KafkaHeaderBytes is the header at the start of each record's value: a
// run id, the record's sequence number and its send time in Unix
// nanoseconds, each 8 bytes big-endian. The end-to-end consumer matches
// records by it; any other consumer may read the send time from it.
const KafkaHeaderBytes = 24

// DefaultKafkaConfig is records of 100 bytes to topic inlet-bench with
// acks=all, a linger of 5 ms (Kafka's producer default since 4.0) and no
// compression, at most 1000 in flight.
func DefaultKafkaConfig() KafkaConfig {
	return KafkaConfig{Topic: "inlet-bench", RecordBytes: 100, Acks: "all", Linger: 5 * time.Millisecond,
		Compression: "none", InFlight: 1000, ClientID: "inlet-bench"}
}

// maxRecord bounds RecordBytes: Kafka's default message.max.bytes is about 1 MiB.
const maxRecord = 1 << 20

// Validate reports the first invalid setting.
func (c KafkaConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("bench: no Kafka brokers")
	case c.Topic == "":
		return errors.New("bench: no topic")
	case c.RecordBytes < 0 || c.RecordBytes > maxRecord:
		return fmt.Errorf("bench: record size must be between 0 and %d bytes", maxRecord)
	case c.E2E && c.RecordBytes < KafkaHeaderBytes:
		return fmt.Errorf("bench: end-to-end records carry a %d-byte header: the record size must be at least that", KafkaHeaderBytes)
	case c.Acks != "all" && c.Acks != "1" && c.Acks != "0":
		return fmt.Errorf("bench: acks %q: want all, 1 or 0", c.Acks)
	case c.Linger < 0:
		return errors.New("bench: linger must not be negative")
	case c.InFlight <= 0:
		return errors.New("bench: records in flight must be positive")
	}
	if _, err := kafka.Codec(c.Compression); err != nil {
		return err
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// Kafka is a Kafka producer target. Its Do is a Target. With E2E it also
// owns a consumer of the topic, started by NewKafka and stopped by Close.
type Kafka struct {
	cfg  KafkaConfig
	cl   *kgo.Client
	run  uint64 // in each record's header: this run's records, not another's
	seq  atomic.Uint64
	what string

	// End to end only.
	consumer *kgo.Client
	stop     context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex              // guards waiting
	waiting  map[uint64]chan<- error // by sequence number: at most InFlight
	consumed atomic.Int64            // records of this run read
	stray    atomic.Int64            // records read that no request waits for
}

// Result statuses of a Kafka target: the broker's answer for a success.
// A broker's refusal is the Kafka error's name, such as
// NOT_ENOUGH_REPLICAS; failures with no answer are Result.Err.
const (
	StatusAcked    = "acked"    // the broker acknowledged the record (with acks=0: it was written)
	StatusConsumed = "consumed" // end to end: the consumer read it
)

// NewKafka connects to the brokers, creates the topic if it does not exist
// (with the broker's default partitions) and, with E2E, starts consuming
// it from its end. ctx bounds the setup only. Close the target.
func NewKafka(ctx context.Context, cfg KafkaConfig) (*Kafka, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	comp, _ := kafka.BatchCompression(cfg.Compression) // checked by Validate
	sec, err := cfg.Security.Opts(nil)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.ProducerLinger(cfg.Linger),
		comp,
		// Room for every record in flight, and for records whose request
		// timed out; past it a record fails at once (TryProduce in Do).
		kgo.MaxBufferedRecords(max(2*cfg.InFlight, 10000)),
		kgo.AllowAutoTopicCreation(),
	}
	switch cfg.Acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks())) // idempotent, 5 requests in flight per broker
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5))
	}
	cl, err := kgo.NewClient(append(opts, sec...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: creating Kafka client: %w", err)
	}
	k := &Kafka{cfg: cfg, cl: cl, run: rand.Uint64()}
	k.what = fmt.Sprintf("kafka %s topic %s: %d-byte records, acks=%s, linger %v, compression %s",
		strings.Join(cfg.Brokers, ","), cfg.Topic, cfg.RecordBytes, cfg.Acks, cfg.Linger, cfg.Compression)
	if cfg.E2E {
		k.what = strings.Replace(k.what, "kafka ", "kafka end-to-end ", 1)
	}
	offsets, err := k.ensureTopic(ctx)
	if err == nil && cfg.E2E {
		err = k.startConsumer(offsets)
	}
	if err != nil {
		cl.Close()
		return nil, err
	}
	return k, nil
}

// ensureTopic creates the topic unless it exists and returns its end
// offsets once every partition has a leader.
func (k *Kafka) ensureTopic(ctx context.Context) (map[string]map[int32]kgo.Offset, error) {
	if err := k.cl.Ping(ctx); err != nil {
		return nil, fmt.Errorf("bench: reaching Kafka at %s: %w", strings.Join(k.cfg.Brokers, ","), k.cfg.Security.ConnErr(err))
	}
	adm := kadm.NewClient(k.cl)
	if _, err := adm.CreateTopic(ctx, -1, -1, nil, k.cfg.Topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("bench: creating topic %s: %w", k.cfg.Topic, err)
	}
	// A new topic takes a moment to have leaders everywhere.
	for {
		ends, err := adm.ListEndOffsets(ctx, k.cfg.Topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[k.cfg.Topic]) > 0 {
			return ends.KOffsets(), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: listing the offsets of topic %s: %w", k.cfg.Topic, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startConsumer reads the topic from offsets, in the background, until Close.
func (k *Kafka) startConsumer(offsets map[string]map[int32]kgo.Offset) error {
	sec, err := k.cfg.Security.Opts(nil)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.cfg.Brokers...), kgo.ClientID(k.cfg.ClientID + "-consumer"),
		kgo.ConsumePartitions(offsets), kgo.FetchMaxWait(500 * time.Millisecond)}, sec...)...)
	if err != nil {
		return fmt.Errorf("bench: creating Kafka consumer: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	k.consumer, k.stop, k.done = cl, stop, make(chan struct{})
	k.waiting = make(map[uint64]chan<- error)
	go func() {
		defer close(k.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				run, seq, ok := parseHeader(r.Value)
				if !ok || run != k.run {
					k.stray.Add(1)
					return
				}
				k.consumed.Add(1)
				if !k.answer(seq, nil) {
					k.stray.Add(1) // its request gave up, or a duplicate
				}
			})
		}
	}()
	return nil
}

// String says what is measured.
func (k *Kafka) String() string { return k.what }

// Close stops the consumer and closes the clients; records not yet
// acknowledged fail.
func (k *Kafka) Close() {
	if k.consumer != nil {
		k.stop()
		k.consumer.Close()
		<-k.done
	}
	k.cl.Close()
}

// KafkaStats counts what the end-to-end consumer read.
type KafkaStats struct {
	Consumed int64 `json:"consumed"` // records of this run
	// Stray are records read that no request waited for: another run's or
	// another producer's, duplicates, and those read after their request
	// gave up.
	Stray int64 `json:"stray"`
}

// Stats is what the end-to-end consumer read so far.
func (k *Kafka) Stats() KafkaStats {
	return KafkaStats{Consumed: k.consumed.Load(), Stray: k.stray.Load()}
}

// noCancel is the context of every record. A record's context must outlive
// the request that produced it: franz-go fails a whole batch whose first
// record's context is done, and end to end a request may end (its record
// read) before its batch is settled, or on a timeout. The producer's buffer
// is bounded instead (TryProduce fails at once when it is full).
var noCancel = context.Background()

// Do produces one record and waits for the broker's acknowledgement, or,
// end to end, for the consumer to read it. It returns when ctx ends, but
// the record stays with the producer until Kafka settles it or the target
// is closed. It is a Target: safe for concurrent use.
func (k *Kafka) Do(ctx context.Context) bench.Result {
	seq := k.seq.Add(1)
	v := k.value(seq)
	res := bench.Result{Sent: int64(len(v)), Events: 1}
	answer := make(chan error, 1)
	rec := &kgo.Record{Topic: k.cfg.Topic, Value: v}
	if k.cfg.E2E {
		k.mu.Lock()
		k.waiting[seq] = answer
		k.mu.Unlock()
		defer k.answer(seq, context.Canceled) // forget it if still waiting
		k.cl.TryProduce(noCancel, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				k.answer(seq, err)
			}
		})
	} else {
		k.cl.TryProduce(noCancel, rec, func(_ *kgo.Record, err error) { answer <- err })
	}
	var err error
	select {
	case err = <-answer:
	case <-ctx.Done():
		err = ctx.Err()
	}
	var ke *kerr.Error
	switch {
	case err == nil && k.cfg.E2E:
		res.Status, res.OK = StatusConsumed, true
	case err == nil:
		res.Status, res.OK = StatusAcked, true
	case errors.As(err, &ke):
		res.Status = ke.Message
	default:
		res.Err = err
	}
	return res
}

// answer ends the wait of record seq with err, if a request waits for it,
// and says whether one did.
func (k *Kafka) answer(seq uint64, err error) bool {
	k.mu.Lock()
	ch, ok := k.waiting[seq]
	delete(k.waiting, seq)
	k.mu.Unlock()
	if ok {
		ch <- err // buffered, and sent to at most once
	}
	return ok
}

// value makes record seq's value: the header where there is room, then
// random capital letters.
func (k *Kafka) value(seq uint64) []byte {
	v := make([]byte, k.cfg.RecordBytes)
	pad := v
	if len(v) >= KafkaHeaderBytes {
		binary.BigEndian.PutUint64(v[0:], k.run)
		binary.BigEndian.PutUint64(v[8:], seq)
		binary.BigEndian.PutUint64(v[16:], uint64(time.Now().UnixNano()))
		pad = v[KafkaHeaderBytes:]
	}
	for i := 0; i < len(pad); i += 8 {
		r := rand.Uint64()
		for j := i; j < min(i+8, len(pad)); j++ {
			pad[j] = 'A' + byte(r%26)
			r >>= 8
		}
	}
	return v
}

// parseHeader reads a record value's header.
func parseHeader(v []byte) (run, seq uint64, ok bool) {
	if len(v) < KafkaHeaderBytes {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(v[0:]), binary.BigEndian.Uint64(v[8:]), true
}
