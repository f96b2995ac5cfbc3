package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/catalogrpc"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// runMain runs inlet with args and the environment vars, and returns the
// exit code, stdout and stderr.
func runMain(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	env, out, errb := testEnv(vars)
	code := Main(context.Background(), args, env)
	return code, out.String(), errb.String()
}

// mustMain is runMain that fails the test on a non-zero exit.
func mustMain(t *testing.T, vars map[string]string, args ...string) string {
	t.Helper()
	code, out, errs := runMain(t, vars, args...)
	if code != 0 {
		t.Fatalf("inlet %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// catalogServer is a real catalog served over gRPC and Thrift in this
// process, on an embedded store, with an admin client and a reader.
type catalogServer struct {
	grpcAddr, thriftAddr       string
	adminSecret, readerSecret  string
	clientsFile, adminSecretFn string
	dir                        string
}

func startCatalogServer(t *testing.T, transport string) *catalogServer {
	t.Helper()
	dir := t.TempDir()
	s := &catalogServer{dir: dir, clientsFile: filepath.Join(dir, "clients.json")}
	var err error
	if s.adminSecret, err = auth.AddClient(s.clientsFile, auth.Client{ID: "admin", Admin: true}); err != nil {
		t.Fatal(err)
	}
	if s.readerSecret, err = auth.AddClient(s.clientsFile, auth.Client{ID: "reader"}); err != nil {
		t.Fatal(err)
	}
	s.adminSecretFn = filepath.Join(dir, "admin.secret")
	if err := os.WriteFile(s.adminSecretFn, []byte(s.adminSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := testkit.Logger(t)
	// Not throttled: these tests present wrong secrets on purpose, from
	// the one address the good calls come from too.
	au, err := auth.Open(auth.Config{ClientsFile: s.clientsFile, FailBurst: -1}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { au.Close() })
	ccfg := catalog.DefaultConfig()
	ccfg.Store, ccfg.Path = catalog.StoreEmbedded, filepath.Join(dir, "catalog.db")
	cat, err := catalog.Open(ccfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	rcfg := catalogrpc.DefaultConfig()
	if transport != "" {
		rcfg.ThriftTransport = transport
	}
	srv, err := catalogrpc.New(cat, au, rcfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.grpcAddr, s.thriftAddr = gl.Addr().String(), tl.Addr().String()
	go srv.ServeGRPC(gl)
	go srv.ServeThrift(tl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return s
}

// catalogModes are the two ways to reach a catalog: the embedded store
// directly, and --addr to a running server; each returns the flags.
func catalogModes(t *testing.T) map[string]func(t *testing.T) []string {
	return map[string]func(t *testing.T) []string{
		"direct": func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} },
		"addr": func(t *testing.T) []string {
			s := startCatalogServer(t, "")
			return []string{"--addr", s.grpcAddr, "--client-id", "admin", "--secret-file", s.adminSecretFn}
		},
	}
}

func decodeEntry(t *testing.T, s string) catalog.Entry {
	t.Helper()
	var e catalog.Entry
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		t.Fatalf("not an entry: %v\n%s", err, s)
	}
	return e
}

// TestCatalogCommandsRoundTrip: set, get, list, export and import, on the
// embedded store directly and over --addr.
func TestCatalogCommandsRoundTrip(t *testing.T) {
	for mode, flags := range catalogModes(t) {
		t.Run(mode, func(t *testing.T) {
			f := flags(t)
			dir := t.TempDir()
			schema := filepath.Join(dir, "schema.json")
			os.WriteFile(schema, []byte(`{"type":"object","required":["price"],"properties":{"price":{"type":"number"}}}`), 0o644)
			cmd := func(args ...string) []string { return append(args, f...) }

			// Flags after the arguments work too.
			buy := decodeEntry(t, mustMain(t, nil, cmd("catalog", "set", "shop", "purchase", "--display-name", "Purchase", "--schema-file", schema)...))
			if buy.Code == 0 || buy.DisplayName != "Purchase" || buy.Status != catalog.StatusPlanned || !strings.Contains(string(buy.Schema), "price") {
				t.Fatalf("set: %+v", buy)
			}
			view := decodeEntry(t, mustMain(t, nil, cmd("catalog", "set", "--status", "observed", "shop", "view")...))
			if view.Code == buy.Code || view.Status != catalog.StatusObserved {
				t.Fatalf("second set: %+v", view)
			}
			decodeEntry(t, mustMain(t, nil, cmd("catalog", "set", "auth", "login")...))

			// A set changes only what it names.
			again := decodeEntry(t, mustMain(t, nil, cmd("catalog", "set", "shop", "purchase", "--status", "blocked")...))
			if again.Code != buy.Code || again.DisplayName != "Purchase" || again.Status != catalog.StatusBlocked || len(again.Schema) == 0 {
				t.Fatalf("set --status only: %+v", again)
			}
			got := mustMain(t, nil, cmd("catalog", "get", "shop", "purchase")...)
			if !strings.Contains(got, "\n  \"code\"") { // pretty
				t.Errorf("get is not indented JSON:\n%s", got)
			}
			if e := decodeEntry(t, got); e.Code != buy.Code || e.Status != catalog.StatusBlocked {
				t.Fatalf("get: %+v", e)
			}

			// list: one JSON entry per line, in (group, name) order.
			lines := strings.Split(strings.TrimSpace(mustMain(t, nil, cmd("catalog", "list")...)), "\n")
			var names []string
			for _, l := range lines {
				e := decodeEntry(t, l)
				names = append(names, e.Group+"/"+e.Name)
			}
			if strings.Join(names, " ") != "auth/login shop/purchase shop/view" {
				t.Fatalf("list: %v", names)
			}
			if out := mustMain(t, nil, cmd("catalog", "list", "shop", "--limit", "1", "--page-size", "1")...); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"purchase"`) {
				t.Fatalf("list shop --limit 1:\n%s", out)
			}
			// Paged through one at a time: every entry.
			if out := mustMain(t, nil, cmd("catalog", "list", "--page-size", "1")...); strings.Count(out, "\n") != 3 {
				t.Fatalf("list --page-size 1:\n%s", out)
			}
			text := mustMain(t, nil, cmd("catalog", "list", "--format", "text")...)
			tl := strings.Split(strings.TrimSpace(text), "\n")
			if len(tl) != 4 || !strings.HasPrefix(tl[0], "GROUP") || strings.Index(tl[1], "login") != strings.Index(tl[2], "purchase") {
				t.Fatalf("list --format text is not aligned columns:\n%s", text)
			}

			// export, then import into a fresh catalog: the same plan.
			plan := filepath.Join(dir, "plan.json")
			mustMain(t, nil, cmd("catalog", "export", plan)...)
			stdout := mustMain(t, nil, cmd("catalog", "export")...)
			b, _ := os.ReadFile(plan)
			if string(b) != stdout || !strings.Contains(stdout, `"events"`) {
				t.Fatalf("export to a file and to stdout differ:\n%s\n%s", b, stdout)
			}
			var p catalog.Plan
			if err := json.Unmarshal(b, &p); err != nil || len(p.Events) != 3 {
				t.Fatalf("export: %v\n%s", err, b)
			}

			fresh := []string{"--data-dir", t.TempDir()}
			out := mustMain(t, nil, append([]string{"catalog", "import", plan}, fresh...)...)
			if strings.TrimSpace(out) != "imported 3 events: 3 created, 0 changed, 0 unchanged" {
				t.Fatalf("import: %q", out)
			}
			// Importing its own export changes nothing.
			out = mustMain(t, nil, cmd("catalog", "import", plan)...)
			if strings.TrimSpace(out) != "imported 3 events: 0 created, 0 changed, 3 unchanged" {
				t.Fatalf("import of the export: %q", out)
			}
			// A plan from stdin: one new, one changed.
			env, stdoutb, stderrb := testEnv(nil)
			env.Stdin = strings.NewReader(`{"events":[{"group":"shop","name":"view","display_name":"View","status":"planned"},{"group":"shop","name":"cart"}]}`)
			if code := Main(context.Background(), cmd("catalog", "import", "-"), env); code != 0 {
				t.Fatalf("import -: exit %d\n%s", code, stderrb)
			}
			out = stdoutb.String()
			if strings.TrimSpace(out) != "imported 2 events: 1 created, 1 changed, 0 unchanged" {
				t.Fatalf("import -: %q", out)
			}
			if e := decodeEntry(t, mustMain(t, nil, cmd("catalog", "get", "shop", "view")...)); e.DisplayName != "View" || e.Status != catalog.StatusPlanned || e.Code != view.Code {
				t.Fatalf("after import: %+v", e)
			}
			// The export of the fresh catalog has the codes it was given.
			fb := mustMain(t, nil, append([]string{"catalog", "export"}, fresh...)...)
			for _, ev := range p.Events {
				if !strings.Contains(fb, `"name": "`+ev.Name+`"`) {
					t.Errorf("fresh export lacks %s:\n%s", ev.Name, fb)
				}
			}
		})
	}
}

// TestCatalogCommandsBadInput: each bad input gets one line saying what is
// wrong, and exit 2 (usage) or 1 (the command failed).
func TestCatalogCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(notJSON, []byte("{type: object"), 0o644)
	badPlan := filepath.Join(dir, "plan.json")
	os.WriteFile(badPlan, []byte(`{"events":[{"group":"a","name":"b","colour":"red"}]}`), 0o644)
	d := []string{"--data-dir", filepath.Join(dir, "data")}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"catalog", "get", "onlygroup"}, 2, "want GROUP NAME"},
		{[]string{"catalog", "set"}, 2, "want GROUP NAME"},
		{[]string{"catalog", "list", "a", "b"}, 2, "at most one GROUP"},
		{[]string{"catalog", "import"}, 2, "want one FILE"},
		{[]string{"catalog", "set", "g", "n", "--status", "retired"}, 2, `--status "retired": want planned, observed or blocked`},
		{[]string{"catalog", "list", "--format", "yaml"}, 2, "want json or text"},
		{[]string{"catalog", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"catalog", "get", "g", "n", "--client-id", "x", "--secret", "y"}, 2, "for --addr"},
		{[]string{"catalog", "get", "g", "n", "--addr", "127.0.0.1:1"}, 2, "--addr needs --client-id"},
		{append([]string{"catalog", "set", "g", "n", "--schema-file", notJSON}, d...), 1, "is not JSON"},
		{append([]string{"catalog", "set", "g", "n", "--schema-file", filepath.Join(dir, "none")}, d...), 1, "reading --schema-file"},
		{append([]string{"catalog", "get", "g", "missing"}, d...), 1, "no such event type"},
		{append([]string{"catalog", "set", "bad\x01group", "n"}, d...), 1, "catalog set: catalog: invalid entry: group \"bad\\x01group\" has a control character"},
		{append([]string{"catalog", "set", "g", ""}, d...), 1, "empty event name"},
		{append([]string{"catalog", "import", badPlan}, d...), 1, `unknown field "colour"`},
		{append([]string{"catalog", "import", filepath.Join(dir, "nothere.json")}, d...), 1, "reading the tracking plan"},
	} {
		code, out, errs := runMain(t, nil, c.args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != c.code || !strings.Contains(errs, c.want) || (code == 1 && len(lines) != 1) || out != "" {
			t.Errorf("inlet %s: exit %d (want %d), stdout %q\nstderr: %s(want %q)", strings.Join(c.args, " "), code, c.code, out, errs, c.want)
		}
	}
}

// TestCatalogCommandsOverAddrErrors: a wrong secret, a client that is not
// an admin, and no server give their one-line errors.
func TestCatalogCommandsOverAddrErrors(t *testing.T) {
	s := startCatalogServer(t, "")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"catalog", "list", "--addr", s.grpcAddr, "--client-id", "admin", "--secret", "wrong"}, "check --client-id and the secret"}, // the message itself is the server's: one for an unknown client and a wrong secret
		{map[string]string{"INLET_SECRET": s.readerSecret, "INLET_CLIENT_ID": "reader", "INLET_ADDR": s.grpcAddr}, []string{"catalog", "set", "g", "n"}, "permission denied"},
		{map[string]string{"INLET_SECRET": s.readerSecret}, []string{"catalog", "get", "g", "n", "--addr", s.grpcAddr, "--client-id", "reader"}, "no such event type"},
		{nil, []string{"catalog", "list", "--addr", gone, "--client-id", "admin", "--secret", "x", "--timeout", "3s"}, "cannot reach the catalog at " + gone},
	} {
		start := time.Now()
		code, out, errs := runMain(t, c.vars, c.args...)
		if code != 1 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 || out != "" {
			t.Errorf("inlet %s: exit %d, stdout %q\nstderr: %s(want %q)", strings.Join(c.args, " "), code, out, errs, c.want)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("inlet %s took %v", strings.Join(c.args, " "), time.Since(start))
		}
	}
	// The reader may read what the admin wrote.
	mustMain(t, nil, "catalog", "set", "g", "n", "--addr", s.grpcAddr, "--client-id", "admin", "--secret", s.adminSecret)
	out := mustMain(t, map[string]string{"INLET_SECRET": s.readerSecret}, "catalog", "get", "g", "n", "--addr", s.grpcAddr, "--client-id", "reader", "--format", "text")
	if !strings.Contains(out, "planned") {
		t.Fatalf("get as reader: %s", out)
	}
}

// TestCatalogCommandsStoreLocked: with the embedded store held by a
// running inlet (here, another open of it), a direct command says to use
// --addr.
func TestCatalogCommandsStoreLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := catalog.DefaultConfig()
	cfg.Store, cfg.Path = catalog.StoreEmbedded, filepath.Join(dir, "catalog.db")
	cat, err := catalog.Open(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	code, _, errs := runMain(t, nil, "catalog", "list", "--data-dir", dir)
	if code != 1 || !strings.Contains(errs, "locked by a running inlet") || !strings.Contains(errs, "--addr") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("locked store: exit %d\n%s", code, errs)
	}
}

// TestCatalogCommandsRedis: the shared store directly, with --redis.
func TestCatalogCommandsRedis(t *testing.T) {
	addr := testkit.Redis(t)
	prefix := testkit.Unique(t, "clitest") + ":"
	f := []string{"--redis", addr, "--catalog-redis-prefix", prefix}
	a := decodeEntry(t, mustMain(t, nil, append([]string{"catalog", "set", "g", "n", "--display-name", "N"}, f...)...))
	out := mustMain(t, nil, append([]string{"catalog", "list"}, f...)...)
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		if e := decodeEntry(t, sc.Text()); e.Code != a.Code || e.DisplayName != "N" {
			t.Fatalf("list: %+v", e)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("list: %d entries\n%s", n, out)
	}
	if !bytes.Contains([]byte(mustMain(t, nil, append([]string{"catalog", "export"}, f...)...)), []byte(`"display_name": "N"`)) {
		t.Fatal("export lacks the entry")
	}
}
