package kafka

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
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

// newAdmin is an admin client on brokers, closed at the end of the test.
func newAdmin(tb testing.TB, brokers []string) *kadm.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// topicID is topic's ID, or zero when there is no such topic.
func topicID(tb testing.TB, adm *kadm.Client, topic string) kadm.TopicID {
	tb.Helper()
	d, err := adm.ListTopics(ctxFor(tb, 5*time.Second), topic)
	if err != nil {
		tb.Fatal(err)
	}
	if td, ok := d[topic]; ok && td.Err == nil {
		return td.ID
	}
	return kadm.TopicID{}
}

// recreate deletes topic and creates it again, with a new ID. A producer's
// metadata request may create it again first (auto-creation): that is a
// recreation too.
func recreate(tb testing.TB, adm *kadm.Client, topic string) {
	tb.Helper()
	old := topicID(tb, adm, topic)
	if _, err := adm.DeleteTopic(ctxFor(tb, 20*time.Second), topic); err != nil {
		tb.Fatal(err)
	}
	testkit.WaitFor(tb, 20*time.Second, "topic recreated with a new ID", func() bool {
		id := topicID(tb, adm, topic)
		if id == (kadm.TopicID{}) {
			r, err := adm.CreateTopic(ctxFor(tb, 20*time.Second), 1, 1, nil, topic)
			if err == nil && r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				tb.Logf("creating topic %s again: %v", topic, r.Err)
			}
			return false
		}
		return id != old
	})
}

// TestTopicRecreated: after the topic a producer produced to is deleted and
// created again (a new topic ID), produces fail with UNKNOWN_TOPIC_ID, the
// producer forgets the topic, and produces succeed again within a bound,
// without a new producer. Every record acknowledged after the recreation is
// in the new topic.
func TestTopicRecreated(t *testing.T) {
	t.Parallel()
	brokers := realBrokers(t)
	adm := newAdmin(t, brokers)
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

	recreate(t, adm, topic)

	start := time.Now()
	var sawUnknownID bool
	acked := 0
	for {
		err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 5))
		if err == nil {
			acked += 5
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
	if err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 5)); err != nil {
		t.Fatalf("a produce after recovery: %v", err)
	}
	acked += 5
	if sawUnknownID && testutil.ToFloat64(p.metrics.TopicResets) == 0 {
		t.Errorf("UNKNOWN_TOPIC_ID without a topic reset counted")
	}
	if h := p.Health(); h.Failing != 0 {
		t.Errorf("health after success: %+v", h)
	}
	testkit.ConsumeN(t, brokers, topic, acked, 300*time.Millisecond)
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
	for {
		err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 5))
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
	if err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 5)); err != nil {
		t.Fatalf("a produce after recovery: %v", err)
	}
	testkit.ConsumeN(t, k.Brokers, topic, 10, 300*time.Millisecond)
}
