package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestNotReadyUntilTheTopicTakesRecords: with ack=kafka and ack=none,
// /readyz is 503 while the events topic does not exist on brokers that do
// not create topics on first use, saying so, and 200 once it was created.
// A gateway ready before its topic is would take events it can only
// buffer (ack=none: memory; ack=kafka: requests waiting, then 503).
func TestNotReadyUntilTheTopicTakesRecords(t *testing.T) {
	for _, ack := range []string{gateway.AckKafka, gateway.AckNone} {
		t.Run(ack, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1)) // no topic created on first use
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cfg := gatewaytest.Config(t, c.ListenAddrs(), "events-"+ack)
			cfg.Ack = ack
			g := gatewaytest.Start(t, cfg)
			readyz := func() (int, gateway.Readiness) {
				resp, err := http.Get("http://" + g.Addr() + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var rd gateway.Readiness
				if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, rd
			}
			// Past several checks (200 ms apart), still not ready, and why.
			testkit.WaitFor(t, 10*time.Second, "readyz naming the missing topic", func() bool {
				_, rd := readyz()
				return strings.Contains(rd.Kafka, "topic events-"+ack+" does not exist")
			})
			time.Sleep(time.Second)
			if code, rd := readyz(); code != http.StatusServiceUnavailable || rd.Ready {
				t.Fatalf("readyz %d %+v before the topic exists, want 503", code, rd)
			}

			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "events-"+ack); err != nil {
				t.Fatal(err)
			}
			gatewaytest.Ready(t, g, 10*time.Second)
		})
	}
}
