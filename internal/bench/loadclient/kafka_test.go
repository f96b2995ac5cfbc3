package loadclient

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/testkit"
)

var kafkaTopics atomic.Int64

func kafkaTarget(tb testing.TB, brokers []string, mod func(*KafkaConfig)) (*Kafka, KafkaConfig) {
	tb.Helper()
	cfg := DefaultKafkaConfig()
	cfg.Brokers, cfg.InFlight = brokers, 16
	cfg.Topic = fmt.Sprintf("bench-%s-%d-%d", strings.NewReplacer("/", "-", " ", "-", "=", "-").Replace(tb.Name()), time.Now().UnixNano()%1e9, kafkaTopics.Add(1))
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := NewKafka(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(k.Close)
	return k, cfg
}

// readTopic reads want records of topic from its start, or what came
// within timeout.
func readTopic(tb testing.TB, brokers []string, topic string, want int, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func TestBenchKafkaProduce(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	cases := []struct {
		acks, compression string
		size              int
	}{
		{"all", "none", 100},
		{"all", "zstd", 1000},
		{"1", "lz4", 100},
		{"0", "snappy", 10}, // smaller than the header: letters only
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("acks=%s/%s/%dB", tc.acks, tc.compression, tc.size), func(t *testing.T) {
			t.Parallel()
			k, cfg := kafkaTarget(t, brokers, func(c *KafkaConfig) {
				c.Acks, c.Compression, c.RecordBytes, c.Linger = tc.acks, tc.compression, tc.size, time.Millisecond
			})
			rep, err := bench.RunCount(context.Background(), closedLoop(cfg.InFlight, 0, 0), 50, 300, k.Do)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != 300 || rep.OK != 300 || rep.Status[StatusAcked] != 300 || len(rep.Errors) != 0 || rep.WarmupRequests != 50 {
				t.Fatalf("%d requests, %d ok, %d in the warmup, statuses %v, errors %v", rep.Requests, rep.OK, rep.WarmupRequests, rep.Status, rep.Errors)
			}
			if rep.BytesSent != int64(300*tc.size) || rep.EventsOK != 300 || rep.Latency.Count != 300 || rep.Latency.P50 <= 0 {
				t.Errorf("sent %d bytes, %d events ok, latency %+v", rep.BytesSent, rep.EventsOK, rep.Latency)
			}
			recs := readTopic(t, brokers, cfg.Topic, 350, 20*time.Second)
			if len(recs) != 350 {
				t.Fatalf("read %d records back, want 350", len(recs))
			}
			for _, r := range recs {
				letters := r.Value
				if len(letters) >= KafkaHeaderBytes {
					run, _, _ := parseHeader(r.Value)
					if run != k.run {
						t.Fatalf("record of another run: %x", r.Value[:KafkaHeaderBytes])
					}
					letters = letters[KafkaHeaderBytes:]
				}
				if len(r.Value) != tc.size || strings.Trim(string(letters), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
					t.Fatalf("value %q: want %d bytes, capital letters after the header", r.Value, tc.size)
				}
			}
		})
	}
}

func TestBenchKafkaEndToEnd(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	k, cfg := kafkaTarget(t, brokers, func(c *KafkaConfig) { c.E2E = true })
	// Another producer's records on the topic are not this run's.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: cfg.Topic, Value: []byte("not a bench record")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rep := run(t, openLoop(200, 16, 100*time.Millisecond, 500*time.Millisecond), k.Do)
	if rep.Requests != 100 || rep.OK != 100 || rep.Status[StatusConsumed] != 100 || rep.Dropped != 0 {
		t.Fatalf("%d requests, %d ok, %d dropped, statuses %v, errors %v", rep.Requests, rep.OK, rep.Dropped, rep.Status, rep.Errors)
	}
	if !strings.Contains(k.String(), "end-to-end") || rep.Latency.P50 <= 0 || rep.Latency.Max > 5000 {
		t.Errorf("%s: latency %+v", k, rep.Latency)
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.Stats().Stray < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := k.Stats(); st.Consumed != 120 || st.Stray != 1 {
		t.Errorf("consumer stats %+v: want 120 consumed (warmup included), 1 stray", st)
	}
}

func TestBenchKafkaUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := DefaultKafkaConfig()
	cfg.Brokers = []string{addr}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := NewKafka(ctx, cfg); err == nil || !strings.Contains(err.Error(), "reaching Kafka at "+addr) {
		t.Fatalf("NewKafka: %v", err)
	}
}

func TestBenchKafkaConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultKafkaConfig()
	ok.Brokers = []string{"127.0.0.1:9092"}
	cases := []struct {
		name string
		mod  func(*KafkaConfig)
		want string
	}{
		{"default", func(*KafkaConfig) {}, ""},
		{"no brokers", func(c *KafkaConfig) { c.Brokers = nil }, "no Kafka brokers"},
		{"no topic", func(c *KafkaConfig) { c.Topic = "" }, "no topic"},
		{"acks", func(c *KafkaConfig) { c.Acks = "-1" }, `acks "-1"`},
		{"compression", func(c *KafkaConfig) { c.Compression = "brotli" }, `compression "brotli"`},
		{"huge record", func(c *KafkaConfig) { c.RecordBytes = 2 << 20 }, "record size"},
		{"e2e small record", func(c *KafkaConfig) { c.E2E, c.RecordBytes = true, 10 }, "at least"},
		{"linger", func(c *KafkaConfig) { c.Linger = -time.Second }, "linger"},
		{"in flight", func(c *KafkaConfig) { c.InFlight = 0 }, "in flight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
