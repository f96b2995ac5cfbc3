package kafka

import (
	"strings"
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
