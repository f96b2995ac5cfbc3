package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// startAuthRPC starts a gateway with --auth and --rpc-forward-query whose
// service "who" an exec worker answers by running pre and then printing
// "$RPC_CLIENT $RPC_QUERY". It returns the gateway, the service's URL and
// the secrets of its clients: app, and slow (0.01 calls/s, burst 1).
func startAuthRPC(t *testing.T, pre string) (g *gateway.Gateway, url, app, slow string) {
	t.Helper()
	brokers := testkit.Brokers(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.DataDir = t.TempDir()
	cfg.RPC.Services = []string{"who"}
	cfg.RPC.TopicPrefix = prefix
	cfg.RPC.ForwardQuery = true
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	cfg.Auth.HTTP = true
	app = addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "app"})
	slow = addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "slow", Rate: 0.01, Burst: 1})
	g = gatewaytest.Start(t, cfg)
	startWorker(t, brokers, prefix+"who", "who", "--exec", pre+`printf '%s %s' "$RPC_CLIENT" "$RPC_QUERY"`)
	return g, "http://" + g.Addr() + "/v1/rpc/who", app, slow
}

// TestRPCAuth: with --auth, request-reply needs the same credentials as
// ingest, checked before the call is produced: none or a wrong secret is
// 401 with WWW-Authenticate, a client over its rate 429 with Retry-After,
// and nothing reaches the worker. An admitted call tells the worker its
// client (inlet-client, RPC_CLIENT to an exec worker), which a caller's
// own Inlet-Client header cannot forge; credentials sent as k= in the
// query are not forwarded with the query.
func TestRPCAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker; skipped with -short")
	}
	// The worker answers with what it was told of the caller, and counts
	// the calls that reached it.
	calls := filepath.Join(t.TempDir(), "calls")
	g, url, secret, slow := startAuthRPC(t, `echo x >> `+calls+`; `)
	bearer := "Bearer " + secret

	deadline := time.Now().Add(45 * time.Second) // the worker's group takes a moment
	for {
		code, body, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "1s", "Authorization", bearer, "Inlet-Client", "admin")
		if code == 200 {
			if string(body) != "app " {
				t.Fatalf("the worker was told the caller is %q, want app (the caller's own Inlet-Client header said admin)", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker answered %s: last %d %s", url, code, body)
		}
	}
	reached := func() int {
		b, err := os.ReadFile(calls)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "x")
	}
	before := reached()

	for _, tt := range []struct {
		name, authz string
		want        int
		header      string
	}{
		{"no credentials", "", http.StatusUnauthorized, "WWW-Authenticate"},
		{"wrong secret", "Bearer " + strings.Repeat("0", len(secret)), http.StatusUnauthorized, "WWW-Authenticate"},
		{"no credentials, service not enabled", "", http.StatusUnauthorized, "WWW-Authenticate"},
	} {
		u := url
		if strings.Contains(tt.name, "not enabled") {
			u = "http://" + g.Addr() + "/v1/rpc/other"
		}
		var hs []string
		if tt.authz != "" {
			hs = []string{"Authorization", tt.authz}
		}
		resp := testkit.Do(t, "POST", u, []byte("hi"), hs...)
		if resp.Status != tt.want || resp.Header.Get(tt.header) == "" || !strings.Contains(string(resp.Body), "credentials refused") {
			t.Errorf("%s: %s, want %d with %s", tt.name, resp, tt.want, tt.header)
		}
	}
	// Credentials in the query are not forwarded with it.
	code, body, _ := call(t, http.DefaultClient, url+"?a=1&k="+secret+"&b=2", []byte("hi"))
	if code != 200 || string(body) != "app a=1&b=2" {
		t.Fatalf("call with k= in the query: %d %q, want the client app and the query without k", code, body)
	}
	before++
	// Nor beside an Authorization header.
	code, body, _ = call(t, http.DefaultClient, url+"?a=1&k="+secret, []byte("hi"), "Authorization", bearer)
	if code != 200 || string(body) != "app a=1" {
		t.Fatalf("call with Authorization and k= in the query: %d %q, want the client app and the query without k", code, body)
	}
	before++
	code, body, _ = call(t, http.DefaultClient, url, []byte("hi"), "Authorization", "Bearer "+slow)
	if code != 200 || string(body) != "slow " {
		t.Fatalf("first call of client slow: %d %q", code, body)
	}
	if resp := testkit.Do(t, "POST", url, []byte("hi"), "Authorization", "Bearer "+slow); resp.Status != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second call of client slow over its rate: %s, want 429 with Retry-After", resp)
	}
	if n := reached() - before; n != 1 {
		t.Errorf("%d calls reached the worker after the first; want 1 (client slow's first call)", n)
	}
}
