package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// realBrokers returns the real Kafka of `make test`, or skips: the
// development broker has no topic IDs and no per-topic configs.
func realBrokers(tb testing.TB) []string {
	tb.Helper()
	if os.Getenv("INLET_TEST_BROKERS") == "" {
		tb.Skip("needs a real Kafka (INLET_TEST_BROKERS)")
	}
	return testkit.Brokers(tb)
}

// TestTopicRecreated: after the topic a producer produced to is deleted and
// created again (a new topic ID), produces fail with UNKNOWN_TOPIC_ID, the
// producer forgets the topic, and produces succeed again within a bound,
// without a new producer. Every record acknowledged after the recreation is
// in the new topic.
func TestTopicRecreated(t *testing.T) {
	t.Parallel()
	brokers := realBrokers(t)
	topic := testkit.Unique(t, "recreated-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	log, buf := testkit.NewLogBuffer()
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.DeliveryTimeout = 5 * time.Second
	p, err := newProducer(cfg, log, nil, kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	if err := p.ProduceSync(ctxFor(t, 20*time.Second), records(topic, 3)); err != nil {
		t.Fatal(err)
	}

	testkit.RecreateTopic(t, brokers, topic)

	start := time.Now()
	var sawUnknownID bool
	send, acked := attempts(t, p, topic)
	for {
		err := send()
		if err == nil {
			break
		}
		if errors.Is(err, kerr.UnknownTopicID) {
			sawUnknownID = true
		}
		if IsPermanent(err) {
			t.Fatalf("a recreated topic is permanent: %v", err)
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("still failing %v after the topic was recreated: %v\n%s", time.Since(start), err, buf)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("produces acknowledged again %v after the topic was recreated (saw UNKNOWN_TOPIC_ID: %v)", time.Since(start), sawUnknownID)
	if err := send(); err != nil {
		t.Fatalf("a produce after recovery: %v", err)
	}
	if sawUnknownID && testutil.ToFloat64(p.metrics.TopicResets) == 0 {
		t.Errorf("UNKNOWN_TOPIC_ID without a topic reset counted")
	}
	if h := p.Health(); h.Failing != 0 {
		t.Errorf("health after success: %+v", h)
	}
	got := checkAttempts(t, brokers, topic, acked)
	t.Logf("%d records in the new topic, %d of them acknowledged", len(got), len(acked))
}

// attempts returns send, which produces five records to topic through p,
// their values naming the attempt, and acked, the values of those p
// acknowledged: the records of a failed attempt may still be delivered
// (at-least-once), those of an acknowledged one must be.
func attempts(t *testing.T, p *Producer, topic string) (send func() error, acked map[string]bool) {
	acked = map[string]bool{}
	attempt := 0
	send = func() error {
		attempt++
		recs := records(topic, 5)
		for i := range recs {
			recs[i].Value = fmt.Appendf(nil, "attempt%d-v%d", attempt, i)
		}
		err := p.ProduceSync(ctxFor(t, 10*time.Second), recs)
		if err == nil {
			for _, r := range recs {
				acked[string(r.Value)] = true
			}
		}
		return err
	}
	return send, acked
}

// checkAttempts consumes topic until every acknowledged attempt's record
// is there, and fails the test for one that is not, or for a record that
// no attempt sent (the old topic's, or the wiped cluster's). It returns
// what it read.
func checkAttempts(t *testing.T, brokers []string, topic string, acked map[string]bool) []testkit.Record {
	t.Helper()
	got := testkit.Consume(t, brokers, topic, 30*time.Second, func(rs []testkit.Record) bool {
		seen := 0
		for _, r := range rs {
			if acked[string(r.Value)] {
				seen++
			}
		}
		return seen >= len(acked)
	})
	seen := map[string]bool{}
	for _, r := range got {
		if !strings.HasPrefix(string(r.Value), "attempt") {
			t.Errorf("record %q from before is in the new topic", r.Value)
		}
		seen[string(r.Value)] = true
	}
	for v := range acked {
		if !seen[v] {
			t.Errorf("acknowledged record %q is not in the new topic", v)
		}
	}
	return got
}

// TestBrokerWiped: a broker wiped and re-formatted at the same address (a
// new cluster: the topic is gone, then auto-created with a new ID, and the
// producer ID unknown) fails produces only until the producer forgot the
// topic; then they are acknowledged again, by the same producer, within a
// bound. Every record acknowledged after the wipe is in the new cluster.
func TestBrokerWiped(t *testing.T) {
	t.Parallel()
	k := testkit.PrivateKafka(t)
	topic := testkit.Unique(t, "wiped-")
	log, buf := testkit.NewLogBuffer()
	cfg := DefaultConfig()
	cfg.Brokers = k.Brokers
	cfg.DeliveryTimeout = 5 * time.Second
	p, err := newProducer(cfg, log, nil, kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	if err := p.ProduceSync(ctxFor(t, 30*time.Second), records(topic, 3)); err != nil {
		t.Fatal(err)
	}

	k.Wipe()
	start := time.Now()
	var last error
	send, acked := attempts(t, p, topic)
	for {
		err := send()
		if err == nil {
			break
		}
		last = err
		if IsPermanent(err) {
			t.Fatalf("a wiped broker is permanent: %v", err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("still failing %v after the broker was wiped: %v\n%s", time.Since(start), err, buf)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("produces acknowledged again %v after the broker was wiped (last failure: %v)", time.Since(start), last)
	if err := send(); err != nil {
		t.Fatalf("a produce after recovery: %v", err)
	}
	// Every acknowledged record is in the new cluster. A failed attempt
	// may have landed too (at-least-once: 14 records for 10 acknowledged
	// in one CI run), and none of the old cluster's can be there.
	checkAttempts(t, k.Brokers, topic, acked)
}
