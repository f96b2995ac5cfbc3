package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Brokers: []string{"127.0.0.1:9092"}, Service: "billing"}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "no brokers"},
		{"no service", func(c *Config) { c.Service = "" }, "no service"},
		{"bad service", func(c *Config) { c.Service = "a b" }, `topic "rpc.a b"`},
		{"bad topic", func(c *Config) { c.Topic = "x/y" }, `topic "x/y"`},
		{"negative concurrency", func(c *Config) { c.Concurrency = -1 }, "concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
	d := ok.withDefaults()
	if d.Topic != "rpc.billing" || d.Group != "inlet-worker.billing" || d.Concurrency != 256 {
		t.Errorf("defaults: topic %q, group %q, concurrency %d", d.Topic, d.Group, d.Concurrency)
	}
}

// TestRun exercises one worker: replies, errors, expired, late and
// malformed requests, on Kafka reply topics.
func TestRun(t *testing.T) {
	t.Parallel()
	h := func(ctx context.Context, req Request) (reply.Reply, error) {
		switch string(req.Body) {
		case "fail":
			return reply.Reply{Body: []byte("ignored")}, errors.New("database unreachable")
		case "panic":
			panic("bad handler")
		case "slow":
			<-ctx.Done()
			return reply.Reply{}, ctx.Err()
		case "teapot":
			return reply.Reply{Status: http.StatusTeapot, ContentType: "text/plain", Body: []byte("short and stout")}, nil
		case "bad status":
			return reply.Reply{Status: 1000}, nil
		case "switching protocols":
			return reply.Reply{Status: http.StatusSwitchingProtocols}, nil
		}
		body := req.Service + " " + req.Query + " " + req.Headers.Get("X-Trace-Id") + " " + string(req.Body)
		return reply.Reply{ContentType: req.ContentType, Body: []byte(body)}, nil
	}
	hs := startWorker(t, h, nil)
	m := hs.cfg.Metrics
	later := time.Now().Add(10 * time.Second)

	hs.produce(Request{ID: "ok", Deadline: later, Body: []byte("hello"), ContentType: "text/x-hello", Query: "q=1",
		Headers: http.Header{"X-Trace-Id": {"tr-9"}}, Service: "named"})
	hs.send("fail", later, []byte("fail"))
	hs.send("panic", later, []byte("panic"))
	hs.send("teapot", later, []byte("teapot"))
	hs.send("bad-status", later, []byte("bad status"))
	hs.send("status-101", later, []byte("switching protocols"))
	hs.send("expired", time.Now().Add(-time.Second), []byte("hello"))
	hs.send("late", time.Now().Add(time.Second), []byte("slow"))
	// Malformed: no reply address, no deadline, nothing at all.
	if err := hs.cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: hs.cfg.Topic, Key: []byte("m1"), Headers: []kgo.RecordHeader{{Key: reply.HeaderCorrelationID, Value: []byte("m1")}}},
		&kgo.Record{Topic: hs.cfg.Topic, Key: []byte("m2"), Headers: []kgo.RecordHeader{
			{Key: reply.HeaderCorrelationID, Value: []byte("m2")}, {Key: reply.HeaderReplyTo, Value: []byte("kafka:" + hs.replyTopic)}}},
		&kgo.Record{Topic: hs.cfg.Topic, Value: []byte("junk")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	got := hs.replies(6, 10*time.Second)
	want := map[string]reply.Reply{
		"ok":         {ID: "ok", Status: 200, ContentType: "text/x-hello", Body: []byte("named q=1 tr-9 hello")},
		"fail":       {ID: "fail", Status: 502, Err: "database unreachable", Body: []byte{}},
		"panic":      {ID: "panic", Status: 502, Err: "worker: handler panicked: bad handler", Body: []byte{}},
		"teapot":     {ID: "teapot", Status: 418, ContentType: "text/plain", Body: []byte("short and stout")},
		"bad-status": {ID: "bad-status", Status: 502, Err: "worker: handler answered status 1000; want a final HTTP status, 200 to 599", Body: []byte{}},
		// A 101 was passed on; the gateway answered its caller with it.
		"status-101": {ID: "status-101", Status: 502, Err: "worker: handler answered status 101; want a final HTTP status, 200 to 599", Body: []byte{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replies:\n got %+v\nwant %+v", got, want)
	}
	// The late request's handler ends at its deadline; wait for it.
	testkit.WaitFor(t, 5*time.Second, "the late reply counted", func() bool { return testutil.ToFloat64(m.Late) == 1 })
	if err := hs.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Nothing else arrived: no reply to the expired, late or malformed ones.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	hs.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
		if !strings.HasPrefix(string(r.Key), "warm-") {
			t.Errorf("unexpected reply %q", r.Key)
		}
	})
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"handled":         {testutil.ToFloat64(m.Handled), 7 + float64(hs.warm)},
		"errors":          {testutil.ToFloat64(m.Errors), 5}, // fail, panic, bad status, 101, late
		"skipped_expired": {testutil.ToFloat64(m.SkippedExpired), 1},
		"late":            {testutil.ToFloat64(m.Late), 1},
		"malformed":       {testutil.ToFloat64(m.Malformed), 3},
		"reply_failures":  {testutil.ToFloat64(m.ReplyFailures), 0},
		"in_flight":       {testutil.ToFloat64(m.InFlight), 0},
	} {
		// Warm-ups sent before the worker had its partitions were never seen.
		if name == "handled" {
			if c.got < 8 || c.got > c.want {
				t.Errorf("handled = %v, want 8..%v", c.got, c.want)
			}
			continue
		}
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

// TestRunBoundsConcurrency: with Concurrency 4, never more than 4 handlers
// run at once, and all requests are answered.
func TestRunBoundsConcurrency(t *testing.T) {
	t.Parallel()
	var running, peak atomic.Int64
	h := func(ctx context.Context, req Request) (reply.Reply, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		return reply.Reply{Body: req.Body}, nil
	}
	hs := startWorker(t, h, func(c *Config) { c.Concurrency = 4 })
	recs := make([]*kgo.Record, 40)
	for i := range recs {
		recs[i] = hs.request(Request{ID: fmt.Sprintf("r%d", i), Deadline: time.Now().Add(20 * time.Second), Body: []byte("x")})
	}
	if err := hs.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	hs.replies(40, 15*time.Second)
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak concurrency %d, want 2..4", p)
	}
}

// TestStopFinishesInFlight: a stop lets the handler in flight finish and
// its reply is delivered.
func TestStopFinishesInFlight(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, req Request) (reply.Reply, error) {
		if string(req.Body) == "slow" {
			started <- struct{}{}
			time.Sleep(500 * time.Millisecond)
		}
		return reply.Reply{Body: req.Body}, nil
	}
	hs := startWorker(t, h, nil)
	hs.send("slow", time.Now().Add(10*time.Second), []byte("slow"))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	if err := hs.stop(); err != nil {
		t.Fatal(err)
	}
	if got := hs.replies(1, 5*time.Second)["slow"]; string(got.Body) != "slow" || got.Status != 200 {
		t.Errorf("reply %+v", got)
	}
}

// TestStopTimeoutCancelsHandlers: a handler that outlives the stop timeout
// has its context cancelled, and Run returns.
func TestStopTimeoutCancelsHandlers(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, req Request) (reply.Reply, error) {
		if string(req.Body) == "stuck" {
			started <- struct{}{}
			<-ctx.Done()
			return reply.Reply{}, errors.New("cancelled")
		}
		return reply.Reply{Body: req.Body}, nil
	}
	hs := startWorker(t, h, func(c *Config) { c.StopTimeout = 300 * time.Millisecond })
	hs.send("stuck", time.Now().Add(time.Minute), []byte("stuck"))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	start := time.Now()
	if err := hs.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v with a 300ms stop timeout", d)
	}
	if got := hs.replies(1, 5*time.Second)["stuck"]; got.Status != 502 || got.Err != "cancelled" {
		t.Errorf("reply %+v, want 502 cancelled", got)
	}
}

// TestRunRedisReply publishes replies addressed redis:<channel> to a real
// Redis, encoded with reply.Marshal.
func TestRunRedisReply(t *testing.T) {
	t.Parallel()
	addr := testkit.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	h := func(ctx context.Context, req Request) (reply.Reply, error) {
		if string(req.Body) == "fail" {
			return reply.Reply{}, errors.New("no such account")
		}
		return reply.Reply{Status: 201, ContentType: "application/json", Body: append([]byte(`{"echo":`), append(req.Body, '}')...)}, nil
	}
	hs := startWorker(t, h, func(c *Config) { c.RedisAddr = addr })
	channel := testkit.Unique(t, "inlet-test.")
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	to := reply.Address{Kind: "redis", Name: channel}
	hs.produce(Request{ID: "r1", ReplyTo: to, Deadline: time.Now().Add(10 * time.Second), Body: []byte(`"hi"`)})
	hs.produce(Request{ID: "r2", ReplyTo: to, Deadline: time.Now().Add(10 * time.Second), Body: []byte("fail")})
	got := map[string]reply.Reply{}
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case msg := <-sub.Channel():
			r, err := reply.Unmarshal([]byte(msg.Payload))
			if err != nil {
				t.Fatalf("payload %q: %v", msg.Payload, err)
			}
			got[r.ID] = r
		case <-timeout:
			t.Fatalf("got %d replies from Redis, want 2", len(got))
		}
	}
	want := map[string]reply.Reply{
		"r1": {ID: "r1", Status: 201, ContentType: "application/json", Body: []byte(`{"echo":"hi"}`)},
		"r2": {ID: "r2", Status: 502, Err: "no such account", Body: []byte{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replies:\n got %+v\nwant %+v", got, want)
	}
	if f := testutil.ToFloat64(hs.cfg.Metrics.ReplyFailures); f != 0 {
		t.Errorf("reply failures %v", f)
	}
}

// TestRunRedisUnconfigured: a reply addressed to Redis without a Redis is a
// counted reply failure, not a crash.
func TestRunRedisUnconfigured(t *testing.T) {
	t.Parallel()
	hs := startWorker(t, Echo(0, 0), nil)
	hs.produce(Request{ID: "r1", ReplyTo: reply.Address{Kind: "redis", Name: "nowhere"}, Deadline: time.Now().Add(10 * time.Second), Body: []byte("x")})
	testkit.WaitFor(t, 10*time.Second, "the reply failure counted", func() bool {
		return testutil.ToFloat64(hs.cfg.Metrics.ReplyFailures) == 1
	})
}

func TestRunFailsFast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Run(ctx, Config{Service: "x"}, Echo(0, 0)); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("no brokers: %v", err)
	}
	if err := Run(ctx, Config{Brokers: []string{testkit.FreeAddr(t)}, Service: "x"}, nil); err == nil {
		t.Error("nil handler accepted")
	}
	brokers := testkit.Brokers(t)
	err := Run(ctx, Config{Brokers: brokers, Service: "x", RedisAddr: testkit.FreeAddr(t)}, Echo(0, 0))
	if err == nil || !strings.Contains(err.Error(), "pinging redis") {
		t.Errorf("unreachable Redis: %v", err)
	}
}

// TestRunReplyPartition: a reply goes to the partition its request names
// (inlet reads that one), whatever its key hashes to; one naming none, or
// a partition the topic does not have, goes by its key. Before, every reply
// went by its key, and a reply topic with three partitions (recreated by
// the broker's auto-creation) lost two thirds of them to partitions the
// gateway did not read.
func TestRunReplyPartition(t *testing.T) {
	t.Parallel()
	hs := startWorker(t, func(_ context.Context, req Request) (reply.Reply, error) {
		return reply.Reply{Body: req.Body}, nil
	}, nil)
	topic := testkit.Unique(t, "replies3-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(hs.cl)
	if resp, err := adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(hs.cfg.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	later := time.Now().Add(20 * time.Second)
	want := map[string]int32{} // correlation id: partition; -1 any
	for i := range 12 {
		id := fmt.Sprintf("p2-%d", i)
		want[id] = 2
		hs.produce(Request{ID: id, Deadline: later, ReplyTo: reply.Address{Kind: "kafka", Name: topic}, ReplyPartition: 2})
	}
	for _, p := range []int32{-1, 7} { // none named; past the topic's partitions
		id := fmt.Sprintf("by-key-%d", p)
		want[id] = -1
		hs.produce(Request{ID: id, Deadline: later, ReplyTo: reply.Address{Kind: "kafka", Name: topic}, ReplyPartition: p})
	}
	got := map[string]int32{}
	for len(got) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d replies arrived: %v", len(got), len(want), got)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = r.Partition })
	}
	for id, p := range want {
		if p >= 0 && got[id] != p {
			t.Errorf("reply %s on partition %d, want %d", id, got[id], p)
		}
		if p < 0 && (got[id] < 0 || got[id] > 2) {
			t.Errorf("reply %s on partition %d", id, got[id])
		}
	}
}
