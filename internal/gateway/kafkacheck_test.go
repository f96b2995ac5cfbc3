package gateway

import (
	"context"
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
