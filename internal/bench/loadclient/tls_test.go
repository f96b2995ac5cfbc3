package loadclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
)

// TestBenchHTTPS loads an HTTPS server with each client: with its CA in
// HTTPConfig.TLS every request is answered; without, each fails as a TLS
// error (the server's certificate is signed by no CA the system trusts).
func TestBenchHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	for _, client := range []string{ClientH1, ClientStd} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			do := func(tc *tls.Config) bench.Result {
				cfg := DefaultHTTPConfig()
				cfg.URL, cfg.Client, cfg.Connections, cfg.TLS = srv.URL+"/v1/batch", client, 1, tc
				h, err := NewHTTP(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return h.Do(ctx)
			}
			for i := range 2 { // a kept connection, then a new request on it
				if r := do(&tls.Config{RootCAs: pool}); !r.OK || r.Status != "204" {
					t.Fatalf("request %d with the server's CA: %+v", i, r)
				}
			}
			r := do(nil)
			if r.OK || r.Err == nil || bench.Classify(r.Err) != bench.KindTLS {
				t.Fatalf("without the server's CA: %+v (kind %q), want a %s error", r, bench.Classify(r.Err), bench.KindTLS)
			}
		})
	}
}
