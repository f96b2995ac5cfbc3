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

// KafkaTransport consumes this instance's own reply topic (one partition),
// from its end at start: only this instance reads it, so a reply reaches
// the instance that waits, never all of them.
type KafkaTransport struct {
	topic  string
	cl     *kgo.Client
	router *Router
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	err    atomic.Value // string: the last fetch error, "" when fine
}

// StartKafka creates topic if needed and starts consuming it from its end.
// It returns once the consumer's position is fixed, so no reply produced
// after it returns can be missed.
func StartKafka(ctx context.Context, brokers []string, topic string, router *Router, log *slog.Logger) (*KafkaTransport, error) {
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("reply: creating kafka client: %w", err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	resp, err := adm.CreateTopic(ctx, 1, -1, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("reply: creating reply topic %s: %w", topic, err)
	}
	if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("reply: creating reply topic %s: %w", topic, resp.Err)
	}
	var end int64 = -1
	for attempt := 0; ; attempt++ { // a new topic's leader may take a moment
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			if o, ok := offs.Lookup(topic, 0); ok && o.Err == nil {
				end = o.Offset
				break
			}
		}
		if attempt >= 50 || ctx.Err() != nil {
			return nil, fmt.Errorf("reply: finding the end of reply topic %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(end)}}),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ClientID("inlet-replies"))
	if err != nil {
		return nil, fmt.Errorf("reply: creating kafka consumer: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	t := &KafkaTransport{topic: topic, cl: cl, router: router, log: log, cancel: cancel, done: make(chan struct{})}
	t.err.Store("")
	go t.run(rctx)
	return t, nil
}

func (t *KafkaTransport) run(ctx context.Context) {
	defer close(t.done)
	for {
		fetches := t.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fetchErr := ""
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err.Error() })
		t.err.Store(fetchErr)
		fetches.EachRecord(func(r *kgo.Record) {
			rep, err := ParseReply(r.Key, r.Value, r.Headers)
			t.router.deliver(rep, err)
		})
	}
}

// Address implements Transport.
func (t *KafkaTransport) Address() Address { return Address{Kind: "kafka", Name: t.topic} }

// Healthy implements Transport: a reply topic cannot be read while its
// fetches fail.
func (t *KafkaTransport) Healthy() error {
	if e := t.err.Load().(string); e != "" {
		return fmt.Errorf("reading reply topic %s: %s", t.topic, e)
	}
	return nil
}

// Close implements Transport.
func (t *KafkaTransport) Close() {
	t.cancel()
	<-t.done
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

// watch pings Redis every 500 ms so that Healthy follows it.
func (t *RedisTransport) watch(ctx context.Context) {
	defer t.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
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
		if was := t.healthy.Swap(err == nil); was != (err == nil) {
			if err != nil {
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
