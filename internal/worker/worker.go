// Package worker is the consumer side of inlet's request-reply over Kafka:
// it reads the requests that POST /v1/rpc/{service} produced to the
// service's topic, runs a handler for each, concurrently and bounded, and
// publishes each reply to the address the request names (a Kafka topic or a
// Redis pub/sub channel), as package reply's wire contract lays out.
//
// Requests are ephemeral: a new consumer group starts a minute back in the
// topic (requests older than that are past any caller's deadline and are
// skipped), and a request is committed when its handler
// starts, so a worker that dies mid-request does not hand that request to
// another one: its caller gets 504 at the deadline.
package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/reply"
)

// Handler answers one request. ctx ends at the request's deadline (or when
// the worker is stopped and its stop timeout ran out). An error becomes a
// reply with Err set: the caller gets 502 with the error's text. The reply's
// ID is set by the worker; Status 0 means 200. A Handler is called
// concurrently, up to Config.Concurrency at once.
type Handler func(ctx context.Context, req Request) (reply.Reply, error)

// Config configures a worker. Zero values of optional fields mean their
// defaults.
type Config struct {
	Brokers []string
	// Service names the service; it is required.
	Service string
	// Topic is the request topic; default "rpc." + Service.
	Topic string
	// Group is the consumer group; default "inlet-worker." + Service. A new
	// group starts a minute back (older requests are past their deadline).
	Group string
	// Concurrency bounds the requests handled at once; default 256. When
	// that many handlers run, the worker stops polling: records wait in
	// Kafka (and in the client's bounded fetch buffer), never in an
	// unbounded queue.
	Concurrency int
	// RedisAddr is the host:port of the Redis server that replies
	// addressed redis:<channel> are published to; without it such replies
	// fail (counted in ReplyFailures).
	RedisAddr string
	// ReplyLinger is how long replies to Kafka wait to share a produce
	// request; default 1 ms. With none, at thousands of replies a second the
	// broker gets close to a request per reply (its CPU was what saturated
	// first in the request-reply benchmark); with 2 ms, a call answered at
	// once took 1.5-2 ms longer. Negative: no linger.
	ReplyLinger time.Duration
	// ReplyCompression is the batch compression of replies to Kafka: none
	// (the default), gzip, snappy, lz4 or zstd. Replies are mostly small,
	// and the broker spends CPU validating compressed batches.
	ReplyCompression string
	// StopTimeout bounds a graceful stop: in-flight handlers get this long
	// to finish before their context is cancelled; default 15 s.
	StopTimeout time.Duration
	// Log receives the worker's logs; default: discarded.
	Log *slog.Logger
	// Metrics are updated by the worker; default: new, unregistered.
	Metrics *Metrics
	// Security is TLS and SASL to the brokers.
	Security kafka.Security
}

// Defaults.
const (
	DefaultConcurrency = 256
	DefaultStopTimeout = 15 * time.Second
	DefaultReplyLinger = time.Millisecond
	// replyDeliveryTimeout bounds how long a Kafka reply may wait for its
	// broker before it fails and is counted in ReplyFailures.
	replyDeliveryTimeout = 30 * time.Second
	// resetLookback is how far back a partition without a committed offset
	// is read from: the longest a caller may wait (--rpc-max-timeout).
	resetLookback = time.Minute
	// pingTimeout bounds the first metadata request: Kafka unreachable,
	// or refusing the worker's TLS or SASL settings, fails Run.
	pingTimeout = 10 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Topic == "" && c.Service != "" {
		c.Topic = "rpc." + c.Service
	}
	if c.Group == "" && c.Service != "" {
		c.Group = "inlet-worker." + c.Service
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.ReplyLinger == 0 {
		c.ReplyLinger = DefaultReplyLinger
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	return c
}

// topicName is what Kafka accepts as a topic name.
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Validate reports the first invalid setting; zero values of optional
// fields are valid (they mean the defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case len(c.Brokers) == 0:
		return errors.New("worker: no brokers")
	case c.Service == "":
		return errors.New("worker: no service")
	case !topicName.MatchString(c.Topic):
		return fmt.Errorf("worker: topic %q: want 1 to 249 of a-z A-Z 0-9 . _ -", c.Topic)
	case c.Concurrency < 0:
		return errors.New("worker: concurrency must be positive")
	case c.StopTimeout < 0:
		return errors.New("worker: stop timeout must be positive")
	}
	if _, err := kafka.Codec(c.ReplyCompression); err != nil {
		return fmt.Errorf("worker: reply compression: %w", err)
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// worker is the state of one Run.
type worker struct {
	cfg Config
	h   Handler
	log *slog.Logger
	m   *Metrics
	cl  *kgo.Client
	rdb *redis.Client // nil without Config.RedisAddr

	slots chan struct{} // one per running handler
	wg    sync.WaitGroup

	// Reply topics to purge from the producer (recreated: their old id and
	// partitions are wrong); purger, started by Run, purges them.
	purgeq    chan string   // never closed: promises may run until cl.Close
	stopPurge chan struct{} // closed to stop purger
	purged    chan struct{} // closed when purger returns
}

// purgeQueue bounds the reply topics waiting to be purged; past it, a
// request for one more is dropped (the next failed reply asks again).
const purgeQueue = 16

// Run joins the consumer group on the service's request topic and answers
// requests with h until ctx ends; then it stops fetching, lets the handlers
// in flight finish (bounded by Config.StopTimeout), flushes the replies and
// leaves the group. It returns nil after a stop on ctx, or an error when it
// could not start (invalid config, Kafka or Redis unreachable).
func Run(ctx context.Context, cfg Config, h Handler) error {
	if h == nil {
		return errors.New("worker: no handler")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	w := &worker{cfg: cfg, h: h, log: cfg.Log, m: cfg.Metrics, slots: make(chan struct{}, cfg.Concurrency),
		purgeq: make(chan string, purgeQueue), stopPurge: make(chan struct{}), purged: make(chan struct{})}
	comp, _ := kafka.BatchCompression(cfg.ReplyCompression) // "" is none; checked by Validate
	sec, err := cfg.Security.Opts(cfg.Log)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("inlet-worker"),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		// Where a partition has no committed offset yet: a minute back,
		// not the end. From the end, a new group that rebalanced before
		// its first commit (members joining one after another) had the
		// new owner of a partition skip the requests produced in between
		// (7 of 400 calls lost in a test). Requests older than that are
		// past their deadline anyway and are skipped (and counted).
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(time.Now().Add(-resetLookback).UnixMilli())),
		kgo.AutoCommitMarks(),
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(max(cfg.ReplyLinger, 0)),
		kgo.RecordPartitioner(replyPartitioner()),
		comp,
		kgo.RecordDeliveryTimeout(replyDeliveryTimeout),
		kgo.WithLogger(kafka.Logger(cfg.Log)),
	}, sec...)...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	w.cl = cl
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err = cl.Ping(pctx)
	cancel()
	if err != nil {
		cl.Close()
		return fmt.Errorf("worker: reaching kafka at %v: %w", cfg.Brokers, cfg.Security.ConnErr(err))
	}
	if cfg.RedisAddr != "" {
		w.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
		if err := w.rdb.Ping(ctx).Err(); err != nil {
			w.rdb.Close()
			cl.Close()
			return fmt.Errorf("pinging redis %s: %w", cfg.RedisAddr, err)
		}
	}
	go w.purger()
	w.log.Info("worker started", "service", cfg.Service, "topic", cfg.Topic, "group", cfg.Group,
		"concurrency", cfg.Concurrency, "redis", cfg.RedisAddr)

	// Handlers outlive ctx by up to the stop timeout.
	base, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	w.poll(ctx, base)
	w.stop(cancelHandlers)
	return nil
}

// poll reads requests and starts their handlers until ctx ends. It blocks
// while every slot is taken.
func (w *worker) poll(ctx, base context.Context) {
	for {
		fs := w.cl.PollRecords(ctx, w.cfg.Concurrency)
		if ctx.Err() != nil {
			// Records of this poll not started are not marked, so not
			// committed: the group hands them to another member.
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			w.log.Warn("fetching requests", "topic", topic, "partition", p, "err", err)
		})
		if fs.NumRecords() == 0 && len(fs.Errors()) > 0 {
			select { // don't spin on a persistent error
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
		}
		for it := fs.RecordIter(); !it.Done(); {
			if !w.dispatch(ctx, base, it.Next()) {
				return
			}
		}
	}
}

// dispatch parses r and starts its handler once a slot is free. It returns
// false when ctx ended while waiting for a slot.
func (w *worker) dispatch(ctx, base context.Context, r *kgo.Record) bool {
	req, err := reply.ParseRequest(r.Key, r.Value, r.Headers, w.cfg.Service)
	if err != nil {
		w.m.Malformed.Inc()
		w.log.Warn("dropping request", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "id", req.ID, "err", err)
		w.cl.MarkCommitRecords(r)
		return true
	}
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	w.cl.MarkCommitRecords(r)
	if !time.Now().Before(req.Deadline) {
		<-w.slots
		w.m.SkippedExpired.Inc()
		w.log.Debug("skipping expired request", "id", req.ID, "deadline", req.Deadline)
		return true
	}
	w.m.InFlight.Inc()
	w.wg.Go(func() {
		defer func() {
			w.m.InFlight.Dec()
			<-w.slots
		}()
		w.handle(base, req)
	})
	return true
}

// handle runs the handler for req and publishes its reply.
func (w *worker) handle(base context.Context, req Request) {
	ctx, cancel := context.WithDeadline(base, req.Deadline)
	rep, err := w.call(ctx, req)
	cancel()
	w.m.Handled.Inc()
	if err == nil && rep.Status == 0 {
		rep.Status = http.StatusOK
	}
	if err == nil && !reply.ValidStatus(rep.Status) {
		// A 1xx is no answer (a 101 would have a proxy in front of the
		// gateway switch protocols); past 599 is not HTTP's.
		err = fmt.Errorf("worker: handler answered status %d; want a final HTTP status, 200 to 599", rep.Status)
	}
	if err != nil {
		w.m.Errors.Inc()
		msg := err.Error()
		if msg == "" {
			msg = "worker: handler failed"
		}
		w.log.Debug("handler failed", "id", req.ID, "err", msg)
		rep = reply.Reply{Status: http.StatusBadGateway, Err: msg}
	}
	rep.ID = req.ID
	if !time.Now().Before(req.Deadline) {
		w.m.Late.Inc()
		w.log.Debug("dropping late reply", "id", req.ID, "deadline", req.Deadline)
		return
	}
	w.publish(req, rep)
}

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, req Request) (rep reply.Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("handler panicked", "id", req.ID, "panic", p)
			err = fmt.Errorf("worker: handler panicked: %v", p)
		}
	}()
	return w.h(ctx, req)
}

// publish sends rep to req's reply address. A Kafka reply is produced
// asynchronously (its failure is counted when Kafka answers); a Redis reply
// is published before publish returns, bounded by the request's deadline.
func (w *worker) publish(req Request, rep reply.Reply) {
	switch req.ReplyTo.Kind {
	case "kafka":
		rec := reply.ReplyRecord(req.ReplyTo.Name, rep)
		rec.Partition = req.ReplyPartition // -1: none named
		// Not a request's context: kgo fails a whole batch when the
		// context of its first record ends.
		w.cl.Produce(context.Background(), rec, w.produced)
	case "redis":
		if w.rdb == nil {
			w.replyFailed(req, errors.New("worker: reply addressed to redis, but no Redis configured"))
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), req.Deadline)
		defer cancel()
		if err := w.rdb.Publish(ctx, req.ReplyTo.Name, rep.Marshal()).Err(); err != nil {
			w.replyFailed(req, fmt.Errorf("publishing to redis: %w", err))
		}
	default: // reply.ParseRequest admits no other kind
		w.replyFailed(req, fmt.Errorf("worker: unknown reply address %s", req.ReplyTo))
	}
}

// produced is the promise of a Kafka reply. kgo calls it serially.
func (w *worker) produced(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	w.m.ReplyFailures.Inc()
	w.log.Warn("reply not delivered", "topic", r.Topic, "id", string(r.Key), "err", err)
	if errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kgo.ErrRecordTimeout) {
		// The reply topic was deleted, maybe recreated: the producer's
		// idea of it (its id, its partitions) is stale until purged. Not
		// here: purging fails buffered records, whose promises run on
		// this goroutine.
		select {
		case w.purgeq <- r.Topic:
		default:
		}
	}
}

// purger purges the reply topics produced asks for, until stopPurge closes.
func (w *worker) purger() {
	defer close(w.purged)
	last := map[string]time.Time{} // bounded: by the gateways' reply topics
	for {
		var topic string
		select {
		case topic = <-w.purgeq:
		case <-w.stopPurge:
			return
		}
		if time.Since(last[topic]) < time.Second { // once per failed batch
			continue
		}
		w.log.Info("purging reply topic from the producer", "topic", topic)
		w.cl.PurgeTopicsFromProducing(topic)
		last[topic] = time.Now()
	}
}

// replyPartitioner puts a reply on the partition its record names (the
// request's inlet-reply-partition: the gateway reads that one), and one
// naming none, or one the topic does not have, by its key.
func replyPartitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if r.Partition >= 0 && int(r.Partition) < n {
				return int(r.Partition)
			}
			h := fnv.New32a()
			h.Write(r.Key)
			return int(h.Sum32() % uint32(n))
		}
	})
}

func (w *worker) replyFailed(req Request, err error) {
	w.m.ReplyFailures.Inc()
	w.log.Warn("reply not delivered", "address", req.ReplyTo.String(), "id", req.ID, "err", err)
}

// stop waits for the handlers in flight (cancelling them when the stop
// timeout runs out), flushes the replies and leaves the group.
func (w *worker) stop(cancelHandlers context.CancelFunc) {
	deadline := time.Now().Add(w.cfg.StopTimeout)
	w.log.Info("worker stopping", "in_flight", len(w.slots))
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(w.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.log.Warn("stop timeout: cancelling handlers in flight", "in_flight", len(w.slots))
		cancelHandlers()
		select {
		case <-done:
		case <-time.After(time.Second):
			// Their replies, if any, will fail on the closed clients.
			w.log.Error("handlers ignored cancellation; leaving them behind", "in_flight", len(w.slots))
		}
	}
	// Replies of handlers that returned on cancellation still get a second.
	ctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(time.Second)))
	defer cancel()
	if err := w.cl.Flush(ctx); err != nil {
		w.log.Error("flushing replies", "err", err, "buffered", w.cl.BufferedProduceRecords())
	}
	close(w.stopPurge)
	<-w.purged
	w.cl.Close() // commits what was marked, leaves the group
	if w.rdb != nil {
		w.rdb.Close()
	}
	w.log.Info("worker stopped")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
