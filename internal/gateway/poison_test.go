package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/spool"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestDeadLetterRefused: a spooled event Kafka refused for good goes to
// the dead-letter topic whole, keyed as it was, with Kafka's reason; a
// dead-letter record refused for good is handed back (the spool parks it).
func TestDeadLetterRefused(t *testing.T) {
	brokers := testkit.DevBroker(t, "")
	cfg := DefaultConfig()
	cfg.Ingest.Topic = testkit.Unique(t, "events-")
	kc := cfg.Kafka
	kc.Brokers, kc.Compression = brokers, "none"
	p, err := kafka.NewProducer(kc, testkit.Logger(t), kafka.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	}()
	g := &Gateway{cfg: cfg, prod: p}
	fc := g.forwarderConfig()
	cause := fmt.Errorf("producing to kafka: %w", kerr.MessageTooLarge)
	if !fc.Permanent(cause) || fc.Permanent(errors.New("broker unavailable")) {
		t.Fatal("Permanent does not follow kafka.IsPermanent")
	}
	value := []byte(`{"event":"big","id":"e1","props":{"s":"` + strings.Repeat("x", 300) + `"}}`)
	e := spool.Entry{Seq: 7, AppendedAt: time.Now(), Record: event.Record{
		Topic: cfg.Ingest.Topic, Key: []byte("user-1"), Value: value, EventID: "e1",
		Headers: []event.Header{{Key: event.HeaderEventID, Value: []byte("e1")}, {Key: event.HeaderEventName, Value: []byte("big")}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fc.Poison(ctx, e, cause); err != nil {
		t.Fatal(err)
	}
	got := testkit.ConsumeN(t, brokers, cfg.Ingest.Topic+".invalid", 1, 0)[0]
	if string(got.Value) != string(value) || got.Key != "user-1" || got.Headers[event.HeaderReason] != reasonKafkaRefused ||
		!strings.Contains(got.Headers[event.HeaderError], "MESSAGE_TOO_LARGE") || got.Headers[event.HeaderEventID] != "e1" {
		t.Fatalf("dead letter %+v", got)
	}
	dl := e
	dl.Record.Topic = cfg.Ingest.Topic + ".invalid"
	if err := fc.Poison(ctx, dl, cause); !errors.Is(err, kerr.MessageTooLarge) || !fc.Permanent(err) {
		t.Fatalf("a dead letter refused for good: %v, want its cause back, permanent", err)
	}
}
