package ratelog

import (
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
