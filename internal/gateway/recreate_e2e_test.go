package gateway_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestTopicRecreatedWhileRunning: the events topic deleted and created
// again under a running gateway (a new topic ID, which franz-go refuses
// until the topic is purged from the client) costs at most some 503s with
// ack=kafka, and with ack=spool a delay: within a bound, without a
// restart, the gateway acknowledges again and every event acknowledged
// after the recreation is in the new topic.
func TestTopicRecreatedWhileRunning(t *testing.T) {
	t.Parallel()
	if os.Getenv("INLET_TEST_BROKERS") == "" {
		t.Skip("needs a real Kafka (INLET_TEST_BROKERS): the development broker has no topic IDs")
	}
	for _, ack := range []string{gateway.AckKafka, gateway.AckSpool} {
		t.Run(ack, func(t *testing.T) {
			t.Parallel()
			brokers := testkit.Brokers(t)
			topic := testkit.Unique(t, "recreated-")
			testkit.CreateTopic(t, brokers, topic, 1, nil)
			cfg := gatewaytest.Config(t, brokers, topic)
			cfg.Ack = ack
			cfg.Ingest.WriteTimeout = 5 * time.Second
			g := gatewaytest.Start(t, cfg)
			gatewaytest.Ready(t, g, 20*time.Second)
			base := "http://" + g.Addr()
			post := func(name string) testkit.Response {
				return testkit.Do(t, "POST", base+"/v1/batch", testkit.Batch(2, name, testkit.JSONArray), "Content-Type", "application/json")
			}
			if r := post("before"); r.Status != 200 {
				t.Fatalf("before: %s", r)
			}
			if ack == gateway.AckSpool { // forwarded before the topic goes
				testkit.ConsumeN(t, brokers, topic, 2, 0)
			}

			testkit.RecreateTopic(t, brokers, topic)
			start := time.Now()
			acked, refused := 0, 0
			for i := 0; acked < 10; i++ {
				r := post(fmt.Sprintf("after%d-", i))
				switch {
				case r.Status == 200:
					acked += 2
				case r.Status == 503 && ack == gateway.AckKafka:
					refused++
					// Kafka answers metadata requests, but takes no records:
					// readiness must say so (a ping alone said "ok").
					if rd := testkit.Do(t, "GET", base+"/readyz", nil); rd.Status != 503 || !strings.Contains(string(rd.Body), "produces failing") {
						t.Errorf("readyz while produces fail: %s", rd)
					}
				default:
					t.Fatalf("after the recreation: %s", r)
				}
				if time.Since(start) > 15*time.Second {
					t.Fatalf("still refusing %v after the topic was recreated: %s", time.Since(start), r)
				}
				if r.Status != 200 {
					time.Sleep(100 * time.Millisecond)
				}
			}
			// Every acknowledged event is in the new topic; duplicates may be
			// (a window the forwarder or the producer sent again after a
			// failure: at-least-once), events of the old topic may not.
			ids := func(rs []testkit.Record) map[string]int {
				m := map[string]int{}
				for _, r := range rs {
					id, _ := r.Fields["id"].(string)
					m[id]++
				}
				return m
			}
			got := testkit.Consume(t, brokers, topic, 30*time.Second, func(rs []testkit.Record) bool { return len(ids(rs)) >= acked })
			distinct := ids(got)
			for id := range distinct {
				if !strings.HasPrefix(id, "after") {
					t.Errorf("event %q of the old topic is in the new one", id)
				}
			}
			if len(distinct) < acked {
				t.Errorf("%d distinct events in the new topic, want the %d acknowledged", len(distinct), acked)
			}
			if rd := testkit.Do(t, "GET", base+"/readyz", nil); rd.Status != 200 {
				t.Errorf("readyz once produces succeed again: %s", rd)
			}
			t.Logf("%d events acknowledged after the recreation (%d requests refused before that) are in the new topic %v after it (%d records: %d duplicates)",
				len(distinct), refused, time.Since(start), len(got), len(got)-len(distinct))
		})
	}
}
