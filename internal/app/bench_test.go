package app

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

func TestParseBenchHTTP(t *testing.T) {
	t.Parallel()
	env, _, _ := testEnv(map[string]string{"INLET_RATE": "500", "INLET_TARGET": "http://127.0.0.1:9/x", "INLET_EVENTS": "7"})
	cfg, err := ParseBenchHTTP([]string{"--events", "3", "--connections", "20", "--header", "X-A: 1", "--header", "Host: h.example", "--gzip"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Run.Rate != 500 || cfg.HTTP.URL != "http://127.0.0.1:9/x" || cfg.HTTP.Events != 3 || !cfg.HTTP.Gzip {
		t.Errorf("environment or flags not applied: %+v", cfg)
	}
	if cfg.Run.Workers != 20 || cfg.HTTP.Connections != 20 || !cfg.Run.Open() {
		t.Errorf("open loop: %d workers over %d connections, want 20", cfg.Run.Workers, cfg.HTTP.Connections)
	}
	if cfg.HTTP.Header.Get("X-A") != "1" || cfg.HTTP.Header.Get("Host") != "h.example" {
		t.Errorf("headers %v", cfg.HTTP.Header)
	}
	if strings.Contains(cfg.Command, "h.example") || !strings.Contains(cfg.Command, "--header X-A:...") {
		t.Errorf("header values must not reach the reports: %q", cfg.Command)
	}

	env, _, _ = testEnv(nil)
	cfg, err = ParseBenchHTTP([]string{"--concurrency", "8"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Run.Open() || cfg.Run.Workers != 8 || cfg.HTTP.Connections != 8 {
		t.Errorf("closed loop: %+v", cfg)
	}
	d := loadclient.DefaultHTTPConfig()
	if d.Events != 5 || d.EventBytes != 100 || d.Connections != 100 || d.URL != "http://127.0.0.1:8080/v1/batch" {
		t.Errorf("documented defaults changed: %+v", d)
	}

	body := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(body, []byte(`{"event":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = ParseBenchHTTP([]string{"--body-file", body}, env)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.HTTP.Body) != `{"event":"x"}` || cfg.HTTP.Events != 0 {
		t.Errorf("body file: %q, %d events", cfg.HTTP.Body, cfg.HTTP.Events)
	}
}

func TestMainBenchErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no target kind", []string{"bench"}, 2, "inlet bench http"},
		{"unknown kind", []string{"bench", "ftp"}, 2, `unknown target "ftp"`},
		{"concurrency in an open loop", []string{"bench", "http", "--rate", "10", "--concurrency", "5"}, 2, "--concurrency is for the closed loop"},
		{"ramp without rate", []string{"bench", "http", "--rate-start", "10"}, 2, "needs a rate"},
		{"bad header", []string{"bench", "http", "--header", "nocolon"}, 2, "invalid header"},
		{"bad target", []string{"bench", "http", "--target", "127.0.0.1:8080"}, 2, "want http://"},
		{"missing body file", []string{"bench", "http", "--body-file", "/nonexistent/body"}, 1, "reading --body-file"},
		{"bad report path", []string{"bench", "http", "--html", "/nonexistent/dir/r.html"}, 1, "creating report file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, out, errb := testEnv(nil)
			code := Main(context.Background(), tc.args, env)
			if code != tc.code || !strings.Contains(errb.String()+out.String(), tc.msg) {
				t.Fatalf("exit %d, output %q; want %d with %q", code, errb.String()+out.String(), tc.code, tc.msg)
			}
		})
	}
}

func TestBenchHTTPCommand(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	files := map[string]string{"json": filepath.Join(dir, "r.json"), "hdr": filepath.Join(dir, "r.hgrm"), "html": filepath.Join(dir, "r.html")}

	env, out, errb := testEnv(nil)
	code := Main(context.Background(), []string{"bench", "http", "--target", srv.URL + "/v1/batch", "--rate", "200",
		"--connections", "4", "--warmup", "100ms", "--duration", "500ms",
		"--json", files["json"], "--hdr", files["hdr"], "--html", files["html"]}, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"open loop at 200 req/s", "100 sent, 100 ok (100.00%)", "202: 100", "send lag"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(errb.String(), "\r") {
		t.Errorf("a progress line on a stderr that is no terminal: %q", errb.String())
	}
	f, err := os.Open(files["json"])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := report.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 100 || rep.WarmupRequests != 20 || served.Load() != 120 || !strings.Contains(rep.Command, "--rate 200") {
		t.Errorf("report: %d requests, %d in the warmup, server saw %d; command %q", rep.Requests, rep.WarmupRequests, served.Load(), rep.Command)
	}
	for _, name := range []string{files["hdr"], files["html"]} {
		if b, err := os.ReadFile(name); err != nil || len(b) < 500 {
			t.Errorf("%s: %d bytes, %v", name, len(b), err)
		}
	}

	// --json -: the report on stdout, the summary on stderr.
	env, out, errb = testEnv(nil)
	if code := Main(context.Background(), []string{"bench", "http", "--target", srv.URL, "--concurrency", "2",
		"--warmup", "0s", "--duration", "200ms", "--json", "-"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["mode"] != "closed" {
		t.Errorf("stdout is not the JSON report (%v): %s", err, out.String())
	}
	if !strings.Contains(errb.String(), "closed loop, 2 concurrent") {
		t.Errorf("no summary on stderr: %s", errb.String())
	}
}

func TestBenchHTTPNothingSucceeds(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	env, out, errb := testEnv(nil)
	start := time.Now()
	code := Main(context.Background(), []string{"bench", "http", "--target", "http://" + addr + "/", "--concurrency", "1",
		"--warmup", "0s", "--duration", "100ms"}, env)
	if code != 1 || !strings.Contains(errb.String(), "no request succeeded") || !strings.Contains(out.String(), "refused") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

// TestBenchHTTPSFlags: `inlet bench http` against an HTTPS server trusts the
// CA of --tls-ca, warns with --tls-insecure-skip-verify, refuses a CA file
// that is missing or holds no certificate, and refuses either flag with an
// http:// target.
func TestBenchHTTPSFlags(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv(nil)
		args = append([]string{"bench", "http", "--concurrency", "2", "--warmup", "0s", "--duration", "300ms"}, args...)
		return Main(context.Background(), args, env), out.String(), errb.String()
	}
	if code, out, errb := run("--target", srv.URL+"/v1/batch", "--tls-ca", ca); code != 0 || !strings.Contains(out, "202: ") || strings.Contains(out, "tls") {
		t.Errorf("with the server's CA: exit %d\n%s\n%s", code, out, errb)
	}
	if code, out, errb := run("--target", srv.URL+"/v1/batch", "--tls-insecure-skip-verify"); code != 0 || !strings.Contains(out, "202: ") ||
		!strings.Contains(errb, "warning: --tls-insecure-skip-verify") {
		t.Errorf("skipping verification: exit %d\n%s\n%s", code, out, errb)
	}
	if code, out, errb := run("--target", srv.URL+"/v1/batch"); code == 0 || !strings.Contains(out, "tls") {
		t.Errorf("without the server's CA: exit %d, want a failure with the requests counted as tls errors\n%s\n%s", code, out, errb)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "none.pem"), "--tls-ca: open"},
		{"not PEM", notPEM, "holds no PEM certificate"},
	} {
		if code, _, errb := run("--target", srv.URL+"/v1/batch", "--tls-ca", tc.file); code == 0 || !strings.Contains(errb, tc.want) {
			t.Errorf("CA file %s: exit %d, stderr %q; want %q", tc.name, code, errb, tc.want)
		}
	}
	if code, _, errb := run("--target", "http://127.0.0.1:1/v1/batch", "--tls-ca", ca); code == 0 || !strings.Contains(errb, "are for an https:// --target") {
		t.Errorf("--tls-ca with http://: exit %d, stderr %q", code, errb)
	}
}
