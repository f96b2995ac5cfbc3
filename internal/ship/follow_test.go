package ship

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestShipFileRotationTruncationRestart: `ship --file` straight to Kafka
// follows a file across a rotation (rename, lines still appended to the
// old file, a new file) and a truncation, and after a restart resumes at
// its checkpoint: every line arrives once, in order.
func TestShipFileRotationTruncationRestart(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-")
	dir := t.TempDir()
	path := filepath.Join(dir, "app.log")
	cfg := testConfig(func(c *Config) { c.Brokers, c.Topic, c.File, c.Poll = brokers, topic, path, 10*time.Millisecond })
	start := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg, nil, testkit.Logger(t)) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	inode := func() uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return inodeOf(fi)
	}
	caughtUp := func(what string) {
		t.Helper()
		fi, _ := os.Stat(path)
		testkit.WaitFor(t, 20*time.Second, what, func() bool {
			p := readPos(t, cfg.Checkpoint)
			return p.Inode == inodeOf(fi) && p.Offset == fi.Size()
		})
	}

	appendTo(t, path, lines(0, 100))
	stop := start()
	caughtUp("lines 0-99 acknowledged")

	old, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	old.WriteString(lines(100, 110)) // the application still writes to the old file
	old.Close()
	appendTo(t, path, lines(110, 200))
	caughtUp("lines 100-199 acknowledged across the rotation")
	before := inode()

	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, lines(200, 250))
	if inode() != before {
		t.Fatal("truncation changed the inode")
	}
	caughtUp("lines 200-249 acknowledged after the truncation")
	stop()

	appendTo(t, path, lines(250, 300)) // written while ship is down
	stop = start()
	caughtUp("lines 250-299 acknowledged after the restart")
	stop()

	recs := testkit.ConsumeN(t, brokers, topic, 300, 500*time.Millisecond)
	nums, dups := lineNumbers(t, recs)
	checkSequence(t, nums, 300)
	if dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
}
