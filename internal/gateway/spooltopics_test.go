package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestReadyzShowsEachTopicsForwarder: with --ack spool and Kafka out of
// reach, the events wait in the spool; /readyz stays ready and lists the
// topic with its forwarder state and the age of its oldest record, and
// /metrics has them by topic.
func TestReadyzShowsEachTopicsForwarder(t *testing.T) {
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, topic) // nothing listens there
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 500 * time.Millisecond
	g, err := gateway.Start(cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		g.Shutdown(ctx)
	}()
	base := "http://" + g.Addr()
	for i := range 3 {
		if r := testkit.Do(t, "POST", base+"/v1/track", []byte(fmt.Sprintf(`{"event":"e","id":"r%d"}`, i)), "Content-Type", "application/json"); r.Status != 200 {
			t.Fatalf("spooling: %s", r)
		}
	}
	var rd gateway.Readiness
	testkit.WaitFor(t, 20*time.Second, "the topic's forwarder waiting on Kafka", func() bool {
		var status int
		status, rd = getReady(t, base)
		if status != 200 || rd.Spool == nil || len(rd.Spool.Topics) != 1 {
			return false
		}
		ts := rd.Spool.Topics[0]
		return ts.Topic == topic && ts.Forwarder != "idle" && ts.OldestUnforwardedSeconds > 0
	})
	if rd.Spool.Forwarder != rd.Spool.Topics[0].Forwarder {
		t.Fatalf("forwarder %q, its only topic's %q", rd.Spool.Forwarder, rd.Spool.Topics[0].Forwarder)
	}
	m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body)
	for _, want := range []string{
		fmt.Sprintf(`inlet_spool_topic_oldest_unforwarded_seconds{topic=%q}`, topic),
		fmt.Sprintf(`inlet_spool_topic_forwarder_state{state=%q,topic=%q} 1`, rd.Spool.Topics[0].Forwarder, topic),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
