package kafka

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestCheckLimits: CheckLimits warns when the largest event could be
// larger than the topic (or, for a topic not created yet, the brokers, or
// the producer's batch) takes, and only then.
func TestCheckLimits(t *testing.T) {
	t.Parallel()
	brokers := realBrokers(t)
	small := testkit.Unique(t, "limits-small-")
	testkit.CreateTopic(t, brokers, small, 1, map[string]string{"max.message.bytes": "8192"})
	plain := testkit.Unique(t, "limits-plain-")
	testkit.CreateTopic(t, brokers, plain, 1, nil)
	p := testProducer(t, brokers, nil)
	big := testProducer(t, brokers, func(c *Config) { c.BatchMaxBytes = 16 << 20 })
	cases := []struct {
		name     string
		p        *Producer
		topic    string
		maxEvent int
		want     string // in the warning; "" for none
	}{
		{"small topic, small events", p, small, 4 << 10, ""},
		{"small topic, larger events", p, small, 32 << 10, "takes records up to 8192 bytes (its max.message.bytes)"},
		{"default topic", p, plain, 32 << 10, ""},
		{"default topic, events over a MiB", big, plain, 2 << 20, "max.message.bytes"},
		{"events over the producer's batch", p, plain, 1 << 20, "the producer's batch limit"},
		{"topic not created yet", big, testkit.Unique(t, "limits-absent-"), 2 << 20, "the brokers' message.max.bytes"},
		{"topic not created yet, small events", big, testkit.Unique(t, "limits-absent-"), 32 << 10, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := tc.p.CheckLimits(ctxFor(t, 10*time.Second), tc.topic, tc.maxEvent)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && w != "" || tc.want != "" && !strings.Contains(w, tc.want) {
				t.Fatalf("warning %q, want %q", w, tc.want)
			}
		})
	}
}

// TestBatchLimit: BatchLimit is the smallest max.message.bytes of the
// topics; with BatchMaxBytes set to it, a record too large for the topic
// fails alone, and the records produced with it, in the same partition at
// the same time, are all delivered (with a larger batch limit the broker
// refuses whole batches, failing records that only shared one with it).
func TestBatchLimit(t *testing.T) {
	t.Parallel()
	brokers := realBrokers(t)
	small := testkit.Unique(t, "batchlimit-small-")
	testkit.CreateTopic(t, brokers, small, 1, map[string]string{"max.message.bytes": "8192"})
	plain := testkit.Unique(t, "batchlimit-plain-")
	testkit.CreateTopic(t, brokers, plain, 1, nil)
	for _, tc := range []struct {
		topics []string
		want   int32
	}{
		{[]string{small}, 8192},
		{[]string{plain, small}, 8192},
		{[]string{plain}, 1048588}, // Kafka's default
	} {
		got, err := BatchLimit(ctxFor(t, 10*time.Second), brokers, Security{}, tc.topics...)
		if err != nil || got != tc.want {
			t.Errorf("BatchLimit(%v) = %d, %v; want %d", tc.topics, got, err, tc.want)
		}
	}

	limit, err := BatchLimit(ctxFor(t, 10*time.Second), brokers, Security{}, small)
	if err != nil {
		t.Fatal(err)
	}
	p := testProducer(t, brokers, func(c *Config) {
		c.BatchMaxBytes = limit
		c.Compression = "none"
		c.Linger = 20 * time.Millisecond // the records share batches
	})
	recs := records(small, 60)
	for i := range recs {
		recs[i].Value = append(recs[i].Value, strings.Repeat("x", 400)...) // 60 x 400 bytes: several batches' worth
	}
	const bad = 30
	recs[bad].Value = []byte(strings.Repeat("y", 10<<10)) // over the topic's 8192
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i := range recs {
		wg.Add(1)
		if err := p.ProduceFunc(&recs[i], func(err error) { errs[i] = err; wg.Done() }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if !IsTooLarge(errs[bad]) || !IsPermanent(errs[bad]) {
		t.Fatalf("the record over the topic's limit: %v", errs[bad])
	}
	failed := 0
	for i, err := range errs {
		if i != bad && err != nil {
			failed++
			t.Logf("record %d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d records failed with the one too large", failed)
	}
	testkit.ConsumeN(t, brokers, small, len(recs)-1, 300*time.Millisecond)
}
