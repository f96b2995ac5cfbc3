package app

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestShipKafkaRefusesForGood: a topic that refuses every batch for good
// (compacted, and ship's records have no key: INVALID_RECORD) ends ship
// at once with an error that says so and counts the lines not
// acknowledged, rather than sending the same batches again for ever.
func TestShipKafkaRefusesForGood(t *testing.T) {
	if os.Getenv("INLET_TEST_BROKERS") == "" {
		t.Skip("needs a real Kafka (make test): the development broker does not refuse keyless records on a compacted topic")
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-compact-")
	testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"cleanup.policy": "compact"})
	cfg := parseShip(t, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--batch-size", "10", "--stop-timeout", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	err := Ship(ctx, cfg, strings.NewReader(lines(0, 20)), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 45 s (%v): it sends batches Kafka refuses for good again and again", err)
	}
	if err == nil || !strings.Contains(err.Error(), "for good") || !strings.Contains(err.Error(), "INVALID_RECORD") || !strings.Contains(err.Error(), "of 20 lines read were not acknowledged") {
		t.Fatalf("ship: %v; want Kafka's refusal for good, with the count of the lines not acknowledged", err)
	}
}
