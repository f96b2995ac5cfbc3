package gateway_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func basicAuth(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
}

// authGateway starts a gateway with --auth whose clients are ops (an
// admin) and web, logging into the returned buffer.
func authGateway(t *testing.T, brokers []string, topic string, edit func(*gateway.Config)) (g *gateway.Gateway, ops, web string, logs *testkit.LogBuffer) {
	t.Helper()
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	cfg.Auth.HTTP = true
	ops = addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "ops", Admin: true})
	web = addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "web"})
	if edit != nil {
		edit(&cfg)
	}
	log, logs := testkit.NewLogBuffer()
	g, err := gateway.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = g.Shutdown(ctx)
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs)
		}
	})
	return g, ops, web, logs
}

// TestUIAuth: with --auth the live page and its stream answer admin
// clients only, with HTTP Basic credentials a browser asks for (a Basic
// challenge); an unknown client and a wrong secret get the same answer.
func TestUIAuth(t *testing.T) {
	t.Parallel()
	g, ops, web, _ := authGateway(t, testkit.Brokers(t), testkit.Unique(t, "t-"), nil)
	base := "http://" + g.Addr()
	var refused []string
	for _, tc := range []struct {
		name, path, authz string
		want              int
	}{
		{"no credentials, stream", "/ui/stream", "", http.StatusUnauthorized},
		{"no credentials, page", "/ui/", "", http.StatusUnauthorized},
		{"no credentials, script", "/ui/live.js", "", http.StatusUnauthorized},
		{"no credentials, redirect", "/ui", "", http.StatusUnauthorized},
		{"k= in the query", "/ui/stream?k=" + ops, "", http.StatusUnauthorized},
		{"wrong secret", "/ui/stream", basicAuth("ops", web), http.StatusUnauthorized},
		{"unknown client", "/ui/stream", basicAuth("nobody", ops), http.StatusUnauthorized},
		{"not an admin", "/ui/stream", basicAuth("web", web), http.StatusForbidden},
		{"admin, page", "/ui/", basicAuth("ops", ops), http.StatusOK},
	} {
		var hs []string
		if tc.authz != "" {
			hs = []string{"Authorization", tc.authz}
		}
		r := getWithin(t, base+tc.path, hs...)
		if r.Status != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, r, tc.want)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: WWW-Authenticate %q, want a Basic challenge (the browser asks)", tc.name, r.Header.Get("WWW-Authenticate"))
		}
		if strings.Contains(tc.name, "wrong") || strings.Contains(tc.name, "unknown") {
			refused = append(refused, string(r.Body))
		}
	}
	if len(refused) != 2 || refused[0] != refused[1] {
		t.Errorf("unknown client and wrong secret answered differently: %q", refused)
	}
	// The admin's stream: what the page's EventSource opens, with the
	// credentials the browser cached for the page.
	req, _ := http.NewRequest("GET", base+"/ui/stream", nil)
	req.Header.Set("Authorization", basicAuth("ops", ops))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("admin's stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if l, _ := bufio.NewReader(resp.Body).ReadString('\n'); !strings.HasPrefix(l, "retry:") {
		t.Errorf("stream starts with %q", l)
	}
}

// getWithin is a GET whose answer is read for at most 3 s: an open live
// stream never ends, and a test that expects a refusal must not hang when
// it gets the stream instead.
func getWithin(t *testing.T, url string, headers ...string) testkit.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	cl := &http.Client{Timeout: 3 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // cut by the timeout for a stream
	return testkit.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// liveStream reads the live page's stream as the admin ops until the test
// ends, keeping all it got.
type liveStream struct {
	mu   sync.Mutex
	buf  strings.Builder
	done chan struct{}
}

func openLive(t *testing.T, base, ops string) *liveStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/ui/stream", nil)
	req.Header.Set("Authorization", basicAuth("ops", ops))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("live stream: %d", resp.StatusCode)
	}
	ls := &liveStream{done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(b)
			ls.mu.Lock()
			ls.buf.Write(b[:n])
			ls.mu.Unlock()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					t.Errorf("reading the live stream: %v", err)
				}
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-ls.done })
	return ls
}

func (ls *liveStream) String() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.buf.String()
}

// TestNoSecretStoredShownOrLogged sends pixel, batch and track requests
// that carry client secrets every way a client can (k=, Basic, Bearer),
// wrong ones and session-token-shaped ones too, valid events and invalid
// ones; then no record of the events topic or of the dead-letter topic,
// no line of the log and nothing of the live page holds any of them. The
// live page shows the rejected events' reasons, not what they held.
func TestNoSecretStoredShownOrLogged(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	g, ops, web, logs := authGateway(t, brokers, topic, nil)
	base := "http://" + g.Addr()
	live := openLive(t, base, ops)
	testkit.WaitFor(t, 10*time.Second, "the live page's first stats", func() bool { return strings.Contains(live.String(), "event: stats") })

	const card = "4111111111111111"
	guess, _, _ := auth.NewSecret()
	forged := "v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	secrets := []string{web, ops, guess, forged, basicAuth("web", web)[6:], basicAuth("web", guess)[6:]}
	json := []string{"Content-Type", "application/json"}
	for _, tc := range []struct {
		name, method, path, body string
		headers                  []string
		want                     int
	}{
		{"pixel", "GET", "/i?e=view&uid=u1&k=" + web, "", nil, 200},
		{"pixel without e=", "GET", "/i?uid=u1&p.card=" + card + "&k=" + web, "", nil, 200},
		{"pixel, data= not base64", "GET", "/i?data=!!" + card + "&k=" + web, "", nil, 200},
		{"pixel, e= twice", "GET", "/i?k=" + web + "&e=a&e=b&p.card=" + card, "", nil, 200},
		{"pixel, wrong secret", "GET", "/i?e=view&k=" + guess, "", nil, 401},
		{"batch, Basic", "POST", "/v1/batch", `[{"event":"buy","uid":"u2"},{"event":"pay","props":{"card":"` + card + `"},"secret":"x"}]`,
			append(json, "Authorization", basicAuth("web", web)), 200},
		{"batch, Bearer and k=", "POST", "/v1/batch?k=" + web, `[{"event":"buy","uid":"u3"}]`, append(json, "Authorization", "Bearer "+web), 200},
		{"track, k=", "POST", "/v1/track?k=" + web, `{"event":"see","uid":"u4"}`, []string{"Content-Type", "text/plain"}, 200},
		{"batch, wrong secret", "POST", "/v1/batch", `[{"event":"buy"}]`, append(json, "Authorization", basicAuth("web", guess)), 401},
		{"track, forged token", "POST", "/v1/track", `{"event":"buy"}`, append(json, "Authorization", "Bearer "+forged), 401},
		{"track, bad type and a wrong secret", "POST", "/v1/track?k=" + guess, `{"event":"buy"}`, []string{"Content-Type", "image/png"}, 401},
	} {
		r := testkit.Do(t, tc.method, base+tc.path, []byte(tc.body), tc.headers...)
		if r.Status != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, r, tc.want)
		}
		for _, s := range secrets {
			if strings.Contains(string(r.Body), s) {
				t.Errorf("%s: the answer holds a secret: %s", tc.name, r)
			}
		}
	}
	events := testkit.ConsumeN(t, brokers, topic, 4, 0)
	dead := testkit.ConsumeN(t, brokers, topic+".invalid", 4, time.Second)
	testkit.WaitFor(t, 10*time.Second, "the live page's 8 items", func() bool { return strings.Count(live.String(), "event: item") >= 8 })

	check := func(where, what string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(what, s) {
				t.Errorf("%s holds a secret (%.8s…): %s", where, s, what)
			}
		}
	}
	for _, recs := range [][]testkit.Record{events, dead} {
		for _, r := range recs {
			check("record key", r.Key)
			check("record value", string(r.Value))
			for k, v := range r.Headers {
				check("record header "+k, v)
			}
		}
	}
	check("the log", logs.String())
	page := live.String()
	check("the live page", page)
	if strings.Contains(page, card) {
		t.Errorf("the live page shows what a rejected event held (a card number):\n%s", page)
	}
	for _, reason := range []string{`"reason":"missing_event"`, `"reason":"unknown_field"`} {
		if !strings.Contains(page, reason) {
			t.Errorf("the live page does not show %s:\n%s", reason, page)
		}
	}
	if t.Failed() {
		t.Logf("dead letters: %+v", dead)
	}
}

// fromAddr is an HTTP client whose connections come from the loopback
// address ip (127.0.0.2: another client than the default 127.0.0.1).
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestAuthThrottledAcrossEndpoints: after --auth-fail-burst bad
// credentials from one address on ingest, that address gets 429 with
// Retry-After on every endpoint that takes credentials (ingest, the live
// page), good credentials too, while another address is served.
func TestAuthThrottledAcrossEndpoints(t *testing.T) {
	t.Parallel()
	g, ops, web, _ := authGateway(t, testkit.Brokers(t), testkit.Unique(t, "t-"), func(c *gateway.Config) { c.Auth.FailBurst = 3 })
	base := "http://" + g.Addr()
	do := func(cl *http.Client, method, path, authz string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(`[{"event":"a"}]`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", authz)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	attacker, other := fromAddr("127.0.0.2"), fromAddr("127.0.0.1")
	for i := range 3 {
		if r := do(attacker, "POST", "/v1/batch", basicAuth("web", ops)); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, r.StatusCode)
		}
	}
	for _, c := range []struct{ method, path, authz string }{
		{"POST", "/v1/batch", basicAuth("web", web)},
		{"GET", "/ui/", basicAuth("ops", ops)},
	} {
		r := do(attacker, c.method, c.path, c.authz)
		if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s from the failing address: %d, Retry-After %q; want 429 with Retry-After", c.method, c.path, r.StatusCode, r.Header.Get("Retry-After"))
		}
	}
	if r := do(other, "POST", "/v1/batch", basicAuth("web", web)); r.StatusCode != http.StatusOK {
		t.Errorf("another address: %d, want 200", r.StatusCode)
	}
}
