package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestLimiter(t *testing.T) {
	log, buf := testkit.NewLogBuffer()
	l := New(log, slog.LevelWarn, "sink write failed", time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for range 1000 {
		l.Log("kind", "full")
	}
	if n := buf.Count("sink write failed"); n != 1 {
		t.Fatalf("%d lines for 1000 occurrences within one interval, want 1:\n%s", n, buf)
	}
	if !strings.Contains(buf.String(), "repeated=0") {
		t.Fatalf("first line should say repeated=0:\n%s", buf)
	}
	now = now.Add(1500 * time.Millisecond)
	l.Log("kind", "full")
	if n := buf.Count("sink write failed"); n != 2 {
		t.Fatalf("%d lines after the interval, want 2:\n%s", n, buf)
	}
	if !strings.Contains(buf.String(), "repeated=999") {
		t.Fatalf("second line should count the 999 suppressed:\n%s", buf)
	}
}

// TestPrinter: a library's printf-style messages reach the log as the
// Limiter's, their prefix trimmed, one per interval.
func TestPrinter(t *testing.T) {
	log, buf := testkit.NewLogBuffer()
	p := Printer{New(log, slog.LevelWarn, "redis client", time.Hour), "redis: "}
	p.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 1)
	p.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 2)
	if got := buf.String(); buf.Count("redis client") != 1 || !strings.Contains(got, `detail="connection pool: failed to dial after 1 attempts"`) {
		t.Fatalf("logged:\n%s", got)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
