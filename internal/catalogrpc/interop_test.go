package catalogrpc

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// requireReal: under `make test` a missing tool fails the test rather than
// skipping it.
func requireReal() bool { return os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" }

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if requireReal() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// python returns the venv python of scripts/python.sh (PyPI's thrift and
// grpcio-tools), and a directory of Python code generated from the IDL
// files: gRPC in <dir>/grpc (grpc_tools.protoc), Thrift in <dir>/thrift
// (Debian's thrift compiler). Both generators name data's package inf, so
// each protocol runs in a process of its own.
func python(t *testing.T) (py, gen string) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(repo, "scripts", "python.sh"))
	cmd.Dir, cmd.Stderr = repo, &stderr
	out, err := cmd.Output()
	if err != nil {
		skipOrFail(t, "scripts/python.sh failed (no Python venv with thrift and grpcio-tools): %v\n%s", err, stderr.String())
	}
	py = strings.TrimSpace(string(out))
	thriftc, err := exec.LookPath("thrift")
	if err != nil {
		skipOrFail(t, "the thrift compiler is not installed (scripts/tools.sh installs Debian's thrift-compiler)")
	}
	gen = t.TempDir()
	api := filepath.Join(repo, "api")
	run := func(name string, args ...string) {
		t.Helper()
		c := exec.Command(name, args...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	for _, d := range []string{"grpc", "thrift"} {
		if err := os.Mkdir(filepath.Join(gen, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(py, "-m", "grpc_tools.protoc", "-I", api, "--python_out="+filepath.Join(gen, "grpc"), "--grpc_python_out="+filepath.Join(gen, "grpc"),
		"inf/data.proto", "catalog/v1/catalog.proto")
	for _, f := range []string{"inf/data.thrift", "catalog/v1/catalog.thrift"} {
		run(thriftc, "--gen", "py", "-out", filepath.Join(gen, "thrift"), filepath.Join(api, f))
	}
	return py, gen
}

// realServer serves a real catalog (embedded store in dir, mode open) and
// real credentials (dir/clients.json, see addClient) on both front ends.
func realServer(t *testing.T, dir string, cfg Config) (s *Server, grpcAddr, thriftAddr string) {
	t.Helper()
	acfg := auth.DefaultConfig()
	acfg.ClientsFile = filepath.Join(dir, "clients.json")
	au, err := auth.Open(acfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { au.Close() })
	ccfg := catalog.DefaultConfig()
	ccfg.Path = filepath.Join(dir, "catalog.db")
	ccfg.Store = catalog.StoreEmbedded
	cat, err := catalog.Open(ccfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	s, err = New(cat, au, cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, thriftAddr = testkit.ServeTwo(t, s.ServeGRPC, s.ServeThrift, s.Shutdown)
	return s, grpcAddr, thriftAddr
}

// addClient adds client id to dir/clients.json and returns its secret.
func addClient(t *testing.T, dir, id string) string {
	t.Helper()
	secret, err := auth.AddClient(filepath.Join(dir, "clients.json"), auth.Client{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

type interopResult struct {
	First  int64             `json:"first"`
	Shared int64             `json:"shared"`
	Bad    map[string]string `json:"bad"`
}

func runInterop(t *testing.T, py, gen string, args ...string) interopResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(py, append([]string{"testdata/py/interop.py", args[0], filepath.Join(gen, args[0])}, args[1:]...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("python interop %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("python interop %v did not finish in 60s\nstderr: %s", args, stderr.String())
	}
	var r interopResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("python interop %v printed %q: %v", args, stdout.String(), err)
	}
	return r
}

// Python clients generated from the IDL files call both front ends: first
// sight, repeat, session token reuse and bad credentials (the script checks
// each); the test checks the two protocols agree on one catalog.
func TestPythonInterop(t *testing.T) {
	py, gen := python(t)
	dir := t.TempDir()
	secret := addClient(t, dir, "py")
	_, grpcAddr, thriftAddr := realServer(t, dir, DefaultConfig())

	g := runInterop(t, py, gen, "grpc", grpcAddr, "py", secret, "shop")
	th := runInterop(t, py, gen, "thrift", thriftAddr, "py", secret, "shop", "framed")
	if g.Shared == 0 || g.Shared != th.Shared {
		t.Errorf("py_shared: code %d over gRPC, %d over Thrift: want one code", g.Shared, th.Shared)
	}
	if g.First == th.First {
		t.Errorf("two event types got one code %d", g.First)
	}
	for _, r := range []interopResult{g, th} {
		if w, u := r.Bad["wrong_secret"], r.Bad["unknown_client"]; w != u || !strings.Contains(w, "no client has these credentials") {
			t.Errorf("wrong secret answered %q, unknown client %q: want one answer", w, u)
		}
	}
	t.Logf("gRPC %+v\nThrift %+v", g, th)

	// Thrift buffered, on a server and catalog of its own.
	bdir := t.TempDir()
	bsecret := addClient(t, bdir, "py")
	bcfg := DefaultConfig()
	bcfg.ThriftTransport = TransportBuffered
	_, _, bThrift := realServer(t, bdir, bcfg)
	b := runInterop(t, py, gen, "thrift", bThrift, "py", bsecret, "shop", "buffered")
	if b.First == 0 || b.Shared == 0 {
		t.Errorf("thrift buffered: %+v", b)
	}
}
