package gateway_test

import (
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/spool"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// failingSync is the OS file system, but once armed every fsync of a
// segment fails with EIO.
type failingSync struct{ armed *atomic.Bool }

func (f failingSync) OpenFile(name string, flag int, perm os.FileMode) (spool.File, error) {
	file, err := spool.OS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return file, err
	}
	return syncFails{File: file, armed: f.armed}, nil
}
func (failingSync) Rename(o, n string) error { return spool.OS.Rename(o, n) }
func (failingSync) Remove(name string) error { return spool.OS.Remove(name) }
func (failingSync) SyncDir(dir string) error { return spool.OS.SyncDir(dir) }

type syncFails struct {
	spool.File
	armed *atomic.Bool
}

func (f syncFails) Sync() error {
	if f.armed.Load() {
		return &os.PathError{Op: "fsync", Path: "segment", Err: syscall.EIO}
	}
	return f.File.Sync()
}

// TestFsyncFailureMakesTheGatewayUnready: after a failed fsync the spool
// cannot say what is on disk, so it stops writing for good: the request
// whose fsync failed and every later one are answered 503 (none is
// acknowledged), and /readyz and /healthz turn 503 naming the cause.
func TestFsyncFailureMakesTheGatewayUnready(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events")
	cfg.Spool.FS = failingSync{armed: &armed}
	cfg.ShutdownTimeout = 2 * time.Second // Kafka is down: nothing drains
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	body := testkit.Batch(3, "e", testkit.JSONArray)
	if r := testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 200 {
		t.Fatalf("before the fault: %s", r)
	}
	if r := testkit.Do(t, "GET", base+"/readyz", nil); r.Status != 200 {
		t.Fatalf("readyz before the fault: %s", r)
	}
	armed.Store(true)
	for i := range 3 {
		if r := testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 503 {
			t.Fatalf("request %d after a failed fsync: %s, want 503", i, r)
		}
	}
	armed.Store(false) // the disk "recovers": the spool must still refuse, it cannot know what it lost
	if r := testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 503 {
		t.Fatalf("after the fault cleared: %s, want 503 until a restart", r)
	}
	r := testkit.Do(t, "GET", base+"/readyz", nil)
	var rd gateway.Readiness
	if err := json.Unmarshal(r.Body, &rd); err != nil {
		t.Fatal(err)
	}
	if r.Status != 503 || rd.Ready || !strings.Contains(rd.Error, "the spool cannot write") || !strings.Contains(rd.Error, "input/output error") {
		t.Fatalf("readyz after a failed fsync: %s", r)
	}
	// Liveness too: only a restart brings the spool back.
	if h := testkit.Do(t, "GET", base+"/healthz", nil); h.Status != 503 || !strings.Contains(string(h.Body), "input/output error") {
		t.Fatalf("healthz after a failed fsync: %s, want 503 naming the cause", h)
	}
}
