package kafka_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestTailAndKcat: the five events of a batch are shown by `inlet tail` and
// by kcat, a librdkafka client, enriched.
func TestTailAndKcat(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Kafka.Compression = "lz4" // the default: kcat, a librdkafka client, reads franz-go's lz4
	g := gatewaytest.Start(t, cfg)
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch",
		[]byte(`[{"event":"e1","uid":"u1"},{"event":"e2"},{"event":"e3"},{"event":"e4"},{"event":"e5","props":{"k":"v"}}]`),
		"Content-Type", "application/json")
	if r.Status != 200 || !strings.Contains(string(r.Body), `"accepted":5`) {
		t.Fatalf("batch: %s", r)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := kafka.Tail(ctx, kafka.TailConfig{Brokers: brokers, Topic: topic, From: "beginning", N: 5, Format: "json"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("tail printed %d lines, want 5:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"received_at":`) || !strings.Contains(l, `"ip":"127.0.0.1"`) || !strings.Contains(l, `"inlet-event-id":`) {
			t.Errorf("tail line lacks enrichment or headers: %s", l)
		}
	}

	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" {
			t.Fatal("kcat is not installed; scripts/kafka.sh installs it")
		}
		t.Skip("kcat not installed (make test installs it)")
	}
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", "%k|%h|%s\n")
	kout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, kout)
	}
	klines := strings.Split(strings.TrimSpace(string(kout)), "\n")
	if len(klines) != 5 {
		t.Fatalf("kcat printed %d records, want 5:\n%s", len(klines), kout)
	}
	names := map[string]bool{}
	for _, l := range klines {
		parts := strings.SplitN(l, "|", 3)
		if len(parts) != 3 || !strings.Contains(parts[1], "inlet-event-name=") || !strings.Contains(parts[2], `"received_at":`) {
			t.Errorf("kcat record without headers or enrichment: %s", l)
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(parts[2]), &v); err != nil {
			t.Errorf("kcat value is not JSON: %s", parts[2])
		}
		names[fmt.Sprint(v["event"])] = true
	}
	if len(names) != 5 {
		t.Errorf("kcat saw events %v, want e1..e5", names)
	}
}

// TestTailLastN: `inlet tail -n 3` prints the last 3 records of the topic
// (of all its partitions, oldest first) and exits, as tail -n does (it
// used to wait for 3 new ones); with -f it then prints new records.
func TestTailLastN(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "tail-last-")
	testkit.CreateTopic(t, brokers, topic, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// One at a time, each later than the last: the order to print.
			r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i)), Timestamp: time.Unix(1_700_000_000+int64(i), 0)}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 10)
	values := func(out string) []string {
		var vs []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var r struct{ Value json.RawMessage }
			if l != "" && json.Unmarshal([]byte(l), &r) == nil {
				vs = append(vs, string(r.Value))
			}
		}
		return vs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := kafka.Tail(ctx, kafka.TailConfig{Brokers: brokers, Topic: topic, From: "end", N: 3, Format: "json"}, &out, nil); err != nil || ctx.Err() != nil {
		t.Fatalf("tail -n 3: %v (context: %v)", err, ctx.Err())
	}
	if got := fmt.Sprint(values(out.String())); got != `[{"n":7} {"n":8} {"n":9}]` {
		t.Fatalf("tail -n 3 printed %s, want the last three, oldest first", got)
	}

	// -f: the last 2, then what arrives.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		done <- kafka.Tail(fctx, kafka.TailConfig{Brokers: brokers, Topic: topic, From: "end", N: 2, Follow: true, Format: "json"}, pw, nil)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var got []string
	for len(got) < 3 && lines.Scan() {
		got = append(got, values(lines.Text())...)
		if len(got) == 2 {
			produce(10, 11)
		}
	}
	stop()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil || fmt.Sprint(got) != `[{"n":8} {"n":9} {"n":10}]` {
		t.Fatalf("tail -n 2 -f printed %v (%v), want the last two, then the new one", got, err)
	}
}
