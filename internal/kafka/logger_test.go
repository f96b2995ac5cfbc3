package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestLoggerRateLimits: franz-go's warning for an unreachable broker,
// four times a second while it is down, is logged once per LogInterval
// with a count; another message gets its own line.
func TestLoggerRateLimits(t *testing.T) {
	log, buf := testkit.NewLogBuffer()
	l := Logger(log)
	for range 40 {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:1", "err", "connection refused")
	}
	l.Log(kgo.LogLevelError, "fatal InitProducerID error")
	if n := buf.Count("unable to open connection to broker"); n != 1 || !strings.Contains(buf.String(), "repeated=0") {
		t.Fatalf("%d lines for 40 warnings within %v, want 1 (with its count):\n%s", n, LogInterval, buf)
	}
	if buf.Count("fatal InitProducerID error") != 1 {
		t.Fatalf("another message was suppressed:\n%s", buf)
	}
}
