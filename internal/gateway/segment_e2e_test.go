package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestSegmentKafka: a Segment batch, gzipped, lands in Kafka in every ack
// mode as sent (every field, extra ones and nulls too), keyed by userId
// else anonymousId, its messageId in inlet-event-id, the enrichment in the
// inlet object; the malformed message is refused with its reason, and the
// answer is 200 (analytics-python takes nothing else) in every mode.
func TestSegmentKafka(t *testing.T) {
	brokers := testkit.Brokers(t)
	msgs := []string{
		`{"type":"track","event":"Order Completed","userId":"u1","messageId":"m-1","properties":{"total":1.50},"channel":"server","context":{"library":{"name":"analytics-python","version":"2.3.4"}},"timestamp":"2026-12-05T10:00:00Z","extra":null}`,
		`{"type":"identify","anonymousId":"a1","messageId":"m-2","traits":{"email":"a@example.com"}}`,
		`{"type":"track","userId":"u2","messageId":"m-3"}`,
	}
	body := []byte(`{"batch":[` + strings.Join(msgs, ",") + `],"sentAt":"2026-12-05T10:00:01Z"}`)
	for _, ack := range []string{gateway.AckKafka, gateway.AckSpool, gateway.AckNone} {
		t.Run(ack, func(t *testing.T) {
			t.Parallel()
			topic := testkit.Unique(t, "seg-")
			cfg := gatewaytest.Config(t, brokers, topic)
			cfg.Ack = ack
			g := gatewaytest.Start(t, cfg)
			gatewaytest.Ready(t, g, 30*time.Second)
			r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", testkit.Gzip(t, body),
				"Content-Type", "application/json", "Content-Encoding", "gzip",
				"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("any-key:")))
			if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"success":true,"accepted":2`) ||
				!strings.Contains(string(r.Body), `"index":2,"error":"a track needs \"event\"`) {
				t.Fatalf("answer %s: want 200, 2 accepted, message 2 refused for its event", r)
			}
			recs := testkit.ConsumeN(t, brokers, topic, 2, time.Second)
			byID := map[string]testkit.Record{}
			for _, rec := range recs {
				byID[rec.Headers["inlet-event-id"]] = rec
			}
			for i, want := range []struct{ id, key, name string }{{"m-1", "u1", "Order Completed"}, {"m-2", "a1", "identify"}} {
				rec, ok := byID[want.id]
				if !ok {
					t.Fatalf("no record with inlet-event-id %s in %v", want.id, recs)
				}
				if rec.Key != want.key || rec.Headers["inlet-event-name"] != want.name {
					t.Errorf("%s: key %q, name %q; want %q, %q", want.id, rec.Key, rec.Headers["inlet-event-name"], want.key, want.name)
				}
				v := string(rec.Value)
				if !strings.HasPrefix(v, msgs[i][:len(msgs[i])-1]+`,"inlet":{"received_at":"`) {
					t.Errorf("%s: value %s\nwant the message as sent, then the inlet object", want.id, v)
				}
				var f struct {
					Inlet map[string]any `json:"inlet"`
				}
				if err := json.Unmarshal(rec.Value, &f); err != nil || f.Inlet["ip"] != "127.0.0.1" || f.Inlet["timestamp"] == nil {
					t.Errorf("%s: inlet object %v (%v): want ip and timestamp", want.id, f.Inlet, err)
				}
			}
			if ts := byID["m-1"].Fields["inlet"].(map[string]any)["timestamp"].(string); ts >= "2026-12-05T10:00:00" && ts < "2026-12-05T10:00:02" {
				t.Errorf("m-1: inlet.timestamp %s is the device's clock, not corrected to the receive time", ts)
			}
		})
	}
}
