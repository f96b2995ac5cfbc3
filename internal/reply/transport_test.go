package reply

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// waitReply returns what ch gets within 10 s.
func waitReply(tb testing.TB, ch <-chan Reply) Reply {
	tb.Helper()
	select {
	case rep := <-ch:
		return rep
	case <-time.After(10 * time.Second):
		tb.Fatal("no reply in 10 s")
		return Reply{}
	}
}

// TestKafkaTransport: replies on the reply topic reach their waiters; a
// malformed one with a correlation id ends its wait with an error (it was
// a 200 with an empty body when its status was not a number), and one
// without is only counted.
func TestKafkaTransport(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "inlet.replies.")
	router := NewRouter(10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := StartKafka(ctx, brokers, topic, router, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if a := tr.Address(); a != (Address{Kind: "kafka", Name: topic}) {
		t.Errorf("address %v", a)
	}
	if err := tr.Healthy(); err != nil {
		t.Errorf("healthy: %v", err)
	}
	ok, _ := router.Add("ok")
	bad, _ := router.Add("bad")
	defer router.Remove("ok")
	defer router.Remove("bad")

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	badStatus := ReplyRecord(topic, Reply{ID: "bad"})
	badStatus.Headers[1].Value = []byte("abc")
	if err := cl.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Value: []byte("no id")},
		badStatus,
		ReplyRecord(topic, Reply{ID: "ok", Status: 201, ContentType: "text/plain", Body: []byte("made")}),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := waitReply(t, ok); got.Status != 201 || got.ContentType != "text/plain" || string(got.Body) != "made" || got.Err != "" {
		t.Errorf("reply %+v", got)
	}
	if got := waitReply(t, bad); got.Err != `reply: malformed reply: inlet-status "abc": want a final HTTP status, 200 to 599 (or 0, meaning 200)` {
		t.Errorf("malformed reply delivered as %+v", got)
	}
	if n := testutil.ToFloat64(router.metrics.Malformed); n != 2 {
		t.Errorf("%v malformed, want 2", n)
	}
}

// TestRedisTransport: the same over Redis pub/sub.
func TestRedisTransport(t *testing.T) {
	t.Parallel()
	addr := testkit.Redis(t)
	channel := testkit.Unique(t, "inlet:replies:")
	router := NewRouter(10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := StartRedis(ctx, addr, channel, router, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if a := tr.Address(); a != (Address{Kind: "redis", Name: channel}) {
		t.Errorf("address %v", a)
	}
	if err := tr.Healthy(); err != nil {
		t.Errorf("healthy: %v", err)
	}
	ok, _ := router.Add("ok")
	bad, _ := router.Add("a")
	defer router.Remove("ok")
	defer router.Remove("a")

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, msg := range [][]byte{
		[]byte("junk"),
		{'R', 1, 1, 'a', 42, 0, 0}, // status 42
		Reply{ID: "ok", Status: 201, ContentType: "text/plain", Body: []byte("made")}.Marshal(),
	} {
		if err := rdb.Publish(ctx, channel, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := waitReply(t, ok); got.Status != 201 || got.ContentType != "text/plain" || string(got.Body) != "made" || got.Err != "" {
		t.Errorf("reply %+v", got)
	}
	if got := waitReply(t, bad); got.Err != "reply: malformed reply: status 42: want a final HTTP status, 200 to 599 (or 0, meaning 200)" {
		t.Errorf("malformed reply delivered as %+v", got)
	}
	if n := testutil.ToFloat64(router.metrics.Malformed); n != 2 {
		t.Errorf("%v malformed, want 2", n)
	}
}
