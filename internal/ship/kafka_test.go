package ship

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
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
	cfg := testConfig(func(c *Config) { c.Brokers, c.Topic, c.BatchSize, c.StopTimeout = brokers, topic, 10, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	err := Run(ctx, cfg, strings.NewReader(lines(0, 20)), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 45 s (%v): it sends batches Kafka refuses for good again and again", err)
	}
	if err == nil || !strings.Contains(err.Error(), "for good") || !strings.Contains(err.Error(), "INVALID_RECORD") || !strings.Contains(err.Error(), "of 20 lines read were not acknowledged") {
		t.Fatalf("ship: %v; want Kafka's refusal for good, with the count of the lines not acknowledged", err)
	}
}

// TestShipTopicLimitBelowBatch: ship to a topic whose
// max.message.bytes (4096) is below a batch of its lines (10 x 1 KB) and
// below one line (5 KB). Ship must end: the small lines delivered, the
// line too large alone counted as rejected; not retry the same batch for ever.
func TestShipTopicLimitBelowBatch(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-small-")
	testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "4096"})
	var in strings.Builder
	for i := 0; i < 30; i++ {
		if i == 17 {
			in.WriteString(rndText(5000) + "\n")
		}
		fmt.Fprintf(&in, "%04d %s\n", i, rndText(1000))
	}
	cfg := testConfig(func(c *Config) { c.Brokers, c.Topic, c.BatchSize, c.StopTimeout = brokers, topic, 10, time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	start := time.Now()
	err := Run(ctx, cfg, strings.NewReader(in.String()), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 45s (%v): it retries the batch Kafka refuses as too large for ever", err)
	}
	t.Logf("ship ended after %v: %v", time.Since(start), err)
	if err == nil || !strings.Contains(err.Error(), "1 rejected") {
		t.Errorf("ship: %v; want the one line too large counted as rejected", err)
	}
	got := testkit.ConsumeN(t, brokers, topic, 30, 300*time.Millisecond)
	next := 0
	for _, r := range got {
		var ev struct {
			Props struct{ Line string } `json:"props"`
		}
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.SplitN(ev.Props.Line, " ", 2)[0])
		switch {
		case err != nil:
			t.Fatalf("record %q", ev.Props.Line[:min(20, len(ev.Props.Line))])
		case n == next:
			next++
		case n > next:
			t.Fatalf("line %d arrived where %d was due", n, next)
		}
	}
	if next != 30 {
		t.Errorf("lines 0..%d arrived in order; want 0..29", next-1)
	}
}

func rndText(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rand.IntN(26))
	}
	return string(b)
}

// TestShipLineJustUnderTheLimit: a line whose event is 1,000,000
// bytes, under KafkaSink's 1,000,012 check but over franz-go's batch limit
// once the batch's own 70-odd bytes are added: ship must end (the line
// delivered or counted as rejected), on a topic with Kafka's defaults.
func TestShipLineJustUnderTheLimit(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-edge-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	cfg := testConfig(func(c *Config) { c.Brokers, c.Topic, c.BatchSize, c.StopTimeout = brokers, topic, 10, time.Second })
	e := newLineEncoder(cfg)
	over := len(e.encode([]byte("x"), "")) - 1
	line := rndText(1_000_000 - over)
	if n := len(e.encode([]byte(line), "")); n != 1_000_000 {
		t.Fatalf("event of %d bytes", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, cfg, strings.NewReader("a\n"+line+"\nb\n"), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 30s (%v)", err)
	}
	if err != nil && !strings.Contains(err.Error(), "1 of 3 lines read were not acknowledged (1 rejected)") {
		t.Fatalf("ship: %v; want all delivered, or only the large line rejected", err)
	}
}

// TestShipKafkaKey: straight to Kafka, --key is the records' key (as
// inlet makes the anon_id the key), so one key keeps one partition;
// without --key the records have none and go to partition 0.
func TestShipKafkaKey(t *testing.T) {
	brokers := testkit.Brokers(t)
	for _, key := range []string{"web-7", ""} {
		topic := testkit.Unique(t, "ship-key-")
		testkit.CreateTopic(t, brokers, topic, 3, nil)
		cfg := testConfig(func(c *Config) { c.Brokers, c.Topic, c.Key, c.StopTimeout = brokers, topic, key, time.Second })
		if err := Run(context.Background(), cfg, strings.NewReader(lines(0, 5)), testkit.Logger(t)); err != nil {
			t.Fatal(err)
		}
		for _, r := range testkit.ConsumeN(t, brokers, topic, 5, 0) {
			if string(r.Key) != key || key == "" && r.Partition != 0 {
				t.Fatalf("--key %q: record key %q, partition %d; want key %q (partition 0 without one)", key, r.Key, r.Partition, key)
			}
		}
	}
}
