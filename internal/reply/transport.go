package reply

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Transport brings the replies addressed to this instance to the Router.
type Transport interface {
	// Address is where workers send this instance's replies.
	Address() Address
	// Healthy returns nil when replies can arrive now.
	Healthy() error
	// Close stops the transport and waits for it.
	Close()
}

// KafkaTransport consumes this instance's own reply topic, every partition
// of it, from its end at start: only this instance reads it, so a reply
// reaches the instance that waits, never all of them. It makes the topic
// with one partition, and requests name partition 0 for their replies; it
// reads every partition anyway, since a topic recreated by the broker's
// auto-creation (by a worker's reply to it) has the broker's default
// number. A watcher looks at the topic every watchInterval: it makes the
// topic again when it is gone, starts reading partitions added, and starts
// over from the beginning of a topic recreated (its id changed), so that
// request-reply recovers without a restart.
type KafkaTransport struct {
	topic  string
	cl     *kgo.Client
	adm    *kadm.Client // on cl
	router *Router
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	err atomic.Pointer[fetchError] // the last fetch error; nil when fine

	// Owned by watch.
	id         kadm.TopicID
	partitions map[int32]bool
}

// fetchError is a fetch error and when it was seen.
type fetchError struct {
	msg string
	at  time.Time
}

// watchInterval is how often KafkaTransport looks at its reply topic; a
// fetch error older than twice that no longer makes it unhealthy (fetches
// that return nothing do not clear it).
const watchInterval = time.Second

// StartKafka creates topic if needed and starts consuming it from its end.
// It returns once the consumer's position is fixed, so no reply produced
// after it returns can be missed. opts are added to the consumer's client
// options: the TLS and SASL of kafka.Security.Opts.
func StartKafka(ctx context.Context, brokers []string, topic string, router *Router, log *slog.Logger, opts ...kgo.Opt) (*KafkaTransport, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.ClientID("inlet-replies")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("reply: creating kafka consumer: %w", err)
	}
	t := &KafkaTransport{topic: topic, cl: cl, adm: kadm.NewClient(cl), router: router, log: log, partitions: map[int32]bool{}}
	var last error
	for attempt := 0; ; attempt++ { // a new topic's leader may take a moment
		if last = t.reconcile(ctx, true); last == nil {
			break
		}
		if attempt >= 50 || ctx.Err() != nil {
			cl.Close()
			return nil, fmt.Errorf("reply: starting on reply topic %s: %w", topic, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.wg.Add(2)
	go t.run(rctx)
	go t.watch(rctx)
	return t, nil
}

// reconcile makes the reply topic when it is missing and has every
// partition of it consumed: from its end at start, else from its beginning
// (a partition added, or the topic recreated, after this instance started
// asked for replies on it). It is called by StartKafka, then by watch only.
func (t *KafkaTransport) reconcile(ctx context.Context, start bool) error {
	details, err := t.adm.ListTopics(ctx, t.topic)
	if err != nil {
		return fmt.Errorf("describing: %w", err)
	}
	d, ok := details[t.topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		resp, err := t.adm.CreateTopic(ctx, 1, -1, nil, t.topic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists): // being deleted, or just made
			return errors.New("reply topic not there yet")
		case err != nil:
			return fmt.Errorf("creating: %w", err)
		}
		if !start {
			t.log.Warn("reply: reply topic was gone; made it again", "topic", t.topic)
		}
		return errors.New("created; waiting for its partitions")
	}
	if d.Err != nil {
		return fmt.Errorf("describing: %w", d.Err)
	}
	if len(d.Partitions) == 0 {
		return errors.New("no partitions yet")
	}
	if !start && d.ID != t.id {
		// Recreated: the old partitions and positions mean nothing now.
		t.log.Warn("reply: reply topic was recreated; reading it from its beginning", "topic", t.topic, "partitions", len(d.Partitions))
		t.cl.PurgeTopicsFromConsuming(t.topic)
		clear(t.partitions)
	}
	at := kgo.NewOffset().AtStart()
	if start {
		ends, err := t.adm.ListEndOffsets(ctx, t.topic)
		if err != nil {
			return fmt.Errorf("finding its end: %w", err)
		}
		add := map[int32]kgo.Offset{}
		for p := range d.Partitions {
			o, ok := ends.Lookup(t.topic, p)
			if !ok || o.Err != nil {
				return fmt.Errorf("finding the end of partition %d: %v", p, o.Err)
			}
			add[p] = kgo.NewOffset().At(o.Offset)
		}
		t.consume(d.ID, add)
		return nil
	}
	add := map[int32]kgo.Offset{}
	for p := range d.Partitions {
		if !t.partitions[p] {
			add[p] = at
		}
	}
	if len(add) > 0 && len(t.partitions) > 0 {
		t.log.Info("reply: reading partitions added to the reply topic", "topic", t.topic, "added", len(add))
	}
	t.consume(d.ID, add)
	return nil
}

func (t *KafkaTransport) consume(id kadm.TopicID, add map[int32]kgo.Offset) {
	t.id = id
	if len(add) == 0 {
		return
	}
	t.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: add})
	for p := range add {
		t.partitions[p] = true
	}
}

func (t *KafkaTransport) run(ctx context.Context) {
	defer t.wg.Done()
	for {
		fetches := t.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fetches.EachError(func(_ string, _ int32, err error) {
			t.err.Store(&fetchError{msg: err.Error(), at: time.Now()})
		})
		fetches.EachRecord(func(r *kgo.Record) {
			rep, err := ParseReply(r.Key, r.Value, r.Headers)
			t.router.deliver(rep, err)
		})
	}
}

// watch reconciles the reply topic every watchInterval until ctx ends.
func (t *KafkaTransport) watch(ctx context.Context) {
	defer t.wg.Done()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := t.reconcile(rctx, false)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.err.Store(&fetchError{msg: err.Error(), at: time.Now()})
		}
	}
}

// Address implements Transport.
func (t *KafkaTransport) Address() Address { return Address{Kind: "kafka", Name: t.topic} }

// Healthy implements Transport: a reply topic cannot be read while its
// fetches fail (or it cannot be made again).
func (t *KafkaTransport) Healthy() error {
	if e := t.err.Load(); e != nil && time.Since(e.at) < 2*watchInterval {
		return fmt.Errorf("reading reply topic %s: %s", t.topic, e.msg)
	}
	return nil
}

// Close implements Transport.
func (t *KafkaTransport) Close() {
	t.cancel()
	t.wg.Wait()
	t.cl.Close()
}

// RedisTransport subscribes to this instance's own Redis pub/sub channel;
// workers PUBLISH replies there (Reply.Marshal).
type RedisTransport struct {
	channel string
	cl      *redis.Client
	ps      *redis.PubSub
	router  *Router
	log     *slog.Logger
	healthy atomic.Bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// StartRedis subscribes to channel on the Redis at addr. It returns once
// the subscription is confirmed, so no reply published after it returns
// can be missed (while Redis stays up).
func StartRedis(ctx context.Context, addr, channel string, router *Router, log *slog.Logger) (*RedisTransport, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, MaxRetries: 1})
	ps := cl.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		cl.Close()
		return nil, fmt.Errorf("reply: subscribing to redis channel %s at %s: %w", channel, addr, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	t := &RedisTransport{channel: channel, cl: cl, ps: ps, router: router, log: log, cancel: cancel}
	t.healthy.Store(true)
	t.wg.Add(2)
	go t.run()
	go t.watch(rctx)
	return t, nil
}

func (t *RedisTransport) run() {
	defer t.wg.Done()
	// go-redis reconnects and subscribes again after a connection loss;
	// replies published meanwhile are lost (pub/sub), and their callers
	// time out.
	for msg := range t.ps.Channel(redis.WithChannelSize(4096)) {
		rep, err := Unmarshal([]byte(msg.Payload))
		t.router.deliver(rep, err)
	}
}

// watch pings Redis every 500 ms so that Healthy follows it: unhealthy
// after two pings in a row failed (a Redis that is gone refuses both, about
// a second), healthy again at the first that succeeds. One slow ping on a
// loaded host (past its 400 ms) does not turn calls away with 503s.
func (t *RedisTransport) watch(ctx context.Context) {
	defer t.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	failed := 0 // pings in a row that failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		err := t.cl.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed++
		} else {
			failed = 0
		}
		ok := failed < 2
		if was := t.healthy.Swap(ok); was != ok {
			if !ok {
				t.log.Warn("reply: redis unreachable; request-reply answers 503 until it is back", "err", err)
			} else {
				t.log.Info("reply: redis reachable again")
			}
		}
	}
}

// Address implements Transport.
func (t *RedisTransport) Address() Address { return Address{Kind: "redis", Name: t.channel} }

// Healthy implements Transport.
func (t *RedisTransport) Healthy() error {
	if !t.healthy.Load() {
		return errors.New("redis, which carries the replies, is unreachable")
	}
	return nil
}

// Close implements Transport.
func (t *RedisTransport) Close() {
	t.cancel()
	t.ps.Close()
	t.wg.Wait()
	t.cl.Close()
}

var (
	_ Transport = (*KafkaTransport)(nil)
	_ Transport = (*RedisTransport)(nil)
)
