package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// get sends one request on c (which keeps connections alive) and reads the
// answer whole; closed is whether the answer closes the connection
// ("Connection: close").
func get(t *testing.T, c *http.Client, method, url, body string) (status int, answer string, closed bool) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Close
}

// TestDrain: during --shutdown-delay /readyz answers 503 "shutting down"
// while events are still acknowledged, each answer closing its connection
// (so a load balancer and pooled clients move away); Drain returns once the
// delay is over, and Shutdown then stops the server as without a delay.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, ack := range []string{gateway.AckSpool, gateway.AckKafka} {
		t.Run(ack, func(t *testing.T) {
			t.Parallel()
			cfg := gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "t-"))
			cfg.Ack = ack
			cfg.ShutdownDelay = 2 * time.Second
			g := gatewaytest.Start(t, cfg)
			gatewaytest.Ready(t, g, 30*time.Second)
			base := "http://" + g.Addr()
			c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
			defer c.CloseIdleConnections()
			batch := string(testkit.Batch(5, "drain-", testkit.JSONArray))
			if st, body, closed := get(t, c, "POST", base+"/v1/batch", batch); st != 200 || closed {
				t.Fatalf("before the drain: %d %s, connection closed %v; want 200 on a kept connection", st, body, closed)
			}

			start := time.Now()
			drained := make(chan time.Duration, 1)
			go func() { g.Drain(context.Background()); drained <- time.Since(start) }()
			testkit.WaitFor(t, 5*time.Second, "/readyz turns 503", func() bool {
				st, _, _ := get(t, c, "GET", base+"/readyz", "")
				return st == 503
			})
			var rd gateway.Readiness
			if _, body, _ := get(t, c, "GET", base+"/readyz", ""); json.Unmarshal([]byte(body), &rd) != nil || rd.Error != "shutting down" {
				t.Fatalf("/readyz while draining: %s, want the error \"shutting down\"", body)
			}
			for i := range 3 {
				st, body, closed := get(t, c, "POST", base+"/v1/batch", batch)
				if st != 200 || !closed {
					t.Fatalf("request %d while draining: %d %s, connection closed %v; want 200 and Connection: close", i, st, body, closed)
				}
			}
			if st, _, _ := get(t, c, "GET", base+"/healthz", ""); st != 200 {
				t.Fatalf("/healthz while draining: %d, want 200 (alive: only readiness changes)", st)
			}
			select {
			case d := <-drained:
				t.Fatalf("Drain returned after %v, before the 2s delay", d)
			default:
			}
			if d := <-drained; d < cfg.ShutdownDelay || d > cfg.ShutdownDelay+5*time.Second {
				t.Fatalf("Drain took %v, want the delay of %v", d, cfg.ShutdownDelay)
			}
			if st, _, _ := get(t, c, "POST", base+"/v1/batch", batch); st != 200 {
				t.Fatalf("after the delay, before Shutdown: %d, want 200 (Shutdown stops serving, not Drain)", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			if err := g.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown after the drain: %v", err)
			}
			select {
			case <-g.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the HTTP server still runs after Shutdown")
			}
			if _, err := c.Get(base + "/readyz"); err == nil {
				t.Fatal("the gateway still answers after Shutdown")
			}
		})
	}
}

// TestDrainCutShort: a drain ends when its context does (the second
// signal), long before its delay; without a delay it returns at once and
// leaves the gateway ready.
func TestDrainCutShort(t *testing.T) {
	t.Parallel()
	cfg := gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "t-"))
	cfg.Ack = gateway.AckKafka
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	start := time.Now()
	g.Drain(context.Background())
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Drain without a delay took %v", d)
	}
	if rd := g.Ready(); !rd.Ready {
		t.Fatalf("not ready after Drain without a delay: %+v", rd)
	}

	cfg = gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "t-"))
	cfg.Ack = gateway.AckKafka
	cfg.ShutdownDelay = time.Hour
	g = gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Drain(ctx) }()
	testkit.WaitFor(t, 5*time.Second, "the drain starts", func() bool { return g.Ready().Error == "shutting down" })
	start = time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Drain still waits 5s after its context ended")
	}
	t.Logf("cut short in %v", time.Since(start))
}
