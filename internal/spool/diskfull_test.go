package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fillDisk appends records of about 1 KiB until the disk refuses one, and
// returns how many it took; it fails the test unless the refusal is for
// lack of space, and shows in Stats.
func fillDisk(t *testing.T, s *Spool, prefix string) int {
	t.Helper()
	for i := range 10000 {
		err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("%s%05d", prefix, i))})
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrWrite) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append %d: %v, want ErrWrite wrapping ENOSPC", i, err)
		}
		if st := s.Stats(); st.DiskFull == "" || st.Failed != "" {
			t.Fatalf("after the disk refused an append: %+v", st)
		}
		return i
	}
	t.Fatal("the disk never filled")
	return 0
}

// appendOnDisk appends r, trying again while the disk (or the spool) is
// full, for up to timeout; it returns the last error.
func appendOnDisk(s *Spool, r event.Record, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.Append(context.Background(), []event.Record{r})
		if !errors.Is(err, ErrFull) && !errors.Is(err, syscall.ENOSPC) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFullDiskHeals: the spool fills its disk while nothing is delivered
// (Kafka down), then everything is delivered: making room needs no room,
// so the delivered segments are freed and appends succeed again, and the
// spool says the disk is full meanwhile, and no longer once it is not. So
// too after a restart on the full disk, and after one from a cursor file
// in the old format. With one segment larger than the disk, the segment
// being written is sealed when the disk refuses a write, so that it can be
// deleted once delivered.
func TestFullDiskHeals(t *testing.T) {
	cases := []struct {
		name    string
		segment int64
		restart bool // close and reopen on the full disk before delivering
		oldLine bool // and leave an old cursor line at the spool's start
		torn    bool // and the last record torn (a crash between a short write and its cut)
	}{
		{name: "segments smaller than the disk", segment: 32 << 10},
		{name: "one segment larger than the disk", segment: 1 << 20},
		{name: "a restart on the full disk", segment: 32 << 10, restart: true},
		{name: "a restart from an old cursor line", segment: 32 << 10, restart: true, oldLine: true},
		{name: "a restart with a torn tail", segment: 32 << 10, restart: true, torn: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testkit.Tmpfs(t, "256k") // registered first: unmounted after the spool is closed
			cfg := testConfig(dir)
			cfg.SegmentBytes = tc.segment
			cfg.MaxBytes = 64 << 20 // more than the disk
			s, logs, m := open(t, cfg)
			n := fillDisk(t, s, "a")
			if testutil.ToFloat64(m.WriteErrors) < 1 {
				t.Error("the refused write was not counted")
			}
			if tc.restart {
				if err := s.Close(); err != nil {
					t.Fatalf("closing on a full disk: %v", err)
				}
				if tc.oldLine {
					// As the version before left it: a line, in the
					// block the file has.
					if err := os.WriteFile(filepath.Join(dir, cursorName), []byte("1 0 1\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if tc.torn {
					last := lastSegment(t, dir)
					fi, err := os.Stat(last)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(last, fi.Size()-5); err != nil {
						t.Fatal(err)
					}
					n-- // that record is cut
				}
				var err error
				log, lb := testkit.NewLogBuffer()
				m = NewMetrics(prometheus.NewRegistry())
				if s, err = openFS(cfg, log, m, osFS{}); err != nil {
					t.Fatalf("opening on a full disk: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				logs = lb
				if st := s.Stats(); st.Unforwarded != uint64(n) {
					t.Fatalf("after the restart: %+v, want %d records to send", st, n)
				}
				if m, _ := filepath.Glob(filepath.Join(dir, "*.corrupt*")); len(m) > 0 {
					t.Fatalf("a part of a copy left: %v", m)
				}
			}
			// Kafka is back: the forwarder delivers the backlog.
			got, end := readAll(t, s, s.Delivered())
			if len(got) != n {
				t.Fatalf("%d records to send, %d acknowledged", len(got), n)
			}
			delivered := time.Now()
			if err := s.Ack(end); err != nil {
				t.Fatalf("recording the delivery on a full disk: %v\n%s", err, logs)
			}
			// The spool says the disk has room again once it has, without
			// an append to find out (a load balancer keeps clients away
			// while it is unready).
			testkit.WaitFor(t, 5*time.Second, "the disk-full state cleared", func() bool { return s.Stats().DiskFull == "" })
			// Load on: appends succeed again, within 10 s of the delivery.
			if err := appendOnDisk(s, bigRec("b00000"), 10*time.Second-time.Since(delivered)); err != nil {
				t.Fatalf("10 s after the backlog's delivery: %v; stats %+v\n%s", err, s.Stats(), logs)
			}
			// And go on: once the deleter is done, the disk fills again
			// only with what is new.
			testkit.WaitFor(t, 5*time.Second, "the delivered segments removed", func() bool {
				m, _ := filepath.Glob(filepath.Join(dir, "*"+deletingSuffix))
				return len(m) == 0
			})
			if k := fillDisk(t, s, "c"); k < n/2 {
				t.Fatalf("only %d appends fit after the backlog of %d was delivered; stats %+v", k, n, s.Stats())
			}
		})
	}
}
