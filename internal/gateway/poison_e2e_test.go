package gateway_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestAckKafkaTooLargeForTopic: with ack=kafka, an event inlet accepts
// (under --max-event-bytes) but larger than its topic's max.message.bytes
// is answered 413 without Retry-After, not a 503 to retry forever; the
// events of the requests before and after it land.
func TestAckKafkaTooLargeForTopic(t *testing.T) {
	t.Parallel()
	if os.Getenv("INLET_TEST_BROKERS") == "" {
		t.Skip("needs a real Kafka (INLET_TEST_BROKERS): the development broker has no max.message.bytes per topic")
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "toolarge-")
	testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "4096"})
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 20*time.Second)
	base := "http://" + g.Addr()
	post := func(path string, body []byte) testkit.Response {
		return testkit.Do(t, "POST", base+path, body, "Content-Type", "application/json")
	}

	if r := post("/v1/batch", testkit.Batch(3, "before", testkit.JSONArray)); r.Status != 200 {
		t.Fatalf("small events: %s", r)
	}
	big := []byte(`{"event":"big","props":{"s":"` + strings.Repeat("x", 8<<10) + `"}}`)
	if len(big) >= cfg.Ingest.MaxEventBytes {
		t.Fatalf("the event (%d bytes) is not under --max-event-bytes (%d)", len(big), cfg.Ingest.MaxEventBytes)
	}
	r := post("/v1/track", big)
	if r.Status != 413 || r.Header.Get("Retry-After") != "" || !strings.Contains(string(r.Body), "MESSAGE_TOO_LARGE") {
		t.Fatalf("an event over the topic's max.message.bytes: %s (Retry-After %q), want 413 saying MESSAGE_TOO_LARGE without Retry-After",
			r, r.Header.Get("Retry-After"))
	}
	if r := post("/v1/batch", testkit.Batch(3, "after", testkit.JSONArray)); r.Status != 200 {
		t.Fatalf("small events after the large one: %s", r)
	}
	got := testkit.ConsumeN(t, brokers, topic, 6, 500*time.Millisecond)
	for _, rec := range got {
		if strings.Contains(string(rec.Value), `"big"`) {
			t.Errorf("the refused event is in Kafka")
		}
	}
	m := testkit.Do(t, "GET", base+"/metrics", nil)
	if want := `inlet_sink_errors_total{kind="too_large"} 1`; !strings.Contains(string(m.Body), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestAckSpoolTooLargeForTopic: with ack=spool, an event accepted (under
// --max-event-bytes) but larger than its topic's max.message.bytes does not
// block the spool: it goes to the dead-letter topic, cut to fit, with
// Kafka's reason, and the events spooled before and after it are delivered.
func TestAckSpoolTooLargeForTopic(t *testing.T) {
	t.Parallel()
	if os.Getenv("INLET_TEST_BROKERS") == "" {
		t.Skip("needs a real Kafka (INLET_TEST_BROKERS): the development broker has no max.message.bytes per topic")
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "toolarge-")
	testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "4096"})
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckSpool
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 20*time.Second)
	base := "http://" + g.Addr()
	post := func(path string, body []byte) testkit.Response {
		return testkit.Do(t, "POST", base+path, body, "Content-Type", "application/json")
	}

	if r := post("/v1/batch", testkit.Batch(3, "before", testkit.JSONArray)); r.Status != 200 {
		t.Fatalf("small events: %s", r)
	}
	big := []byte(`{"event":"big","props":{"s":"` + strings.Repeat("x", 8<<10) + `"}}`)
	if r := post("/v1/track", big); r.Status != 200 {
		t.Fatalf("a large event with ack=spool: %s, want 200 (spooled)", r)
	}
	if r := post("/v1/batch", testkit.Batch(3, "after", testkit.JSONArray)); r.Status != 200 {
		t.Fatalf("small events after the large one: %s", r)
	}
	// The window that held the refused record is sent again record by
	// record: what Kafka took of it the first time comes twice
	// (at-least-once), the refused record never.
	ids := map[string]bool{}
	testkit.Consume(t, brokers, topic, 30*time.Second, func(recs []testkit.Record) bool {
		for _, rec := range recs {
			if strings.Contains(string(rec.Value), `"big"`) {
				t.Fatalf("the refused event is in its topic")
			}
			ids[rec.Headers["inlet-event-id"]] = true
		}
		return len(ids) >= 6
	})
	for _, id := range []string{"before0", "before1", "before2", "after0", "after1", "after2"} {
		if !ids[id] {
			t.Errorf("event %s, spooled around the refused one, was not delivered", id)
		}
	}
	dl := testkit.ConsumeN(t, brokers, topic+".invalid", 1, 500*time.Millisecond)
	// The producer keeps its batches within both topics' limits (4096
	// here): the dead letter keeps what fits, and says it was cut.
	if v := string(dl[0].Value); !strings.HasPrefix(v, `{"event":"big"`) || len(v) > 4096 || dl[0].Headers["inlet-truncated"] != "true" {
		t.Errorf("dead letter of %d bytes, headers %v: want the start of the event, cut to fit 4096 bytes", len(v), dl[0].Headers)
	}
	if h := dl[0].Headers; h["inlet-reason"] != "kafka_refused" || !strings.Contains(h["inlet-error"], "MESSAGE_TOO_LARGE") {
		t.Errorf("dead letter headers %v: want the reason kafka_refused and Kafka's error", h)
	}
}
