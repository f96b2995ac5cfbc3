package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestOpsListener: with --ops-listen, the operators' endpoints (/metrics,
// /debug/pprof/, the live page) are served there and are 404 on the public
// listener; ingest is served on the public listener only; both answer the
// probes. /debug/pprof/cmdline, which shows the command line and any
// secret given there, is served on neither.
func TestOpsListener(t *testing.T) {
	t.Parallel()
	cfg := gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "t-"))
	cfg.Ack = "kafka"
	cfg.OpsListen = "127.0.0.1:0"
	cfg.Pprof = true
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	public, ops := "http://"+g.Addr(), "http://"+g.OpsAddr()
	if g.OpsAddr() == "" || g.OpsAddr() == g.Addr() {
		t.Fatalf("ops address %q beside %q", g.OpsAddr(), g.Addr())
	}
	cl := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url string) int {
		t.Helper()
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path         string
		public, opsc int
	}{
		{"/metrics", 404, 200},
		{"/debug/pprof/", 404, 200},
		{"/debug/pprof/cmdline", 404, 404},
		{"/ui/", 404, 200},
		{"/ui", 404, 302},
		{"/healthz", 200, 200},
		{"/readyz", 200, 200},
		{"/sdk/inlet.js", 200, 404},
		{"/nothing", 404, 404},
	} {
		if got := get(public + tc.path); got != tc.public {
			t.Errorf("public %s: %d, want %d", tc.path, got, tc.public)
		}
		if got := get(ops + tc.path); got != tc.opsc {
			t.Errorf("ops %s: %d, want %d", tc.path, got, tc.opsc)
		}
	}
	for base, want := range map[string]int{public: 200, ops: 404} {
		resp, err := cl.Post(base+"/v1/batch", "application/json", strings.NewReader(`[{"event":"e"}]`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s/v1/batch: %d, want %d", base, resp.StatusCode, want)
		}
	}
}
