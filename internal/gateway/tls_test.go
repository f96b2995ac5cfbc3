package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// httpsGateway starts a gateway with --ack spool (no Kafka is needed to
// answer 200: the brokers are a closed port) serving HTTPS with a
// certificate of ca; tlsListen true serves it on --tls-listen, --listen
// staying plain.
func httpsGateway(t *testing.T, ca *testkit.CA, tlsListen bool, reload time.Duration) (g *gateway.Gateway, certFile, keyFile string, logs *testkit.LogBuffer) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.ServerCert(t, certFile, keyFile, "first", time.Time{}, time.Time{})
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events")
	cfg.Ack = gateway.AckSpool
	cfg.TLSCert, cfg.TLSKey, cfg.TLSReloadInterval = certFile, keyFile, reload
	if tlsListen {
		cfg.TLSListen = "127.0.0.1:0"
	}
	log, logs := testkit.NewLogBuffer()
	g, err := gateway.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs)
		}
	})
	return g, certFile, keyFile, logs
}

// peerCN dials addr over TLS trusting ca and returns the server
// certificate's common name.
func peerCN(t *testing.T, ca *testkit.CA, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, ca.ClientTLS())
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestHTTPSCurl: curl with the test CA over TLS 1.2 and TLS 1.3, HTTP/1.1
// and HTTP/2 (ALPN); TLS 1.1 is refused; with --tls-listen the plain
// listener still speaks h2c.
func TestHTTPSCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	ca := testkit.NewCA(t)
	g, _, _, _ := httpsGateway(t, ca, true, 0)
	url := "https://" + g.TLSAddr()
	for _, tc := range []struct {
		args       []string
		tls, proto string
	}{
		{[]string{"--tlsv1.2", "--tls-max", "1.2", "--http1.1"}, "TLSv1.2", "1.1"},
		{[]string{"--tlsv1.2", "--tls-max", "1.2", "--http2"}, "TLSv1.2", "2"},
		{[]string{"--tlsv1.3", "--http1.1"}, "TLSv1.3", "1.1"},
		{[]string{"--tlsv1.3", "--http2"}, "TLSv1.3", "2"},
	} {
		args := append([]string{"-sS", "-v", "--cacert", ca.File, "-H", "Content-Type: application/json",
			"--data", `[{"event":"curl"}]`, "-w", "\n%{http_code} %{http_version}\n"}, tc.args...)
		cmd := exec.Command(curl, append(args, url+"/v1/batch")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", tc.args, err, stderr.Bytes())
		}
		if want := "200 " + tc.proto; !strings.HasSuffix(strings.TrimSpace(string(out)), want) || !strings.Contains(string(out), `"accepted":1`) {
			t.Errorf("curl %v: %q, want the batch accepted and %q", tc.args, out, want)
		}
		if !strings.Contains(stderr.String(), tc.tls) {
			t.Errorf("curl %v did not use %s:\n%s", tc.args, tc.tls, stderr.Bytes())
		}
	}

	// TLS 1.1 (and older) is refused.
	old := ca.ClientTLS()
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if c, err := tls.Dial("tcp", g.TLSAddr(), old); err == nil {
		c.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}

	// The plain listener: HTTP/1.1 and h2c.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	resp, err := (&http.Client{Transport: tr}).Get("http://" + g.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
		t.Fatalf("plain listener: %s %s, want 200 over h2c", resp.Proto, resp.Status)
	}
}

// TestHTTPSReload: the certificate is replaced (Reload, as on SIGHUP)
// while clients send requests on kept-alive HTTP/1.1 and HTTP/2
// connections and on new ones: every request is answered 200, new
// connections get the new certificate, old ones go on. A bad new
// certificate is logged and the old one kept.
func TestHTTPSReload(t *testing.T) {
	ca := testkit.NewCA(t)
	g, certFile, keyFile, logs := httpsGateway(t, ca, false, 0)
	addr := g.Addr()
	if g.TLSAddr() != addr {
		t.Fatalf("TLSAddr %q, want --listen's %q without --tls-listen", g.TLSAddr(), addr)
	}
	if cn := peerCN(t, ca, addr); cn != "first" {
		t.Fatalf("certificate %q, want first", cn)
	}

	clients := map[string]*http.Client{}
	for _, name := range []string{"h1 kept", "h2 kept", "h1 new"} {
		tr := &http.Transport{TLSClientConfig: ca.ClientTLS(), Protocols: new(http.Protocols)}
		switch name {
		case "h1 kept":
			tr.Protocols.SetHTTP1(true)
		case "h2 kept":
			tr.Protocols.SetHTTP2(true)
		case "h1 new":
			tr.Protocols.SetHTTP1(true)
			tr.DisableKeepAlives = true
		}
		clients[name] = &http.Client{Transport: tr, Timeout: 20 * time.Second}
	}
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		ok       = map[string]*atomic.Int64{}
	)
	for name, cl := range clients {
		ok[name] = &atomic.Int64{}
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				body := fmt.Sprintf(`[{"event":"load","props":{"i":%d}}]`, i)
				resp, err := cl.Post("https://"+addr+"/v1/batch", "application/json", strings.NewReader(body))
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("%s: %s", resp.Status, b)
					}
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, name+": "+err.Error())
					mu.Unlock()
					continue
				}
				ok[name].Add(1)
			}
		})
	}
	waitCount := func(what string, min int64) {
		testkit.WaitFor(t, 30*time.Second, what, func() bool {
			for _, n := range ok {
				if n.Load() < min {
					return false
				}
			}
			return true
		})
	}
	waitCount("requests on every client", 20)

	ca.ServerCert(t, certFile, keyFile, "second", time.Time{}, time.Time{})
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn := peerCN(t, ca, addr); cn != "second" {
		t.Fatalf("certificate %q after the reload, want second", cn)
	}
	before := map[string]int64{}
	for name, n := range ok {
		before[name] = n.Load()
	}
	testkit.WaitFor(t, 30*time.Second, "requests on every client after the reload", func() bool {
		for name, n := range ok {
			if n.Load() < before[name]+20 {
				return false
			}
		}
		return true
	})

	// A bad certificate: the key of another one.
	ca.ServerCert(t, certFile, filepath.Join(t.TempDir(), "other-key.pem"), "third", time.Time{}, time.Time{})
	if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("Reload with a mismatched key: %v", err)
	}
	if cn := peerCN(t, ca, addr); cn != "second" {
		t.Fatalf("certificate %q after a failed reload, want second kept", cn)
	}
	if n := logs.Count("HTTPS certificate not reloaded; keeping the one in use"); n != 1 {
		t.Errorf("%d lines logged for the failed reload, want 1", n)
	}
	stop.Store(true)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed across the reload, first: %v", len(failures), failures[0])
	}
	for name, n := range ok {
		t.Logf("%s: %d requests", name, n.Load())
	}
}

// TestHTTPSReloadOnChange: with --tls-reload-interval the new files are
// picked up without a signal; an expired one is not.
func TestHTTPSReloadOnChange(t *testing.T) {
	ca := testkit.NewCA(t)
	g, certFile, keyFile, logs := httpsGateway(t, ca, true, 50*time.Millisecond)
	ca.ServerCert(t, certFile, keyFile, "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	testkit.WaitFor(t, 10*time.Second, "the expired certificate refused", func() bool {
		return logs.Count("expired on") > 0
	})
	if cn := peerCN(t, ca, g.TLSAddr()); cn != "first" {
		t.Fatalf("certificate %q, want first kept", cn)
	}
	time.Sleep(20 * time.Millisecond) // a later modification time than the expired one's
	ca.ServerCert(t, certFile, keyFile, "second", time.Time{}, time.Time{})
	testkit.WaitFor(t, 10*time.Second, "the new certificate served", func() bool {
		return peerCN(t, ca, g.TLSAddr()) == "second"
	})
	if n := logs.Count("HTTPS certificate not reloaded"); n != 1 {
		t.Errorf("the expired certificate was logged %d times, want once", n)
	}
}

// TestHTTPSConfig: bad settings fail at start with one line.
func TestHTTPSConfig(t *testing.T) {
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	ca.ServerCert(t, cert, key, "x", time.Time{}, time.Time{})
	for _, tc := range []struct {
		cert, key, listen string
		want              string
	}{
		{cert, "", "", "--tls-cert and --tls-key go together"},
		{"", "", "127.0.0.1:0", "--tls-cert and --tls-key go together"},
		{cert, filepath.Join(dir, "missing.pem"), "", "--tls-key " + filepath.Join(dir, "missing.pem")},
		{key, key, "", "--tls-cert " + key},
	} {
		cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events")
		cfg.TLSCert, cfg.TLSKey, cfg.TLSListen = tc.cert, tc.key, tc.listen
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("cert %q key %q listen %q: %v, want one line with %q", tc.cert, tc.key, tc.listen, err, tc.want)
		}
	}
}
