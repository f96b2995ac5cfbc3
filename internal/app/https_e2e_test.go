package app

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestHTTPSSIGHUP: `inlet serve --tls-cert --tls-key` reloads its
// certificate on SIGHUP, rather than stopping, while a loop of requests
// runs on kept-alive and new connections: none fails, new connections get
// the new certificate; SIGTERM still stops it gracefully.
func TestHTTPSSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.ServerCert(t, cert, key, "first", time.Time{}, time.Time{})
	addr := testkit.FreeAddr(t)
	// --ack spool takes events with Kafka unreachable: no broker needed.
	p := testkit.Start(t, nil, "serve", "--listen", addr, "--data-dir", t.TempDir(), "--brokers", testkit.FreeAddr(t),
		"--tls-cert", cert, "--tls-key", key, "--tls-reload-interval", "0", "--shutdown-timeout", "3s")
	testkit.WaitListening(t, addr, 20*time.Second)
	cn := func() string {
		c, err := tls.Dial("tcp", addr, ca.ClientTLS())
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("certificate %q, want first", got)
	}

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		counts   [2]atomic.Int64
	)
	for i, keep := range []bool{true, false} {
		cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(), DisableKeepAlives: !keep, ForceAttemptHTTP2: true}}
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				resp, err := cl.Post("https://"+addr+"/v1/batch", "application/json", strings.NewReader(fmt.Sprintf(`[{"event":"hup","props":{"n":%d}}]`, n)))
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("%s %s", resp.Status, b)
					}
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					continue
				}
				counts[i].Add(1)
			}
		})
	}
	atLeast := func(what string, n0, n1 int64) {
		testkit.WaitFor(t, 30*time.Second, what, func() bool { return counts[0].Load() >= n0 && counts[1].Load() >= n1 })
	}
	atLeast("requests before the swap", 20, 20)

	ca.ServerCert(t, cert, key, "second", time.Time{}, time.Time{})
	p.Signal(t, syscall.SIGHUP)
	testkit.WaitFor(t, 10*time.Second, "the new certificate served", func() bool { return cn() == "second" })
	atLeast("requests after the swap", counts[0].Load()+20, counts[1].Load()+20)
	stop.Store(true)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed across the swap, first: %s", len(failures), failures[0])
	}
	if !strings.Contains(p.Logs.String(), "HTTPS certificate reloaded") {
		t.Fatalf("no reload logged:\n%s", p.Logs)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	t.Logf("requests: %d kept-alive, %d on new connections", counts[0].Load(), counts[1].Load())
}
