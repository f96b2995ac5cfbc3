package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestTopicShareAnswer: once a topic's records take its share of the
// producer's buffer (held here by a long linger, as Kafka not taking the
// topic would hold them), its requests get 503 with Retry-After naming the
// topic, at once, while /readyz stays 200 and shows the topic as full.
func TestTopicShareAnswer(t *testing.T) {
	t.Parallel()
	topic := testkit.Unique(t, "share-")
	cfg := gatewaytest.Config(t, testkit.DevBroker(t, ""), topic)
	cfg.Ack = gateway.AckNone // answered once buffered: the records stay
	cfg.Kafka.Linger = time.Minute
	cfg.Kafka.MaxBufferedRecords = 100 // a share of 45 records
	cfg.Ingest.RetryAfter = 3 * time.Second
	cfg.ShutdownTimeout = time.Second
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	gatewaytest.Ready(t, g, 20*time.Second)

	accepted := 0
	var r testkit.Response
	for range 50 {
		r = testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"a"}]`), "Content-Type", "application/json")
		if r.Status != http.StatusAccepted {
			break
		}
		accepted++
	}
	if accepted < 40 || accepted > 45 || r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "3" ||
		!strings.Contains(string(r.Body), `topic \"`+topic+`\" holds its share`) {
		t.Fatalf("after %d accepted: %s (Retry-After %q); want about 45, then 503 naming the topic", accepted, r, r.Header.Get("Retry-After"))
	}
	rr := testkit.Do(t, "GET", base+"/readyz", nil)
	var rd gateway.Readiness
	if err := json.Unmarshal(rr.Body, &rd); err != nil || rr.Status != 200 || !rd.Ready {
		t.Fatalf("readyz while one topic is full: %s", rr)
	}
	if pt := rd.ProducerTopics[topic]; pt.State != "full" || pt.RefusedRecords != 1 || pt.ShareRecords != 45 {
		t.Fatalf("readyz producer_topics[%s] = %+v, want full", topic, pt)
	}
	m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body)
	for _, want := range []string{
		`inlet_producer_topic_refused_records_total{producer="events",topic="` + topic + `"} 1`,
		`inlet_producer_topic_buffered_records{producer="events",topic="` + topic + `"} 4`, // 40-45
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s:\n%s", want, grepLines(m, "inlet_producer_topic_"))
		}
	}
}
