package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

func TestParseBenchCatalog(t *testing.T) {
	env, _, _ := testEnv(map[string]string{"INLET_CLIENT_ID": "c1", "INLET_SECRET": "from-env", "INLET_KEYS": "50"})
	cfg, err := ParseBenchCatalog("grpc", []string{"--target", "h:1", "--connections", "4", "--concurrency", "64", "--secret", "s3cret"}, env)
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Targets[0]
	if len(cfg.Targets) != 1 || tc.Proto != loadclient.ProtoGRPC || tc.Addr != "h:1" || tc.Connections != 4 || cfg.Run.Workers != 64 ||
		tc.ClientID != "c1" || tc.Secret != "s3cret" || tc.Keys != 50 || tc.Auth != loadclient.AuthSession || !cfg.Prefill || cfg.Run.Open() {
		t.Fatalf("%+v", cfg)
	}
	if strings.Contains(cfg.Command, "s3cret") || !strings.Contains(cfg.Command, "--secret ...") {
		t.Fatalf("the secret is in the reports' command: %s", cfg.Command)
	}

	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("from-file\n"), 0o600)
	env, _, _ = testEnv(nil)
	cfg, err = ParseBenchCatalog("catalog", []string{"--grpc-target", "g:1", "--thrift-target", "t:2", "--client-id", "c1", "--secret-file", secret,
		"--rate", "1000", "--max-in-flight", "32", "--thrift-transport", "buffered", "--miss", "--auth", "secret"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 2 || cfg.Targets[0].Addr != "g:1" || cfg.Targets[1].Addr != "t:2" || cfg.Targets[1].Proto != loadclient.ProtoThrift ||
		cfg.Targets[1].ThriftTransport != loadclient.ThriftBuffered || cfg.Targets[1].Secret != "from-file" || !cfg.Targets[0].Miss ||
		cfg.Run.Rate != 1000 || cfg.Run.Workers != 32 || cfg.Targets[0].Auth != loadclient.AuthSecret {
		t.Fatalf("%+v", cfg)
	}
	if cfg, err = ParseBenchCatalog("thrift", nil, env); err != nil || cfg.Targets[0].Addr != "127.0.0.1:9091" || cfg.Targets[0].ClientID != "" {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
	if cfg, err = ParseBenchCatalog("catalog", []string{"--proto", "thrift"}, env); err != nil || len(cfg.Targets) != 1 || cfg.Targets[0].Proto != loadclient.ProtoThrift {
		t.Fatalf("--proto thrift: %v %+v", err, cfg)
	}

	for _, c := range []struct {
		sub  string
		args []string
		want string
	}{
		{"grpc", []string{"--rate", "10", "--concurrency", "4"}, "--concurrency is for the closed loop"},
		{"grpc", []string{"--max-in-flight", "4"}, "--max-in-flight is for the open loop"},
		{"grpc", []string{"--miss", "--keys", "4"}, "--miss or --keys"},
		{"grpc", []string{"--secret", "x"}, "needs its --client-id"},
		{"grpc", []string{"--client-id", "x"}, "needs its secret"},
		{"grpc", []string{"--client-id", "x", "--secret", "y", "--secret-file", secret}, "not both"},
		{"grpc", []string{"--target", "nohost"}, "want host:port"},
		{"grpc", []string{"--auth", "token"}, "want session or secret"},
		{"thrift", []string{"--thrift-transport", "zlib"}, "want framed or buffered"},
		{"catalog", []string{"--proto", "grpc,http"}, `--proto "grpc,http"`},
		{"catalog", []string{"--proto", "grpc,grpc"}, "twice"},
		{"grpc", []string{"--connections", "0"}, "connections must be positive"},
	} {
		env, _, errb := testEnv(nil)
		if _, err := ParseBenchCatalog(c.sub, c.args, env); err != errUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s %v: %v, %q (want %q)", c.sub, c.args, err, errb.String(), c.want)
		}
	}
}

// TestBenchCatalogCommand runs inlet bench catalog against the real
// catalog server: both protocols, side by side, hits after the prefill, the
// session token after the first calls, reports of both.
func TestBenchCatalogCommand(t *testing.T) {
	s := startCatalogServer(t, "")
	dir := t.TempDir()
	out := mustMain(t, nil, "bench", "catalog", "--grpc-target", s.grpcAddr, "--thrift-target", s.thriftAddr,
		"--client-id", "admin", "--secret-file", s.adminSecretFn, "--keys", "20", "--group", "shop",
		"--concurrency", "4", "--duration", "300ms", "--warmup", "100ms", "--json", filepath.Join(dir, "r.json"), "--hdr", filepath.Join(dir, "r.hgrm"))
	for _, want := range []string{"gRPC inf.Data/DataType " + s.grpcAddr, "Thrift inf.Data.DataType " + s.thriftAddr, "side by side", "lookups/s ok", "p99 ms", "grpc/thrift lookups/s:"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Count(out, "auth        session tokens: ") != 2 {
		t.Errorf("no auth line per run:\n%s", out)
	}
	for _, proto := range []string{"grpc", "thrift"} {
		b, err := os.ReadFile(filepath.Join(dir, "r."+proto+".json"))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := report.ReadJSON(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK == 0 || rep.OK != rep.Requests || len(rep.Status) != 1 || rep.Status[loadclient.StatusOK] != rep.OK || len(rep.Errors) != 0 {
			t.Errorf("%s: %d requests, %d ok, statuses %v, errors %v", proto, rep.Requests, rep.OK, rep.Status, rep.Errors)
		}
		if _, err := os.Stat(filepath.Join(dir, "r."+proto+".hgrm")); err != nil {
			t.Error(err)
		}
	}
	// The prefill gave the 20 keys their codes: the catalog has them.
	list := mustMain(t, nil, "catalog", "list", "shop", "--addr", s.grpcAddr, "--client-id", "admin", "--secret", s.adminSecret)
	if strings.Count(list, "\n") != 20 || !strings.Contains(list, `"key-19"`) {
		t.Errorf("after the run the catalog lists:\n%s", list)
	}
}

// TestBenchCatalogSessionTokenReuse: against the real server, only the
// first call presents the secret; the others the session token it got.
func TestBenchCatalogSessionTokenReuse(t *testing.T) {
	s := startCatalogServer(t, "buffered")
	for _, proto := range []string{"grpc", "thrift"} {
		addr := s.grpcAddr
		if proto == "thrift" {
			addr = s.thriftAddr
		}
		env, _, errb := testEnv(map[string]string{"INLET_SECRET": s.readerSecret})
		cfg, err := ParseBenchCatalog(proto, []string{"--target", addr, "--client-id", "reader", "--thrift-transport", "buffered",
			"--keys", "5", "--concurrency", "3", "--duration", "200ms", "--warmup", "0s"}, env)
		if err != nil {
			t.Fatal(err, errb)
		}
		runs, err := loadclient.BenchCatalog(t.Context(), cfg, errb)
		if err != nil {
			t.Fatal(err)
		}
		a, rep := runs[0].Auth, runs[0].Report
		if rep.OK == 0 || rep.OK != rep.Requests || a.Secret != 1 || a.Secret+a.Session != rep.Requests+5 || a.Refused != 0 || a.Adopted != 1 {
			t.Errorf("%s: %d requests (%d ok): %+v", proto, rep.Requests, rep.OK, a)
		}
	}
}

// TestBenchCatalogErrors: a wrong secret fails the prefill with a line that
// says so; with --miss (no prefill) every lookup is counted Unauthenticated
// and the run fails; an open loop of first-sight misses fills them all.
func TestBenchCatalogErrors(t *testing.T) {
	s := startCatalogServer(t, "")
	code, _, errs := runMain(t, nil, "bench", "thrift", "--target", s.thriftAddr, "--client-id", "admin", "--secret", "wrong", "--duration", "100ms", "--warmup", "0s")
	if code != 1 || !strings.Contains(errs, "Unauthenticated") || !strings.Contains(errs, "are the credentials right?") {
		t.Errorf("wrong secret: exit %d\n%s", code, errs)
	}
	code, out, errs := runMain(t, nil, "bench", "grpc", "--target", s.grpcAddr, "--client-id", "admin", "--secret", "wrong", "--miss", "--duration", "100ms", "--warmup", "0s", "--concurrency", "2")
	if code != 1 || !strings.Contains(out, "Unauthenticated: ") || strings.Contains(out, "OK: ") || !strings.Contains(errs, "no request succeeded") {
		t.Errorf("wrong secret, --miss: exit %d\n%s\n%s", code, out, errs)
	}

	dir := t.TempDir()
	start := time.Now()
	mustMain(t, map[string]string{"INLET_SECRET": s.adminSecret}, "bench", "grpc", "--target", s.grpcAddr, "--client-id", "admin", "--miss", "--group", "fills",
		"--rate", "200", "--duration", "500ms", "--warmup", "0s", "--json", filepath.Join(dir, "miss.json"))
	b, _ := os.ReadFile(filepath.Join(dir, "miss.json"))
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "open" || rep.Intended != 100 || rep.OK+rep.Dropped != 100 || rep.OK < 90 {
		t.Errorf("open loop of misses: %+v (%v)", rep, time.Since(start))
	}
	list := mustMain(t, nil, "catalog", "list", "fills", "--addr", s.grpcAddr, "--client-id", "admin", "--secret", s.adminSecret)
	if n := strings.Count(list, "\n"); int64(n) != rep.OK {
		t.Errorf("%d first-sight lookups ok, %d entries in the catalog", rep.OK, n)
	}
}
