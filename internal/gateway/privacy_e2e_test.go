package gateway_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/privacy"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestIPDropEverywhere: with --ip-policy drop, a client's address, whether
// its own (127.0.0.2) or sent through X-Forwarded-For by a trusted proxy
// (IPv4 and IPv6), is in no record of Kafka (events and dead letters,
// keys, values and headers), no line of the log (net/http's TLS
// handshake error names the peer) and nothing of the live page.
func TestIPDropEverywhere(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.ServerCert(t, certFile, keyFile, "inlet", time.Time{}, time.Time{})
	g, ops, web, logs := authGateway(t, brokers, topic, func(c *gateway.Config) {
		c.Ingest.Privacy.IPPolicy = privacy.Drop
		proxies, err := cliflag.ParsePrefixes("127.0.0.0/8")
		if err != nil {
			t.Fatal(err)
		}
		c.Ingest.TrustedProxies = proxies
		c.TLSCert, c.TLSKey, c.TLSListen = certFile, keyFile, "127.0.0.1:0"
		c.UI.ShowRejectedContent = true
	})
	base := "http://" + g.Addr()
	live := openLive(t, base, ops)
	testkit.WaitFor(t, 10*time.Second, "the live page's first stats", func() bool { return strings.Contains(live.String(), "event: stats") })

	const v4, v6 = "198.51.100.77", "2001:db8:77::1234"
	from := fromAddr("127.0.0.2")
	send := func(method, path, body string, headers ...string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := from.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := http.StatusOK; resp.StatusCode != want && !strings.Contains(path, "wrong") {
			t.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	web2 := basicAuth("web", web)
	send("POST", "/v1/batch", `[{"event":"buy","uid":"u1"},{"event":"pay","unknown":1}]`,
		"Content-Type", "application/json", "Authorization", web2, "X-Forwarded-For", v4)
	send("POST", "/v1/track", `{"event":"see"}`, "Content-Type", "application/json", "Authorization", web2, "X-Forwarded-For", v6+", 127.0.0.3")
	send("GET", "/i?e=view&k="+web, "")
	send("GET", "/i?uid=u9&k="+web, "") // no e=: a dead letter
	send("POST", "/v1/batch?wrong", `[{"event":"a"}]`, "Content-Type", "application/json", "Authorization", basicAuth("web", ops))

	// A TLS handshake that fails: net/http logs the peer's address.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", g.TLSAddr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	testkit.WaitFor(t, 10*time.Second, "the TLS handshake error logged", func() bool { return strings.Contains(logs.String(), "TLS handshake error") })

	events := testkit.ConsumeN(t, brokers, topic, 3, 0)
	dead := testkit.ConsumeN(t, brokers, topic+".invalid", 2, time.Second)
	testkit.WaitFor(t, 10*time.Second, "the live page's 5 items", func() bool { return strings.Count(live.String(), "event: item") >= 5 })

	addrs := []string{"127.0.0.2", "198.51.100", "2001:db8:77"}
	check := func(where, what string) {
		t.Helper()
		for _, a := range addrs {
			if strings.Contains(what, a) {
				t.Errorf("%s holds the address %s: %s", where, a, what)
			}
		}
	}
	for _, recs := range [][]testkit.Record{events, dead} {
		for _, r := range recs {
			check("record key", r.Key)
			check("record value", string(r.Value))
			for k, v := range r.Headers {
				check("record header "+k, k+v)
			}
		}
	}
	for _, r := range events {
		if ip, ok := r.Fields["ip"]; ok {
			t.Errorf("event %s has ip %v", r.Value, ip)
		}
	}
	check("the log", logs.String())
	check("the live page", live.String())
	if !strings.Contains(logs.String(), "(ip dropped)") {
		t.Errorf("the TLS handshake error does not say the address was dropped:\n%s", logs)
	}
}

// TestRedactHashStableAcrossRestarts: a client's redaction rules hash
// props.email and context.traits.email and drop traits.phone (a Segment
// field, which inlet's own events refuse: in the dead letter) in records
// and dead letters on Kafka; a second gateway started with the same key
// file writes the same hashes.
func TestRedactHashStableAcrossRestarts(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	cfg.Auth.HTTP = true
	secret := addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "app", Redact: []privacy.Rule{
		{Path: "props.email", Action: "hash"},
		{Path: "/context/traits/email", Action: "hash"},
		{Path: "traits.phone", Action: "drop"},
	}})
	key := bytes.Repeat([]byte{0xa5, 0x17}, 16)
	cfg.Ingest.Privacy.RedactKeyFile = filepath.Join(t.TempDir(), "redact.key")
	if err := os.WriteFile(cfg.Ingest.Privacy.RedactKeyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const email = "ann@example.com"
	body := `[{"event":"signup","props":{"email":"` + email + `","plan":"pro"},"context":{"traits":{"email":"` + email + `"}}},` +
		`{"event":"identify","traits":{"phone":"+32 555 0100","email":"` + email + `"}}]`
	for run := range 2 {
		log, logs := testkit.NewLogBuffer()
		g, err := gateway.Start(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", basicAuth("app", secret))
		if r.Status != http.StatusOK {
			t.Errorf("run %d: %s\n%s", run, r, logs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		_ = g.Shutdown(ctx)
		cancel()
	}
	events := testkit.ConsumeN(t, brokers, topic, 2, 0)
	dead := testkit.ConsumeN(t, brokers, topic+".invalid", 2, time.Second)
	want := privacy.Hash(key, email)
	for _, r := range events {
		if !strings.Contains(string(r.Value), `"props":{"email":"`+want+`","plan":"pro"},"context":{"traits":{"email":"`+want+`"}}`) {
			t.Errorf("event %s: want props.email and context.traits.email hashed to %s", r.Value, want)
		}
	}
	for _, r := range dead { // traits.email has no rule: as sent; the phone is dropped
		if v := string(r.Value); strings.Contains(v, "+32") || !strings.Contains(v, `"traits":{"email":"`+email+`"}`) {
			t.Errorf("dead letter %s: want traits.phone dropped, traits.email as sent", v)
		}
	}
}
