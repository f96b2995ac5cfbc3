package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// grpcLookup is one inf.Data/DataType call.
func grpcLookup(ctx context.Context, cl inf.DataClient, id, token, group, name string) (*inf.DataTypeRp, error) {
	return cl.DataType(ctx, &inf.DataTypeRq{AuthRq: &inf.AuthRq{ClientId: id, Token: token}, GroupName: group, EnName: name})
}

// thriftLookup is one DataType call over a new framed Thrift connection.
func thriftLookup(ctx context.Context, addr, id, token, group, name string) (*thriftinf.DataTypeRp, error) {
	conf := &thrift.TConfiguration{ConnectTimeout: 10 * time.Second, SocketTimeout: 30 * time.Second}
	sock := thrift.NewTSocketConf(addr, conf)
	if err := sock.Open(); err != nil {
		return nil, err
	}
	defer sock.Close()
	tr := thrift.NewTFramedTransportConf(sock, conf)
	proto := thrift.NewTBinaryProtocolConf(tr, conf)
	cl := thriftinf.NewDataClient(thrift.NewTStandardClient(proto, proto))
	return cl.DataType(ctx, &thriftinf.DataTypeRq{Authrq: &thriftinf.AuthRq{ClientId: id, Token: token}, GroupName: group, EnName: name})
}

func dialGRPC(t *testing.T, addr string) inf.DataClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inf.NewDataClient(cc)
}

// TestCatalogServeNeedsClients: catalog serve refuses to start without
// client credentials, without a listener, or with a bad setting.
func TestCatalogServeNeedsClients(t *testing.T) {
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	if _, err := auth.AddClient(clients, auth.Client{ID: "web"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-listen", "127.0.0.1:0", "--data-dir", dir}, "--clients FILE is needed"},
		{[]string{"--clients", clients, "--data-dir", dir}, "--grpc-listen"},
		{[]string{"--clients", clients, "--data-dir", dir, "--thrift-listen", "127.0.0.1:0", "--thrift-transport", "http"}, "--thrift-transport"},
	} {
		g, err := gateway.StartCatalog(parseCatalog(t, c.args...), testkit.Logger(t))
		if err == nil {
			g.Shutdown(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %s", c.args, err, c.want)
		}
	}
}

// parseCatalog is catalog serve's configuration from args.
func parseCatalog(t *testing.T, args ...string) gateway.CatalogConfig {
	t.Helper()
	cfg := gateway.DefaultCatalogConfig()
	fs := flag.NewFlagSet("catalog serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return cfg
}

// inlet catalog serve in process, on the embedded store: both front ends
// answer, /metrics counts their calls, and Shutdown stops it with no error.
func TestCatalogServeEmbedded(t *testing.T) {
	dir := t.TempDir()
	secret, err := auth.AddClient(filepath.Join(dir, "clients.json"), auth.Client{ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	metrics := testkit.FreeAddr(t)
	g, err := gateway.StartCatalog(parseCatalog(t, "--clients", filepath.Join(dir, "clients.json"), "--data-dir", dir,
		"--grpc-listen", "127.0.0.1:0", "--thrift-listen", "127.0.0.1:0", "--metrics-listen", metrics), testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err != nil {
		t.Fatalf("the embedded store is not in --data-dir: %v", err)
	}
	ctx := context.Background()
	a := [2]string{g.GRPCAddr(), g.ThriftAddr()}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	rp, err := grpcLookup(cctx, dialGRPC(t, a[0]), "web", secret, "shop", "checkout")
	if err != nil || rp.CodeId == 0 || rp.AuthRp.GetToken() == "" {
		t.Fatalf("gRPC DataType: %v %v", rp, err)
	}
	trp, err := thriftLookup(cctx, a[1], "", rp.AuthRp.Token, "shop", "checkout")
	if err != nil || trp.CodeId != rp.CodeId {
		t.Fatalf("Thrift DataType with the gRPC answer's session token: %v %v (gRPC code %d)", trp, err, rp.CodeId)
	}
	_, err = grpcLookup(cctx, dialGRPC(t, a[0]), "web", "wrong", "shop", "checkout")
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a wrong secret: %v", err)
	}
	m := testkit.Do(t, "GET", "http://"+metrics+"/metrics", nil)
	for _, want := range []string{
		`inlet_catalog_rpc_calls_total{code="OK",method="inf.Data/DataType",proto="grpc"} 1`,
		`inlet_catalog_rpc_calls_total{code="OK",method="inf.Data/DataType",proto="thrift"} 1`,
		`inlet_catalog_rpc_calls_total{code="Unauthenticated",method="inf.Data/DataType",proto="grpc"} 1`,
	} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
	defer scancel()
	if err := g.Shutdown(sctx); err != nil {
		t.Errorf("catalog serve's shutdown: %v", err)
	}
	select {
	case err := <-g.Done():
		t.Errorf("Done after a shutdown that did not fail: %v", err)
	default:
	}
}

// Two `inlet catalog serve` processes on one real Redis, and 1,000
// concurrent first-sight lookups of the same 50 new event types spread over
// both (a fifth over Thrift): exactly 50 codes, every caller of a key told
// the same one.
func TestCatalogServeTwoInstancesOneRedis(t *testing.T) {
	redisAddr := testkit.Redis(t)
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	secret, err := auth.AddClient(clients, auth.Client{ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(dir, "token.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := testkit.Unique(t, "inlet-test:") + ":"
	type instance struct {
		p                 *testkit.Process
		grpcAddr, thrAddr string
		data              inf.DataClient
	}
	var insts [2]*instance
	for i := range insts {
		in := &instance{grpcAddr: testkit.FreeAddr(t), thrAddr: testkit.FreeAddr(t)}
		in.p = testkit.Start(t, nil, "catalog", "serve", "--clients", clients, "--auth-token-key-file", keyFile,
			"--redis", redisAddr, "--catalog-redis-prefix", prefix, "--data-dir", filepath.Join(dir, fmt.Sprint(i)),
			"--grpc-listen", in.grpcAddr, "--thrift-listen", in.thrAddr, "--log-level", "warn")
		insts[i] = in
	}
	for _, in := range insts {
		testkit.WaitListening(t, in.grpcAddr, 30*time.Second)
		testkit.WaitListening(t, in.thrAddr, 30*time.Second)
		in.data = dialGRPC(t, in.grpcAddr)
	}

	const keys, callers = 50, 1000
	group := "shop"
	name := func(k int) string { return fmt.Sprintf("%sev%02d", strings.ReplaceAll(prefix, ":", "_"), k) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		codes = map[int]map[int64]int{} // key → code → callers told it
		errs  []string
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, in := i%keys, insts[(i/keys)%2]
			<-start
			var code int64
			var err error
			if i%5 == 0 {
				var rp *thriftinf.DataTypeRp
				if rp, err = thriftLookup(ctx, in.thrAddr, "web", secret, group, name(k)); err == nil {
					code = rp.CodeId
				}
			} else {
				var rp *inf.DataTypeRp
				if rp, err = grpcLookup(ctx, in.data, "web", secret, group, name(k)); err == nil {
					code = rp.CodeId
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("caller %d: %v", i, err))
				return
			}
			if codes[k] == nil {
				codes[k] = map[int64]int{}
			}
			codes[k][code]++
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d lookups of %d new keys over two instances in %v", callers, keys, time.Since(t0))
	if len(errs) > 0 {
		t.Fatalf("%d of %d lookups failed, e.g. %v", len(errs), callers, errs[:min(5, len(errs))])
	}
	seen := map[int64]int{}
	for k := range keys {
		if len(codes[k]) != 1 {
			t.Errorf("key %s was given %d codes: %v", name(k), len(codes[k]), codes[k])
		}
		for c := range codes[k] {
			if other, dup := seen[c]; dup {
				t.Errorf("code %d was given to %s and %s", c, name(other), name(k))
			}
			seen[c] = k
		}
	}
	if len(seen) != keys {
		t.Errorf("%d distinct codes for %d new keys", len(seen), keys)
	}

	// A session token minted by one instance works on the other (one
	// --auth-token-key-file).
	rp, err := grpcLookup(ctx, insts[0].data, "web", secret, group, name(0))
	if err != nil {
		t.Fatal(err)
	}
	again, err := grpcLookup(ctx, insts[1].data, "", rp.AuthRp.Token, group, name(0))
	if err != nil || again.CodeId != rp.CodeId {
		t.Errorf("instance 0's session token at instance 1: %v %v", again, err)
	}

	for _, in := range insts {
		in.p.Signal(t, syscall.SIGTERM)
	}
	for i, in := range insts {
		if code := in.p.Wait(t, 20*time.Second); code != 0 {
			t.Errorf("instance %d exited %d after SIGTERM; its log:\n%s", i, code, in.p.Logs)
		}
	}
}

// TestCatalogServeFlags: catalog serve takes the catalog's and the
// credentials' flags, but not --catalog and --auth, which turn them on for
// HTTP ingest and would do nothing here.
func TestCatalogServeFlags(t *testing.T) {
	cfg := parseCatalog(t, "--clients", "c.json", "--catalog-mode", "block", "--auth-token-ttl", "1m", "--grpc-listen", "127.0.0.1:0")
	if cfg.Auth.ClientsFile != "c.json" || cfg.Catalog.Mode != catalog.ModeBlock || cfg.Auth.TokenTTL != time.Minute {
		t.Errorf("parsed %+v", cfg)
	}
	if cfg.MaxInflightBytes != 64<<20 || cfg.RPC.MaxMessageBytes != 64<<10 {
		t.Errorf("default --max-inflight-bytes %d, --catalog-rpc-max-message-bytes %d", cfg.MaxInflightBytes, cfg.RPC.MaxMessageBytes)
	}
	if cfg := parseCatalog(t, "--clients", "c.json", "--grpc-listen", "127.0.0.1:0", "--max-inflight-bytes", "8MiB"); cfg.MaxInflightBytes != 8<<20 {
		t.Errorf("--max-inflight-bytes 8MiB: %d", cfg.MaxInflightBytes)
	}
	for _, f := range []string{"--catalog", "--auth"} {
		cfg := gateway.DefaultCatalogConfig()
		fs := flag.NewFlagSet("catalog serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		if err := fs.Parse([]string{"--clients", "c.json", f}); err == nil || !strings.Contains(err.Error(), "flag provided but not defined: "+f[1:]) {
			t.Errorf("%s: %v, want the flag refused as not defined", f, err)
		}
	}
}

// TestCatalogServeFailedStart: a listen address in use fails the start,
// and what had started is stopped: the embedded store's file lock is free
// for the next open.
func TestCatalogServeFailedStart(t *testing.T) {
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	if _, err := auth.AddClient(clients, auth.Client{ID: "web"}); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	g, err := gateway.StartCatalog(parseCatalog(t, "--clients", clients, "--data-dir", dir, "--grpc-listen", busy.Addr().String()), testkit.Logger(t))
	if err == nil {
		g.Shutdown(context.Background())
		t.Fatal("started on a listen address in use")
	}
	if !strings.Contains(err.Error(), "--grpc-listen") {
		t.Errorf("error %v: want it to name --grpc-listen", err)
	}
	cfg := catalog.DefaultConfig()
	cfg.Store, cfg.Path = catalog.StoreEmbedded, filepath.Join(dir, "catalog.db")
	cat, err := catalog.Open(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatalf("the store after a failed start: %v", err)
	}
	cat.Close()
}
