package kafka

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestTopicReadyLearnsPartitions: once TopicReady returns nil, the
// producing client knows every partition of the topic and its leader, so
// that the first records do not wait in its buffer for a metadata round
// trip. The probe record that taught it is not sent, not counted as a
// failed record, not a failure for health, and later records go out as
// usual.
func TestTopicReadyLearnsPartitions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		brokers func(testing.TB) []string
	}{
		{"dev broker", func(tb testing.TB) []string { return testkit.DevBroker(tb, "") }},
		{"kafka", realBrokers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokers := tc.brokers(t)
			topic := testkit.Unique(t, "ready-")
			const partitions = 3
			testkit.CreateTopic(t, brokers, topic, partitions, nil)
			p := testProducer(t, brokers, nil)
			if leader, _, _ := p.Client().PartitionLeader(topic, 0); leader >= 0 {
				t.Fatalf("the producer knows partition 0's leader (%d) before anything asked it to", leader)
			}

			ctx := ctxFor(t, 30*time.Second)
			var err error
			for {
				if err = p.TopicReady(ctxFor(t, 5*time.Second), topic); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // a new topic's leaders are being elected
			}
			if err != nil {
				t.Fatalf("TopicReady: %v", err)
			}
			for i := range int32(partitions) {
				if leader, _, err := p.Client().PartitionLeader(topic, i); leader < 0 || err != nil {
					t.Errorf("after TopicReady, the producer's partition %d: leader %d, %v", i, leader, err)
				}
			}
			if n := testutil.ToFloat64(p.metrics.RecordErrors); n != 0 {
				t.Errorf("record errors = %v after TopicReady; the probe is not a failed record", n)
			}
			if h := p.Health(); h.Failing != 0 {
				t.Errorf("health after TopicReady: %+v", h)
			}
			// kgo calls the probe's promise before it takes the probe out
			// of its buffer count, so TopicReady may return a moment
			// before the count drops (seen once in CI: 1 record). The
			// probe must leave the buffer, not wait in it.
			deadline := time.Now().Add(5 * time.Second)
			for p.Client().BufferedProduceRecords() != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := p.Client().BufferedProduceRecords(); n != 0 {
				t.Errorf("%d records buffered 5 s after TopicReady", n)
			}
			if err := p.TopicReady(ctxFor(t, 5*time.Second), topic); err != nil {
				t.Errorf("TopicReady once ready: %v", err)
			}

			recs := records(topic, 10)
			if err := p.ProduceSync(ctxFor(t, 10*time.Second), recs); err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ends, err := kadm.NewClient(cl).ListEndOffsets(ctxFor(t, 10*time.Second), topic)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
			if total != int64(len(recs)) {
				t.Errorf("topic holds %d records, want the %d produced: the probe was sent", total, len(recs))
			}
		})
	}
}

// TestTopicReadyWithoutProbe: a producer whose buffer could not hold a
// probe (MaxBufferedBytes at most the batch limit) is still ready, and
// learns the partitions from its first records as before.
func TestTopicReadyWithoutProbe(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	topic := testkit.Unique(t, "ready-small-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	p := testProducer(t, brokers, func(c *Config) { c.MaxBufferedBytes = int(c.BatchMaxBytes) })
	if err := p.TopicReady(ctxFor(t, 10*time.Second), topic); err != nil {
		t.Fatalf("TopicReady: %v", err)
	}
	if leader, _, _ := p.Client().PartitionLeader(topic, 0); leader >= 0 {
		t.Errorf("partition 0's leader is known (%d), without a probe", leader)
	}
	if err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 3)); err != nil {
		t.Fatal(err)
	}
}
