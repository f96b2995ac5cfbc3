package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func testProducer(tb testing.TB, brokers []string) *kafka.Producer {
	tb.Helper()
	cfg := kafka.DefaultConfig()
	cfg.Brokers = brokers
	cfg.DeliveryTimeout = time.Second // the least kgo takes
	p, err := kafka.NewProducer(cfg, testkit.Logger(tb), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// TestProduceFailing: failed produces make Kafka unready until a record is
// acknowledged or produceFailWindow passed; a record Kafka refuses for
// good does not.
func TestProduceFailing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := []event.Record{{Topic: "events", Value: []byte(`{"event":"a"}`)}}

	down := testProducer(t, []string{testkit.FreeAddr(t)})
	if why := produceFailing(down, time.Now()); why != "" {
		t.Fatalf("before any produce: %q", why)
	}
	if err := down.ProduceSync(ctx, rec); err == nil {
		t.Fatal("produced to nothing")
	}
	now := time.Now()
	if why := produceFailing(down, now); !strings.Contains(why, "1 records failed in a row") {
		t.Fatalf("after a failed produce: %q", why)
	}
	if why := produceFailing(down, now.Add(produceFailWindow+time.Second)); why != "" {
		t.Fatalf("a window after the last failure: %q", why)
	}

	up := testProducer(t, testkit.DevBroker(t, ""))
	big := []event.Record{{Topic: "events", Value: make([]byte, 2<<20)}} // over the batch limit
	if err := up.ProduceSync(ctx, big); !kafka.IsPermanent(err) {
		t.Fatalf("a record over the batch limit: %v", err)
	}
	if why := produceFailing(up, time.Now()); why != "" {
		t.Fatalf("after a record refused for good: %q", why)
	}
	if err := up.ProduceSync(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if why := produceFailing(up, time.Now()); why != "" {
		t.Fatalf("after an acknowledged record: %q", why)
	}
}

// TestProducerTopics: /readyz's producer_topics says which topic holds its
// share of the buffer (full) and which fails (failing), and the others
// are ok.
func TestProducerTopics(t *testing.T) {
	t.Parallel()
	cfg := kafka.DefaultConfig()
	cfg.Brokers = testkit.DevBroker(t, "")
	cfg.Linger = time.Minute // held until Close
	cfg.MaxBufferedRecords = 100
	p, err := kafka.NewProducer(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	recs := func(topic string, n int) []event.Record {
		r := make([]event.Record, n)
		for i := range r {
			r[i] = event.Record{Topic: topic, Value: []byte(`{"event":"a"}`)}
		}
		return r
	}
	if err := p.TryProduce(recs("a", 45)); err != nil {
		t.Fatal(err)
	}
	if err := p.TryProduce(recs("a", 1)); !errors.Is(err, kafka.ErrTopicFull) {
		t.Fatalf("a past its share: %v", err)
	}
	if err := p.TryProduce(recs("b", 3)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got := producerTopics(p, now)
	if a := got["a"]; a.State != "full" || a.BufferedRecords != 45 || a.ShareRecords != 45 || a.RefusedRecords != 1 || !strings.Contains(a.Error, "503") {
		t.Errorf("a: %+v", a)
	}
	if b := got["b"]; b.State != "ok" || b.BufferedRecords != 3 || b.Error != "" {
		t.Errorf("b: %+v", b)
	}
	if a := producerTopics(p, now.Add(produceFailWindow+time.Second))["a"]; a.State != "ok" {
		t.Errorf("a a window after its last refusal: %+v", a)
	}

	down := testProducer(t, []string{testkit.FreeAddr(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := down.ProduceSync(ctx, recs("c", 2)); err == nil {
		t.Fatal("produced to nothing")
	}
	if c := producerTopics(down, time.Now())["c"]; c.State != "failing" || !strings.Contains(c.Error, "2 records failed in a row") || c.BufferedRecords != 0 {
		t.Errorf("c: %+v", c)
	}
}
