package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRPCAuthQueryForms: request-reply calls with --auth and
// --rpc-forward-query over HTTP/1.1 and h2c, with k in the query in the
// forms a client may send it: the query the worker sees never holds a
// secret, and refusals are JSON with WWW-Authenticate.
func TestRPCAuthQueryForms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker; skipped with -short")
	}
	_, url, secret, _ := startAuthRPC(t, "")
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, _, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "1s", "Authorization", "Bearer "+secret)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no worker answered")
		}
	}
	h2c := &http.Client{Transport: &http.Transport{
		Protocols: func() *http.Protocols { var p http.Protocols; p.SetUnencryptedHTTP2(true); return &p }(),
	}}
	for _, cl := range []struct {
		name string
		c    *http.Client
	}{{"h1", http.DefaultClient}, {"h2c", h2c}} {
		for _, q := range []string{"k=" + secret, "a=1&k=" + secret + "&k=" + secret, "%6B=" + secret + "&a=2", "a=3&k=" + secret + "&k"} {
			code, body, err := call(t, cl.c, url+"?"+q, []byte("hi"))
			if err != nil || code != 200 || !strings.HasPrefix(string(body), "app ") || strings.Contains(string(body), secret) {
				t.Errorf("%s ?%s: %d %q %v; want app, the query without the secret", cl.name, q, code, body, err)
			}
		}
		req, _ := http.NewRequest("POST", url+"?k=nope", strings.NewReader("hi"))
		resp, err := cl.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if cl.name == "h2c" && resp.ProtoMajor != 2 {
			t.Errorf("h2c client spoke %s", resp.Proto)
		}
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" || !json.Valid(b) {
			t.Errorf("%s (proto %s) wrong k: %d %q headers %v", cl.name, resp.Proto, resp.StatusCode, b, resp.Header)
		}
	}
}
