package logship_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

func recordsEvents(recs []testkit.Record) []map[string]any {
	out := make([]map[string]any, len(recs))
	for i, r := range recs {
		out[i] = r.Fields
	}
	return out
}

func distinctIDs(n int) func([]testkit.Record) bool {
	return func(rs []testkit.Record) bool {
		ids := map[any]bool{}
		for _, r := range rs {
			if _, ok := props(r.Fields)["i"]; ok {
				ids[r.Fields["id"]] = true
			}
		}
		return len(ids) >= n
	}
}

// TestKafkaOutage: logging to Kafka straight while the broker (a private
// development broker: never the shared one) is down for 2 s: Handle stays
// fast, records spill, and after recovery all arrive in order, 0 lost.
func TestKafkaOutage(t *testing.T) {
	kafka := testkit.HaltableDevBroker(t)
	topic := testkit.Unique(t, "logship-")
	sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: kafka.Brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	h, err := logship.NewHandler(sink, logship.Options{SpillDir: t.TempDir(), QueueSize: 256,
		SendTimeout: time.Second, RetryBackoff: 50 * time.Millisecond, SyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	i := 0
	logFor := func(d time.Duration) (worst time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			for range 5 {
				t0 := time.Now()
				l.Info("record", "i", i)
				worst = max(worst, time.Since(t0))
				i++
			}
			time.Sleep(time.Millisecond)
		}
		return worst
	}
	logFor(300 * time.Millisecond)
	testkit.WaitFor(t, 20*time.Second, "the first records delivered", func() bool { return h.Stats().Sent > 0 })
	kafka.Halt()
	worst := logFor(2 * time.Second)
	st := h.Stats()
	kafka.Resume()
	logFor(300 * time.Millisecond)
	n := i
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records; during the outage: stats %+v, slowest Handle %v; after: %+v", n, st, worst, h.Stats())
	if st.Spilled == 0 {
		t.Errorf("nothing spilled during the outage: %+v", st)
	}
	if !raceEnabled && worst > 100*time.Millisecond {
		t.Errorf("a Handle took %v during the outage", worst)
	}
	recs := testkit.Consume(t, kafka.Brokers, topic, 30*time.Second, distinctIDs(n))
	if others := checkInOrder(t, recordsEvents(recs), n); len(others) != 0 {
		t.Errorf("unexpected events: %v", others)
	}
}

// TestThroughInlet: records through a real inlet arrive in order (one
// Key: one partition) and complete.
func TestThroughInlet(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "logship-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	c, err := client.New("http://" + g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	h, err := logship.NewHandler(logship.NewInletSink(c), logship.Options{Service: "svc", Key: "svc-1", BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	l := slog.New(h).With("run", strconv.Itoa(n))
	for i := range n {
		l.Info("record", "i", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed in %v: %+v", time.Since(t0), h.Stats())
	recs := testkit.Consume(t, brokers, topic, 30*time.Second, distinctIDs(n))
	checkInOrder(t, recordsEvents(recs), n)
	if ip, _ := recs[0].Fields["ip"].(string); !strings.HasPrefix(ip, "127.") {
		t.Errorf("not enriched by inlet: %s", recs[0].Value)
	}
}
