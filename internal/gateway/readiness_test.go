package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/spool"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// syncFailing is the OS file system whose segment fsyncs fail once armed.
type syncFailing struct{ armed *atomic.Bool }

func (f syncFailing) OpenFile(name string, flag int, perm os.FileMode) (spool.File, error) {
	file, err := spool.OS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return file, err
	}
	return syncFailingFile{File: file, armed: f.armed}, nil
}
func (syncFailing) Rename(o, n string) error { return spool.OS.Rename(o, n) }
func (syncFailing) Remove(name string) error { return spool.OS.Remove(name) }
func (syncFailing) SyncDir(dir string) error { return spool.OS.SyncDir(dir) }

type syncFailingFile struct {
	spool.File
	armed *atomic.Bool
}

func (f syncFailingFile) Sync() error {
	if f.armed.Load() {
		return &os.PathError{Op: "fsync", Path: "segment", Err: syscall.EIO}
	}
	return f.File.Sync()
}

// TestHealthFailsOnceTheSpoolFailedForGood: /healthz is 200 while the
// spool writes, and 503, naming the cause, once a failed fsync stopped it
// for good: only a restart helps, and liveness is what makes one.
func TestHealthFailsOnceTheSpoolFailedForGood(t *testing.T) {
	var armed atomic.Bool
	sc := spool.DefaultConfig()
	sc.Dir = t.TempDir()
	sc.FS = syncFailing{armed: &armed}
	s, err := spool.Open(sc, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &Gateway{spool: s}
	health := func() (int, Health) {
		t.Helper()
		w := httptest.NewRecorder()
		g.serveHealth(w, httptest.NewRequest("GET", "/healthz", nil))
		var h Health
		if err := json.Unmarshal(w.Body.Bytes(), &h); err != nil {
			t.Fatalf("%v: %s", err, w.Body)
		}
		return w.Code, h
	}
	if code, h := health(); code != http.StatusOK || h.Status != "ok" {
		t.Fatalf("healthz before the fault: %d %+v", code, h)
	}
	rec := event.Record{Topic: "events", Value: []byte(`{}`)}
	if err := s.Append(context.Background(), []event.Record{rec}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := s.Append(context.Background(), []event.Record{rec}); err == nil {
		t.Fatal("an append whose fsync failed succeeded")
	}
	armed.Store(false)
	if code, h := health(); code != http.StatusServiceUnavailable || h.Status != "failed" || !strings.Contains(h.Error, "input/output error") {
		t.Fatalf("healthz after a failed fsync: %d %+v, want 503 naming the cause", code, h)
	}
	// Without a spool (ack=kafka, ack=none) there is nothing to fail.
	w := httptest.NewRecorder()
	(&Gateway{}).serveHealth(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("healthz without a spool: %d", w.Code)
	}
}
