package logship_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

// TestStatsLastError: while the sink fails, Stats says why.
func TestStatsLastError(t *testing.T) {
	f := &fakeSink{}
	f.setDown(true)
	h, err := logship.NewHandler(f, logship.Options{BatchSize: 1, Linger: time.Millisecond, SpillDir: t.TempDir(), RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.LastError != "" {
		t.Fatalf("LastError %q before any failure", st.LastError)
	}
	slog.New(h).Info("hello")
	testkit.WaitFor(t, 10*time.Second, "the failure in Stats", func() bool { return strings.Contains(h.Stats().LastError, "sink down") })
	f.setDown(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
