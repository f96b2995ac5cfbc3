package logship_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

// killChildDir names the spill directory of TestSpillKillChild's handler.
const killChildDir = "LOGSHIP_TEST_KILL_CHILD_DIR"

// ackThenHangSink acknowledges its first writes, printing "ACK i,i,..."
// for each (the records' props.i), then prints "HANG" and waits for its
// context: the process is to be killed there.
type ackThenHangSink struct {
	mu   sync.Mutex
	acks int
}

func (s *ackThenHangSink) Write(ctx context.Context, recs [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acks == 5 {
		fmt.Println("HANG")
		<-ctx.Done()
		return ctx.Err()
	}
	s.acks++
	is := make([]string, len(recs))
	for k, r := range recs {
		var e map[string]any
		json.Unmarshal(r, &e)
		is[k] = fmt.Sprint(props(e)["i"])
	}
	fmt.Println("ACK " + strings.Join(is, ","))
	return nil
}

func (s *ackThenHangSink) Close(context.Context) error { return nil }

// TestSpillKillChild is TestSpillCheckpointAfterKill's other process: a
// handler replaying the spill file in killChildDir to ackThenHangSink.
func TestSpillKillChild(t *testing.T) {
	dir := os.Getenv(killChildDir)
	if dir == "" {
		t.Skip("run by TestSpillCheckpointAfterKill")
	}
	h, err := logship.NewHandler(&ackThenHangSink{}, logship.Options{SpillDir: dir, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	time.Sleep(time.Minute) // killed long before
}

// TestSpillCheckpointAfterKill: a handler replaying a spill file is killed
// (SIGKILL, in a process of its own) after the sink acknowledged five
// batches; the next handler on the directory starts from the checkpoint
// after them: every record arrives, and none of those acknowledged before
// the kill is sent again.
func TestSpillCheckpointAfterKill(t *testing.T) {
	dir := t.TempDir()
	const n = 3000
	// Fill the spill file: the sink down, Close out of time.
	down := &fakeSink{down: true}
	h, err := logship.NewHandler(down, logship.Options{SpillDir: dir, QueueSize: 16, RetryBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		slog.New(h).Info("record", "i", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); err == nil {
		t.Fatal("Close with the sink down: no records left in the spill file")
	}

	cmd := exec.Command(os.Args[0], "-test.run", "^TestSpillKillChild$", "-test.count", "1")
	cmd.Env = append(os.Environ(), killChildDir+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	var lines []string
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if rest, ok := strings.CutPrefix(line, "ACK "); ok {
			for _, i := range strings.Split(rest, ",") {
				acked[i] = true
			}
		}
		if line == "HANG" {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(acked) != 500 {
		t.Fatalf("the child acknowledged %d records before it hung, want 500 (5 batches of 100); its output:\n%s\n%s", len(acked), strings.Join(lines, "\n"), stderr.String())
	}

	sink := &fakeSink{}
	h, err = logship.NewHandler(sink, logship.Options{SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the records not acknowledged before the kill", func() bool { return h.Stats().Sent >= n-500 })
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, got := 0, map[string]bool{}
	for _, e := range sink.events(t) {
		i := fmt.Sprint(props(e)["i"])
		got[i] = true
		if acked[i] {
			again++
		}
	}
	for i := range n {
		if s := fmt.Sprint(i); !got[s] && !acked[s] {
			t.Fatalf("record %d lost", i)
		}
	}
	if again > 0 {
		t.Errorf("%d records acknowledged before the kill were sent again after the restart (want 0: the checkpoint is after them)", again)
	}
}

// TestSpillCheckpointPastTheEnd: a checkpoint beyond the spill file's end
// (the file was emptied, or lost its unsynced tail, after the checkpoint
// was written) is taken back to the end at once, so that records spilled
// afterwards are not skipped by a handler started after a crash.
func TestSpillCheckpointPastTheEnd(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "logship.spill.pos"), []byte(fmt.Sprintf("%020d\n", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := logship.NewHandler(&fakeSink{down: true}, logship.Options{SpillDir: dir, QueueSize: 1, RetryBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "logship.spill.pos"))
	if err != nil || strings.TrimLeft(strings.TrimSpace(string(b)), "0") != "" {
		t.Errorf("checkpoint %q (%v) after opening an empty spill file, want 0", b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	h.Close(ctx)
}
