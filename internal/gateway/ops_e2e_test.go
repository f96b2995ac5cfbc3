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

// TestHeaderAndConnBounds: a header over --max-header-bytes gets 431 (16
// KiB by default, what a client may hold of the server's memory before
// any credential is checked), and past --max-conns a new connection is
// not served until one closes.
func TestHeaderAndConnBounds(t *testing.T) {
	t.Parallel()
	cfg := gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "t-"))
	cfg.Ack = "kafka"
	cfg.MaxConns = 2
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	post := func(cl *http.Client, pad int) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/batch", strings.NewReader(`[{"event":"e"}]`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pad", strings.Repeat("p", pad))
		resp, err := cl.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	one := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer one.CloseIdleConnections()
	if got := post(one, 8<<10); got != http.StatusOK {
		t.Errorf("8 KiB header: %d, want 200", got)
	}
	if got := post(one, 24<<10); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("24 KiB header: %d, want 431", got)
	}
	// Two connections held open (the probe's of gatewaytest.Ready are
	// closed by now): a third waits until one of them closes.
	a := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	b := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	one.CloseIdleConnections() // its slot comes back as the server reads the close; b waits for it if need be
	if post(a, 0) != http.StatusOK || post(b, 0) != http.StatusOK {
		t.Fatal("two connections under --max-conns 2 not served")
	}
	third := &http.Client{Timeout: 500 * time.Millisecond}
	if got := post(third, 0); got != 0 {
		t.Errorf("a third connection past --max-conns 2 was answered %d", got)
	}
	a.CloseIdleConnections()
	third.Timeout = 10 * time.Second
	if got := post(third, 0); got != http.StatusOK {
		t.Errorf("once a connection closed, the next one: %d, want 200", got)
	}
	b.CloseIdleConnections()
}
