package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/ship"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestRoutesEveryFront: the Go client and `inlet ship --target` need no
// change to be routed: their events reach the topics the routes file
// names, like those of a plain POST (TestRoutesKafka) and the pixel
// (internal/ingest). inlet.js posts to the same /v1/batch.
func TestRoutesEveryFront(t *testing.T) {
	brokers := testkit.Brokers(t)
	p := testkit.Unique(t, "rtf-")
	sdk, logs := p+".sdk", p+".logs"
	for _, topic := range []string{sdk, logs} {
		testkit.CreateTopic(t, brokers, topic, 1, nil)
	}
	routesFile := filepath.Join(t.TempDir(), "routes.yaml")
	file := fmt.Sprintf("routes:\n  - {name: sdk, match: {event: \"sdk_*\"}, topic: %s}\n  - {name: logs, match: {event: log}, topic: %s}\n", sdk, logs)
	if err := os.WriteFile(routesFile, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.Config(t, brokers, p+".default")
	cfg.Ingest.Routes = routesFile
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	base := "http://" + g.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := c.Track(ctx, client.Event{Event: "sdk_signup", UID: fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}

	sc := ship.DefaultConfig()
	sc.Target = base
	if err := ship.Run(ctx, sc, strings.NewReader("one\ntwo\n"), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("ship --target: %v", err)
	}

	for topic, want := range map[string]int{sdk: 3, logs: 2} {
		got := testkit.Consume(t, brokers, topic, 20*time.Second, func(rs []testkit.Record) bool { return len(rs) >= want })
		for _, r := range got {
			if r.Headers["inlet-topic"] != topic {
				t.Errorf("%s: record with inlet-topic %q", topic, r.Headers["inlet-topic"])
			}
		}
	}
}
