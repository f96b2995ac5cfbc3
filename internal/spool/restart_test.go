package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// copyFiles copies the files of dir into a new directory, as a kill -9
// leaves them (what was written is there, whether synced or not).
func copyFiles(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestSequenceNumbersNeverGoBack: the cursor file says everything before
// its sequence number was delivered, and it is rewritten only when
// something is delivered or the spool closes. So a spool that starts empty
// (all delivered, its active segment empty) must number new records from
// the cursor on, not from 1: otherwise a crash before the next delivery
// leaves a cursor past records that were never sent, and the next start
// deletes them as delivered (found by a black-box review: an idle restart,
// a Kafka outage, then kill -9 lost 555 acknowledged events).
func TestSequenceNumbersNeverGoBack(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	appendN := func(s *Spool, prefix string, n int) {
		t.Helper()
		for i := range n {
			if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("%s%02d", prefix, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Records delivered, then a clean stop: the cursor is at their end.
	s1, _, _ := open(t, cfg)
	appendN(s1, "old", 40)
	_, end := readAll(t, s1, s1.Delivered())
	if err := s1.Ack(end); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	// A start and stop with nothing sent: its active segment is left
	// empty, and the cursor as it was.
	s2, _, _ := open(t, cfg)
	if st := s2.Stats(); st.Unforwarded != 0 {
		t.Fatalf("an idle start: %+v", st)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// Records taken while Kafka is down (none delivered), then kill -9.
	s3, _, _ := open(t, cfg)
	appendN(s3, "new", 40)
	crashed := copyFiles(t, cfg.Dir)
	// The next start sends every one of them.
	cfg4 := cfg
	cfg4.Dir = crashed
	s4, logs, _ := open(t, cfg4)
	got, _ := readAll(t, s4, s4.Delivered())
	var want []string
	for i := range 40 {
		want = append(want, fmt.Sprintf("new%02d", i))
	}
	if strings.Join(ids(got), " ") != strings.Join(want, " ") {
		t.Fatalf("after the crash: %d records to send %v, want %d; log:\n%s", len(got), ids(got), len(want), logs.String())
	}
	if st := s4.Stats(); st.Unforwarded != 40 || st.Quarantined != 0 {
		t.Fatalf("after the crash: %+v", st)
	}
}
