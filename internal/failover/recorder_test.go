package failover

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRecorder checks the measuring proxy the scenarios rely on against a
// fake gateway (no Kafka, runs with -short): answers by status, a 503
// without Retry-After, the slowest answer, the longest time without a
// 2xx and the gap within a failure, and a request the client gave up on.
func TestRecorder(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Answer") {
		case "503":
			http.Error(w, "no", http.StatusServiceUnavailable)
		case "503-retry":
			w.Header().Set("Retry-After", "2")
			http.Error(w, "later", http.StatusServiceUnavailable)
		case "slow":
			time.Sleep(1200 * time.Millisecond)
			w.WriteHeader(http.StatusOK)
		case "hang":
			<-release
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer backend.Close()
	defer close(release)
	rec := newRecorder(t, "fake", strings.TrimPrefix(backend.URL, "http://"))

	send := func(answer string, timeout time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rec.srv.URL+"/v1/batch", strings.NewReader("[]"))
		req.Header.Set("X-Answer", answer)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	send("ok", 5*time.Second)
	failure := gap{from: time.Now()}
	send("503", 5*time.Second)
	send("503-retry", 5*time.Second)
	send("slow", 5*time.Second) // the first 2xx after at least 1.2 s
	failure.to = time.Now()
	send("hang", 300*time.Millisecond)
	send("ok", 5*time.Second)
	// The proxy records the abandoned request once its handler returns.
	deadline := time.Now().Add(5 * time.Second)
	for rec.snapshot().status["client gave up"] == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	a := rec.snapshot()
	if got, want := a.statusString(), "200:3 503:2 client gave up:1"; got != want {
		t.Errorf("answers %q, want %q", got, want)
	}
	if a.noRetry != 1 {
		t.Errorf("%d answers 503 without Retry-After, want 1", a.noRetry)
	}
	if a.non2xx() != 3 {
		t.Errorf("%d answers not 2xx, want 3", a.non2xx())
	}
	if a.slowest < 1200*time.Millisecond {
		t.Errorf("slowest answer %v, want at least 1.2s", a.slowest)
	}
	if d := a.maxGap.d(); d < 1200*time.Millisecond || d > 10*time.Second {
		t.Errorf("longest time without a 2xx %v, want about 1.2s", d)
	}
	if d := a.longestIn(failure); d < 1200*time.Millisecond {
		t.Errorf("gap within the failure %v, want at least 1.2s", d)
	}
	if d := a.longestIn(gap{from: time.Now(), to: time.Now().Add(time.Second)}); d != 0 {
		t.Errorf("gap within a later window %v, want 0", d)
	}

	// Requests abandoned by a load's stop are not counted.
	rec.stopping.Store(true)
	send("hang", 300*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the proxy's handler returns just after the client gave up
	if n := rec.snapshot().status["client gave up"]; n != 1 {
		t.Errorf("%d requests the client gave up on after the stop, want the 1 from before", n)
	}
}
