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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/reply"
)

func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

func TestParseRequest(t *testing.T) {
	t.Parallel()
	deadline := time.UnixMilli(1_900_000_000_123)
	ms := reply.FormatDeadline(deadline)
	full := []kgo.RecordHeader{
		hdr(reply.HeaderCorrelationID, "c1"),
		hdr(reply.HeaderReplyTo, "kafka:replies.a"),
		hdr(reply.HeaderDeadline, ms),
		hdr(reply.HeaderService, "billing"),
		hdr(reply.HeaderQuery, "a=1&b=2"),
		hdr(reply.HeaderContentType, "application/json"),
		hdr("http-x-trace-id", "t1"),
		hdr("http-accept", "text/plain"),
		hdr("http-accept", "application/json"),
		hdr("unrelated", "x"),
	}
	without := func(key string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for _, h := range full {
			if h.Key != key {
				hs = append(hs, h)
			}
		}
		return hs
	}
	with := func(key, value string) []kgo.RecordHeader {
		return append(without(key), hdr(key, value))
	}
	tests := []struct {
		name    string
		key     string
		headers []kgo.RecordHeader
		want    Request // compared when wantErr is empty
		wantErr string
	}{
		{name: "full", key: "c1", headers: full, want: Request{
			ID: "c1", Service: "billing", Deadline: deadline, ContentType: "application/json", Query: "a=1&b=2",
			Headers: http.Header{"X-Trace-Id": {"t1"}, "Accept": {"text/plain", "application/json"}},
			Body:    []byte("body"), ReplyTo: reply.Address{Kind: "kafka", Name: "replies.a"},
		}},
		{name: "id from key", key: "k1", headers: without(reply.HeaderCorrelationID), want: Request{
			ID: "k1", Service: "billing", Deadline: deadline, ContentType: "application/json", Query: "a=1&b=2",
			Headers: http.Header{"X-Trace-Id": {"t1"}, "Accept": {"text/plain", "application/json"}},
			Body:    []byte("body"), ReplyTo: reply.Address{Kind: "kafka", Name: "replies.a"},
		}},
		{name: "minimal, redis", headers: []kgo.RecordHeader{
			hdr(reply.HeaderCorrelationID, "c2"), hdr(reply.HeaderReplyTo, "redis:inlet.7"), hdr(reply.HeaderDeadline, ms),
		}, want: Request{ID: "c2", Service: "svc", Deadline: deadline, Body: []byte("body"),
			ReplyTo: reply.Address{Kind: "redis", Name: "inlet.7"}}},
		{name: "no id", headers: without(reply.HeaderCorrelationID), wantErr: "no inlet-correlation-id"},
		{name: "no reply-to", key: "c1", headers: without(reply.HeaderReplyTo), wantErr: "no inlet-reply-to"},
		{name: "bad reply-to", key: "c1", headers: with(reply.HeaderReplyTo, "nats:x"), wantErr: "want kafka:<topic> or redis:<channel>"},
		{name: "empty reply-to name", key: "c1", headers: with(reply.HeaderReplyTo, "kafka:"), wantErr: "want kafka:<topic>"},
		{name: "no deadline", key: "c1", headers: without(reply.HeaderDeadline), wantErr: "no inlet-deadline"},
		{name: "bad deadline", key: "c1", headers: with(reply.HeaderDeadline, "2026-01-01"), wantErr: "want Unix milliseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &kgo.Record{Key: []byte(tt.key), Value: []byte("body"), Headers: tt.headers}
			if tt.key == "" {
				r.Key = nil
			}
			got, err := parseRequest(r, "svc")
			if tt.wantErr != "" {
				if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want malformed: ...%s...", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReplyHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rep  reply.Reply
		want map[string]string
	}{
		{"ok", reply.Reply{ID: "c1", Status: 201, ContentType: "text/plain", Body: []byte("x")},
			map[string]string{"inlet-correlation-id": "c1", "inlet-status": "201", "content-type": "text/plain"}},
		{"no content type", reply.Reply{ID: "c2", Status: 200},
			map[string]string{"inlet-correlation-id": "c2", "inlet-status": "200"}},
		{"error", reply.Reply{ID: "c3", Status: 502, Err: "boom"},
			map[string]string{"inlet-correlation-id": "c3", "inlet-status": "502", "inlet-error": "boom"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			for _, h := range replyHeaders(tt.rep) {
				got[h.Key] = string(h.Value)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("headers %v, want %v", got, tt.want)
			}
		})
	}
}

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
		}
		body := req.Service + " " + req.Query + " " + req.Headers.Get("X-Trace-Id") + " " + string(req.Body)
		return reply.Reply{ContentType: req.ContentType, Body: []byte(body)}, nil
	}
	hs := startWorker(t, h, nil)
	m := hs.cfg.Metrics
	later := time.Now().Add(10 * time.Second)

	hs.send("ok", later, []byte("hello"), hdr(reply.HeaderContentType, "text/x-hello"), hdr(reply.HeaderQuery, "q=1"),
		hdr("http-x-trace-id", "tr-9"), hdr(reply.HeaderService, "named"))
	hs.send("fail", later, []byte("fail"))
	hs.send("panic", later, []byte("panic"))
	hs.send("teapot", later, []byte("teapot"))
	hs.send("bad-status", later, []byte("bad status"))
	hs.send("expired", time.Now().Add(-time.Second), []byte("hello"))
	hs.send("late", time.Now().Add(time.Second), []byte("slow"))
	// Malformed: no reply address, no deadline, nothing at all.
	if err := hs.cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: hs.cfg.Topic, Key: []byte("m1"), Headers: []kgo.RecordHeader{hdr(reply.HeaderCorrelationID, "m1")}},
		&kgo.Record{Topic: hs.cfg.Topic, Key: []byte("m2"), Headers: []kgo.RecordHeader{
			hdr(reply.HeaderCorrelationID, "m2"), hdr(reply.HeaderReplyTo, "kafka:"+hs.replyTopic)}},
		&kgo.Record{Topic: hs.cfg.Topic, Value: []byte("junk")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	got := hs.replies(5, 10*time.Second)
	want := map[string]gotReply{
		"ok":         {id: "ok", status: "200", contentType: "text/x-hello", body: "named q=1 tr-9 hello"},
		"fail":       {id: "fail", status: "502", err: "database unreachable"},
		"panic":      {id: "panic", status: "502", err: "worker: handler panicked: bad handler"},
		"teapot":     {id: "teapot", status: "418", contentType: "text/plain", body: "short and stout"},
		"bad-status": {id: "bad-status", status: "502", err: "worker: handler answered invalid status 1000"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replies:\n got %+v\nwant %+v", got, want)
	}
	// The late request's handler ends at its deadline; wait for it.
	waitFor(t, 5*time.Second, func() bool { return testutil.ToFloat64(m.Late) == 1 })
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
		"handled":         {testutil.ToFloat64(m.Handled), 6 + float64(hs.warm)},
		"errors":          {testutil.ToFloat64(m.Errors), 4}, // fail, panic, bad status, late
		"skipped_expired": {testutil.ToFloat64(m.SkippedExpired), 1},
		"late":            {testutil.ToFloat64(m.Late), 1},
		"malformed":       {testutil.ToFloat64(m.Malformed), 3},
		"reply_failures":  {testutil.ToFloat64(m.ReplyFailures), 0},
		"in_flight":       {testutil.ToFloat64(m.InFlight), 0},
	} {
		// Warm-ups sent before the worker had its partitions were never seen.
		if name == "handled" {
			if c.got < 7 || c.got > c.want {
				t.Errorf("handled = %v, want 7..%v", c.got, c.want)
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
		recs[i] = requestRecord(hs.cfg.Topic, fmt.Sprintf("r%d", i), "kafka:"+hs.replyTopic, time.Now().Add(20*time.Second), []byte("x"))
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
	if got := hs.replies(1, 5*time.Second)["slow"]; got.body != "slow" || got.status != "200" {
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
	if got := hs.replies(1, 5*time.Second)["stuck"]; got.status != "502" || got.err != "cancelled" {
		t.Errorf("reply %+v, want 502 cancelled", got)
	}
}

// TestRunRedisReply publishes replies addressed redis:<channel> to a real
// Redis, encoded with reply.Marshal.
func TestRunRedisReply(t *testing.T) {
	t.Parallel()
	addr := testRedis(t)
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
	channel := "inlet-test." + unique(t)
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	hs.sendTo("r1", "redis:"+channel, time.Now().Add(10*time.Second), []byte(`"hi"`))
	hs.sendTo("r2", "redis:"+channel, time.Now().Add(10*time.Second), []byte("fail"))
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
	hs.sendTo("r1", "redis:nowhere", time.Now().Add(10*time.Second), []byte("x"))
	waitFor(t, 10*time.Second, func() bool { return testutil.ToFloat64(hs.cfg.Metrics.ReplyFailures) == 1 })
}

func TestRunFailsFast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Run(ctx, Config{Service: "x"}, Echo(0, 0)); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("no brokers: %v", err)
	}
	if err := Run(ctx, Config{Brokers: []string{"127.0.0.1:9"}, Service: "x"}, nil); err == nil {
		t.Error("nil handler accepted")
	}
	brokers := testBrokers(t)
	err := Run(ctx, Config{Brokers: brokers, Service: "x", RedisAddr: "127.0.0.1:9"}, Echo(0, 0))
	if err == nil || !strings.Contains(err.Error(), "pinging redis") {
		t.Errorf("unreachable Redis: %v", err)
	}
}

func waitFor(tb testing.TB, timeout time.Duration, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met in %v", timeout)
		}
	}
}
