// Package gatewaytest starts gateways for tests: on a free loopback port,
// producing to the brokers given, stopped and cleaned up when the test ends.
package gatewaytest

import (
	"context"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// Config is a gateway config for tests: a free port, brokers, topic, a data
// directory of the test's own, uncompressed batches, and timeouts that suit
// a loaded CI machine.
func Config(tb testing.TB, brokers []string, topic string) gateway.Config {
	cfg := gateway.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Brokers = brokers
	cfg.DataDir = tb.TempDir()
	cfg.Ingest.Topic = topic
	cfg.Ingest.WriteTimeout = 20 * time.Second
	cfg.ReadyInterval = 200 * time.Millisecond
	cfg.ShutdownTimeout = 20 * time.Second
	// Uncompressed, so tests read their records back fast: under -race,
	// franz-go's lz4 decoding is slow enough that a checker gave up waiting
	// (2,000 records of TestVerify: 10 s to read back, 20 ms without -race).
	// Tests of compression set it themselves.
	cfg.Kafka.Compression = "none"
	return cfg
}

// Start starts a gateway with cfg, logging to testkit.Logger, and shuts it
// down at the end of the test.
func Start(tb testing.TB, cfg gateway.Config) *gateway.Gateway {
	tb.Helper()
	g, err := gateway.Start(cfg, testkit.Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

// Ready polls /readyz until it answers 200, failing the test after timeout.
func Ready(tb testing.TB, g *gateway.Gateway, timeout time.Duration) {
	tb.Helper()
	testkit.WaitReady(tb, "http://"+g.Addr(), timeout)
}
