// Package kafka wraps franz-go for inlet: an idempotent, acks=all producer
// with bounded memory, delivery by ack policy, metrics, and error
// classification.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Config configures the producer. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	Brokers     []string
	ClientID    string
	Compression string        // none, gzip, snappy, lz4, zstd
	Linger      time.Duration // how long a partition batch may wait to fill
	// MaxBufferedBytes bounds the records not yet acknowledged by Kafka,
	// in bytes of their keys, values and headers (what franz-go counts).
	// When it is reached, TryProduce fails at once with ErrFull. Each
	// record costs about 250 bytes of memory more (franz-go's record, its
	// headers and promise), so a buffer of small records is bounded by
	// MaxBufferedRecords first: 20,000 of 200 bytes take about 9 MB.
	MaxBufferedBytes int
	// MaxBufferedRecords bounds the number of records not yet acknowledged.
	MaxBufferedRecords int
	// TopicShare is the part of MaxBufferedBytes and MaxBufferedRecords
	// one topic's records may take, in (0, 1]: past it, records for that
	// topic fail at once with ErrTopicFull, so that a topic Kafka does not
	// take leaves the rest of the buffer to the others. 1 turns it off.
	TopicShare float64
	// BatchMaxBytes caps one partition batch (and so one record). Keep it
	// at most the topic's max.message.bytes: a larger record then fails
	// alone, before it is sent, where the broker would refuse its whole
	// batch and so fail other records of that partition with it.
	BatchMaxBytes int32
	// DeliveryTimeout bounds how long a record may wait for Kafka before it
	// fails (kgo.RecordDeliveryTimeout); 0 means retry until the context
	// of the request is done.
	DeliveryTimeout time.Duration
	// Sticky sends records to one partition of a topic at a time, whatever
	// their key, switching when a batch goes out (kgo.StickyPartitioner):
	// fewer and fuller batches, so fewer requests for the broker. For
	// records whose partition does not matter (request-reply requests).
	Sticky bool
	// Security is TLS and SASL to the brokers; the zero value is
	// plaintext. Its flags are registered by Security.RegisterFlags.
	Security Security
	// AllowExpiredCert lets NewProducer (and SecurityOpts) use a client
	// certificate that has expired or is not valid yet: the brokers then
	// refuse the connections, which Ping reports. For a gateway that must
	// start anyway, to take events into its spool.
	AllowExpiredCert bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		ClientID:           "inlet",
		Compression:        "lz4",
		Linger:             time.Millisecond,
		MaxBufferedBytes:   16 << 20,
		MaxBufferedRecords: 20_000,
		TopicShare:         0.5,
		BatchMaxBytes:      1 << 20,
		DeliveryTimeout:    2 * time.Minute,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka: no brokers")
	}
	if _, err := Codec(c.Compression); err != nil {
		return err
	}
	if c.MaxBufferedBytes <= 0 || c.MaxBufferedRecords <= 0 {
		return errors.New("kafka: max buffered bytes and records must be positive")
	}
	if !(c.TopicShare > 0 && c.TopicShare <= 1) {
		return fmt.Errorf("kafka: topic share %v is not in (0, 1]", c.TopicShare)
	}
	if c.Linger < 0 || c.DeliveryTimeout < 0 {
		return errors.New("kafka: linger and delivery timeout must not be negative")
	}
	if c.Linger > time.Minute {
		return fmt.Errorf("kafka: linger %v is longer than a minute", c.Linger)
	}
	_, err := c.SecurityOpts(nil)
	return err
}

// SecurityOpts returns the client options of c.Security (Security.Opts),
// checking the client certificate's dates unless AllowExpiredCert.
func (c Config) SecurityOpts(log *slog.Logger) ([]kgo.Opt, error) {
	if c.AllowExpiredCert {
		return c.Security.opts(log, time.Time{})
	}
	return c.Security.Opts(log)
}

// Codec returns the batch compression codec named none, gzip, snappy, lz4
// or zstd.
func Codec(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("kafka: unknown compression %q (want none, gzip, snappy, lz4 or zstd)", name)
}

// ErrFull is returned when the producer's buffer is full: the caller should
// push back (HTTP 503 with Retry-After) rather than wait.
var ErrFull = errors.New("kafka: producer buffer full")

// undeliveredLogInterval is how often TryProduce's lost records are
// logged: in an outage every buffered record fails, and one line per record
// would flood the log.
const undeliveredLogInterval = 10 * time.Second

// Producer is an idempotent, acks=all producer. It is safe for concurrent use.
type Producer struct {
	cfg         Config
	cl          *kgo.Client
	log         *slog.Logger
	metrics     *Metrics
	undelivered *ratelog.Limiter // TryProduce's records that failed
	health      *health
	topics      *topicLoads
	// A topic's share of the buffer (Config.TopicShare), of the part fits
	// lets requests take.
	shareBytes, shareRecords int64

	// Purging topics that were recreated (health.go). purgeMu guards
	// toPurge and purged.
	purgeMu   sync.Mutex
	toPurge   map[string]struct{}  // topics waiting for the purger
	purged    map[string]time.Time // when each topic was last purged
	purgeKick chan struct{}        // wakes the purger; capacity 1
	quit      chan struct{}        // closed by Close: the purger stops
	purgeDone chan struct{}        // closed when the purger returned

	// learnPartitions' probe record in flight, nil when none. probeMu
	// guards probe.
	probeMu sync.Mutex
	probe   *probe

	closeOnce sync.Once
}

// NewProducer creates a producer. It does not contact the brokers; use Ping.
// metrics may be nil.
func NewProducer(cfg Config, log *slog.Logger, metrics *Metrics) (*Producer, error) {
	return newProducer(cfg, log, metrics)
}

// newProducer is NewProducer with extra client options, for tests.
func newProducer(cfg Config, log *slog.Logger, metrics *Metrics, extra ...kgo.Opt) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	compression, _ := BatchCompression(cfg.Compression) // checked by Validate
	secOpts, err := cfg.SecurityOpts(log)
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	p := &Producer{
		cfg: cfg, log: log, metrics: metrics,
		undelivered: ratelog.New(log, slog.LevelError, "kafka: records not delivered", undeliveredLogInterval),
		toPurge:     map[string]struct{}{},
		purged:      map[string]time.Time{},
		purgeKick:   make(chan struct{}, 1),
		quit:        make(chan struct{}),
		purgeDone:   make(chan struct{}),
	}
	p.health = &health{p: p}
	p.topics = &topicLoads{}
	p.shareBytes = int64(float64(int64(cfg.MaxBufferedBytes)*9/10) * cfg.TopicShare)
	p.shareRecords = int64(float64(int64(cfg.MaxBufferedRecords)*9/10) * cfg.TopicShare)
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence is on by default with acks=all
		compression,
		kgo.ProducerLinger(cfg.Linger),
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		kgo.ProducerBatchMaxBytes(cfg.BatchMaxBytes),
		kgo.AllowAutoTopicCreation(),
		kgo.WithHooks(metrics, p.health, p.topics),
		kgo.WithLogger(Logger(log)),
		// Closing the client waits up to a second for a last push of
		// client metrics (KIP-714), past Close's context when Kafka hangs;
		// inlet's own metrics are in Prometheus.
		kgo.DisableClientMetrics(),
	}
	if cfg.DeliveryTimeout > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout))
	}
	if cfg.Sticky {
		opts = append(opts, kgo.RecordPartitioner(kgo.StickyPartitioner()))
	}
	opts = append(opts, secOpts...)
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka client: %w", err)
	}
	metrics.bufferedBytes(cl, p.topics)
	p.cl = cl
	go p.purger()
	return p, nil
}

// Client returns the underlying client, for reading metadata.
func (p *Producer) Client() *kgo.Client { return p.cl }

// Ping issues a real metadata request to the brokers and reports whether it
// succeeded.
func (p *Producer) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("pinging kafka: %w", err)
	}
	return nil
}

func toKgo(r *event.Record) *kgo.Record {
	kr := &kgo.Record{}
	setKgo(kr, r, nil)
	return kr
}

// setKgo makes kr the Kafka record of r, its headers cut from hs when it
// has room (else allocated); it returns what is left of hs.
func setKgo(kr *kgo.Record, r *event.Record, hs []kgo.RecordHeader) []kgo.RecordHeader {
	kr.Topic, kr.Key, kr.Value = r.Topic, r.Key, r.Value
	if n := len(r.Headers); n > 0 {
		if len(hs) < n {
			hs = make([]kgo.RecordHeader, n)
		}
		kr.Headers, hs = hs[:n:n], hs[n:]
		for i, h := range r.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	if len(kr.Key) == 0 {
		kr.Key = nil
	}
	return hs
}

// toKgoAll converts recs, stamped t (kgo would read the clock once per
// record), into krs and hs (the records and their headers) when they have
// room, else into two new slices.
func toKgoAll(recs []event.Record, t time.Time, krs []kgo.Record, hs []kgo.RecordHeader) ([]kgo.Record, []kgo.RecordHeader) {
	nh := 0
	for i := range recs {
		nh += len(recs[i].Headers)
	}
	if cap(krs) < len(recs) {
		krs = make([]kgo.Record, len(recs))
	}
	krs = krs[:len(recs)]
	if cap(hs) < nh {
		hs = make([]kgo.RecordHeader, nh)
	}
	hs = hs[:nh]
	all := hs
	for i := range recs {
		krs[i].Timestamp = t
		hs = setKgo(&krs[i], &recs[i], hs)
	}
	return krs, all
}

// ProduceSync delivers recs and blocks until every one of them was
// acknowledged by Kafka (acks=all) or failed, or ctx is done. It returns nil
// only when all were acknowledged, else the first failure. It fails at once,
// enqueuing nothing, with ErrFull when the buffer cannot take recs. The
// records are not a transaction: when one fails (too large, an invalid
// topic), the others are still delivered, but for those in a partition
// batch the broker refused with it (see BatchMaxBytes). Records outlive ctx: once enqueued
// they are delivered or fail by the delivery timeout, so a request that gave
// up may still land (at-least-once).
func (p *Producer) ProduceSync(ctx context.Context, recs []event.Record) error {
	d, err := p.produce(recs, nil)
	if err != nil {
		return err
	}
	if err := d.Wait(ctx); err != nil {
		return err // records may still be in flight: d is left to the collector
	}
	d.Recycle()
	return nil
}

// Position is where Kafka stored a record; Offset is -1 while it is not
// known (not acknowledged, or failed).
type Position struct {
	Partition int32
	Offset    int64
}

// ProduceSyncAt is ProduceSync that also sets pos[i] to where Kafka stored
// recs[i] (pos must be as long as recs). Read pos only after it returned
// nil, when every position is set: after an error, records still in flight
// may set theirs later.
func (p *Producer) ProduceSyncAt(ctx context.Context, recs []event.Record, pos []Position) error {
	if len(pos) != len(recs) {
		return fmt.Errorf("kafka: %d positions for %d records", len(pos), len(recs))
	}
	for i := range pos {
		pos[i] = Position{Offset: -1}
	}
	d, err := p.produce(recs, pos)
	if err != nil {
		return err
	}
	return d.Wait(ctx)
}

// Delivery is the pending acknowledgement of records handed to Produce.
type Delivery struct {
	p       *Producer
	start   time.Time
	pending atomic.Int64 // records not yet acknowledged or failed
	mu      sync.Mutex
	err     error // the first failure; guarded by mu
	done    chan struct{}

	// Kept for the next Delivery once this one is recycled.
	krs     []kgo.Record
	hs      []kgo.RecordHeader
	settleF func(*kgo.Record, error) // d.settle, made once
}

// deliveries keeps the Deliveries given back with Recycle (ProduceSync's
// that succeeded, the spool forwarder's): every promise had run, so kgo
// holds none of their records.
// Gain: 7.2 → 5.9-6.4 µs of CPU and 5 → 1 allocations per request (BenchmarkProduce/delivery -cpu 1, 2026-12-05).
var deliveries sync.Pool

// maxPooledRecords bounds the records a recycled Delivery keeps room for.
const maxPooledRecords = 1024

func newDelivery(p *Producer) *Delivery {
	d, _ := deliveries.Get().(*Delivery)
	if d == nil {
		d = &Delivery{}
		d.settleF = d.settle
	}
	d.p, d.start, d.done = p, time.Now(), make(chan struct{})
	return d
}

// Recycle gives d, and the room of its records, to a later Produce. Call
// it only after Wait returned nil (every promise ran: kgo holds none of the
// records), and use d no more.
func (d *Delivery) Recycle() {
	if cap(d.krs) > maxPooledRecords || cap(d.hs) > 8*maxPooledRecords {
		return
	}
	clear(d.krs) // keep no record's bytes alive; kgo sets fields a reuse must not see
	clear(d.hs)
	d.p, d.err, d.done = nil, nil, nil
	deliveries.Put(d)
}

// Produce enqueues recs, in order, and returns at once; Wait on the result
// for Kafka's acknowledgement. It fails at once, enqueuing nothing, with
// ErrFull when the buffer cannot take recs. recs and their byte slices must
// not change until the delivery is done.
func (p *Producer) Produce(recs []event.Record) (*Delivery, error) {
	return p.produce(recs, nil)
}

// produce is Produce, setting pos[i] from recs[i]'s promise when pos is not
// nil; Wait's return orders those writes before the caller's reads.
//
// One promise (d.settle) serves every record of the request, and the Kafka
// records are allocated together: BenchmarkProduce measured this against
// kgo.Client.ProduceSync, a promise per record.
func (p *Producer) produce(recs []event.Record, pos []Position) (*Delivery, error) {
	if err := p.room(recs); err != nil {
		return nil, err
	}
	d := newDelivery(p)
	if len(recs) == 0 {
		close(d.done)
		return d, nil
	}
	d.pending.Store(int64(len(recs)))
	d.krs, d.hs = toKgoAll(recs, d.start, d.krs[:0], d.hs[:0])
	krs, settle := d.krs, d.settleF
	for i := range krs {
		// Not a request's context: kgo cancels a whole partition batch when
		// its first record's context ends, failing other requests' events.
		if pos == nil {
			p.cl.TryProduce(context.Background(), &krs[i], settle)
			continue
		}
		p.cl.TryProduce(context.Background(), &krs[i], func(r *kgo.Record, err error) {
			if err == nil {
				pos[i] = Position{Partition: r.Partition, Offset: r.Offset}
			}
			settle(r, err)
		})
	}
	return d, nil
}

// settle is the promise of d's records: kgo calls promises one at a time.
func (d *Delivery) settle(_ *kgo.Record, err error) {
	if err != nil {
		d.mu.Lock()
		if d.err == nil {
			d.err = err
		}
		d.mu.Unlock()
	}
	if d.pending.Add(-1) == 0 {
		close(d.done)
	}
}

// ProduceFunc enqueues rec and returns at once, failing with ErrFull when
// the buffer cannot take it. done is then called once, from a client
// goroutine, with nil once Kafka acknowledged rec, or with the failure; it
// must not block. Unlike Produce, it allocates no Delivery, for callers
// that hold many records in flight.
func (p *Producer) ProduceFunc(rec *event.Record, done func(error)) error {
	if !p.fits(rec.Size(), 1) {
		return ErrFull
	}
	if !p.topicFits(rec.Topic, rec.Size(), 1) {
		return topicFullError{rec.Topic}
	}
	start := time.Now()
	p.cl.TryProduce(context.Background(), toKgo(rec), func(_ *kgo.Record, err error) {
		if err != nil {
			done(classify(err))
			return
		}
		p.metrics.ProduceLatency.Observe(time.Since(start).Seconds())
		done(nil)
	})
	return nil
}

// Done is closed once every record of d was acknowledged or failed; Err
// then says which.
func (d *Delivery) Done() <-chan struct{} { return d.done }

// Err is the first failure of d's records once Done is closed; nil before.
func (d *Delivery) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return classify(d.err)
	}
	return nil
}

// Wait blocks until every record of d was acknowledged (nil) or failed (the
// first failure), or ctx is done. It may be called again after ctx ended.
func (d *Delivery) Wait(ctx context.Context) error {
	select {
	case <-d.done:
	case <-ctx.Done():
		err := fmt.Errorf("waiting for kafka acknowledgement: %w", ctx.Err())
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Kafka kept records past the caller's deadline: with too few
			// in-sync replicas it answers metadata requests and keeps
			// the records, retrying until --delivery-timeout, so no
			// record fails; this is what readiness sees of it.
			d.p.health.waitTimedOut(err)
		}
		return err
	}
	d.mu.Lock()
	err := d.err
	d.mu.Unlock()
	if err != nil {
		return classify(err)
	}
	d.p.metrics.ProduceLatency.Observe(time.Since(d.start).Seconds())
	return nil
}

// TryProduce enqueues recs for delivery without waiting for Kafka. It fails
// at once with ErrFull, enqueuing nothing, when the buffer cannot take recs.
// Delivery failures after that are counted in
// inlet_producer_undelivered_records_total and logged once per
// undeliveredLogInterval with the number since the last line: with ack=none
// they are lost.
func (p *Producer) TryProduce(recs []event.Record) error {
	if err := p.room(recs); err != nil {
		return err
	}
	start := time.Now()
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			p.metrics.ProduceLatency.Observe(time.Since(start).Seconds())
			return
		}
		p.metrics.Undelivered.Inc()
		p.undelivered.Log("topic", r.Topic, "err", err)
	}
	krs, _ := toKgoAll(recs, start, nil, nil)
	for i := range krs {
		p.cl.TryProduce(context.Background(), &krs[i], promise)
	}
	return nil
}

// room (topics.go) checks recs against the buffer while keeping a tenth of
// it free, so that concurrent requests that passed the check together are
// unlikely to hit the hard limit in kgo (which fails records after they
// were accepted), and against their topics' shares. The check is advisory;
// kgo's limit is the hard bound.

// fits reports whether the buffer, less a tenth, has room for records
// records of bytes bytes in all.
func (p *Producer) fits(bytes, records int) bool {
	limit := int64(p.cfg.MaxBufferedBytes) * 9 / 10
	return p.cl.BufferedProduceBytes()+int64(bytes) <= limit &&
		p.cl.BufferedProduceRecords()+int64(records) <= int64(p.cfg.MaxBufferedRecords)*9/10
}

// classify maps a record's failure to what callers act on: kgo's hard buffer
// limit is ErrFull (push back), anything else a failure to produce. Both keep
// err in the chain.
func classify(err error) error {
	if errors.Is(err, kgo.ErrMaxBuffered) {
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	return fmt.Errorf("producing to kafka: %w", err)
}

// Flush waits until every buffered record is acknowledged or ctx is done.
func (p *Producer) Flush(ctx context.Context) error {
	return p.cl.Flush(ctx)
}

// Close flushes what is buffered (bounded by ctx) and closes the client. It
// returns ctx's error if ctx ended first, and does not block much past ctx
// even when Kafka hangs. Records still unacknowledged then fail with
// kgo.ErrClientClosed; their Deliveries and ProduceFunc callbacks may learn
// it shortly after Close returns. Calls after the first return nil.
func (p *Producer) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		err = p.cl.Flush(ctx)
		if err != nil {
			// Warn, not Error: what it means is the caller's to say (with
			// ack=spool the records are still in the spool; otherwise the
			// gateway reports the returned error).
			p.log.Warn("the producer did not flush everything before closing", "err", err, "buffered_records", p.cl.BufferedProduceRecords())
		}
		close(p.quit)
		p.cl.Close()
		<-p.purgeDone // a purge waiting for the metadata loop ends with the client
	})
	return err
}
