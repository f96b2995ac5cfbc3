package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
