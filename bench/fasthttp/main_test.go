package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// recorder is a sink that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	recs []event.Record
}

func (r *recorder) ProduceSync(_ context.Context, recs []event.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, recs...)
	return nil
}

// post serves one front end on a free port and posts body to /v1/batch.
func post(t *testing.T, serve front, body string) (status int, answer string, recs []event.Record) {
	t.Helper()
	rec := &recorder{}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &handler{ing: &ingester{
		topic: "events", deadLetter: "events.dlq", limits: event.DefaultLimits,
		maxBodyBytes: 1 << 20, writeTimeout: time.Second, sink: rec,
		now: func() time.Time { return at },
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, h) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/batch", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "frontbench-test")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	return res.StatusCode, string(b), rec.recs
}

// TestFrontsDoTheSameWork checks that both front ends answer alike and hand
// the sink the same records, byte for byte, so that a difference between
// them measures the front end alone.
func TestFrontsDoTheSameWork(t *testing.T) {
	body := `[{"event":"a","id":"1","props":{"n":1}},{"event":2},{"event":"b","id":"2"}]`
	ns, na, nr := post(t, serveNetHTTP, body)
	fs, fa, fr := post(t, serveFastHTTP, body)
	if ns != 200 || fs != 200 {
		t.Fatalf("status: net/http %d %q, fasthttp %d %q; want 200", ns, na, fs, fa)
	}
	if na != fa {
		t.Errorf("answers differ:\nnet/http %s\nfasthttp %s", na, fa)
	}
	want := `{"accepted":2,"rejected":[{"index":1,`
	if len(na) < len(want) || na[:len(want)] != want {
		t.Errorf("answer %q, want it to start with %q", na, want)
	}
	if len(nr) != 3 || len(fr) != 3 {
		t.Fatalf("records: net/http %d, fasthttp %d; want 3 each", len(nr), len(fr))
	}
	for i := range nr {
		if got, want := fmt.Sprintf("%s %s %q", fr[i].Topic, fr[i].Value, fr[i].Headers), fmt.Sprintf("%s %s %q", nr[i].Topic, nr[i].Value, nr[i].Headers); got != want {
			t.Errorf("record %d differs:\nfasthttp %s\nnet/http %s", i, got, want)
		}
	}
	if !bytes.Contains(nr[0].Value, []byte(`"ip":"127.0.0.1"`)) || !bytes.Contains(nr[0].Value, []byte(`"ua":"frontbench-test"`)) {
		t.Errorf("record 0 lacks the request's ip or ua: %s", nr[0].Value)
	}
	if nr[1].Topic != "events.dlq" {
		t.Errorf("record 1 went to %q, want the dead-letter topic", nr[1].Topic)
	}
}
