package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inlet-dev/inlet/api/gen/pb/inf"
	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// e2ePlan is a tracking plan with one event type whose schema each
// violation type breaks, a blocked one, and a planned one of another group.
const e2ePlan = `{"events":[
	{"group":"default","name":"purchase","status":"planned","schema":{"type":"object",
		"properties":{"price":{"type":"number"},"qty":{"type":"integer"},"plan":{"enum":["free","pro"]}},
		"required":["price"],"additionalProperties":false}},
	{"group":"default","name":"banned","status":"blocked"},
	{"group":"web","name":"signup","status":"planned"}]}`

// e2eBatch has one event of each violation type (by index) and two valid
// ones (0 and 7).
var e2eBatch = []string{
	`{"event":"purchase","uid":"u0","props":{"price":9.5,"qty":1,"plan":"pro"}}`, // 0 valid
	`{"event":"mystery","uid":"u1"}`,                                             // 1 unplanned_event
	`{"event":"purchase","uid":"u2","props":{"qty":1}}`,                          // 2 required_missing /price
	`{"event":"purchase","uid":"u3","props":{"price":"9"}}`,                      // 3 datatype_mismatch /price
	`{"event":"purchase","uid":"u4","props":{"price":1,"color":"red"}}`,          // 4 additional_properties /color
	`{"event":"banned","uid":"u5"}`,                                              // 5 blocked_event
	`{"event":"purchase","uid":"u6","props":{"price":1,"plan":"gold"}}`,          // 6 invalid_value /plan
	`{"event":"signup","uid":"u7","context":{"group":"web"}}`,                    // 7 valid, group web
}

var e2eViolations = map[int][2]string{
	1: {"unplanned_event", ""}, 2: {"required_missing", "/price"}, 3: {"datatype_mismatch", "/price"},
	4: {"additional_properties", "/color"}, 5: {"blocked_event", ""}, 6: {"invalid_value", "/plan"},
}

// seedCatalog imports plan into the catalog cfg names and returns the
// codes it has, by group/name. It closes the catalog (the embedded store
// takes one process at a time).
func seedCatalog(t *testing.T, cfg catalog.Config, plan string) map[string]int64 {
	t.Helper()
	if cfg.Path != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := catalog.Open(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cat.Import(ctx, strings.NewReader(plan)); err != nil {
		t.Fatal(err)
	}
	entries, err := cat.List(ctx, "", catalog.Key{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int64{}
	for _, e := range entries {
		codes[e.Group+"/"+e.Name] = e.Code
	}
	return codes
}

// addClient adds a client to the clients file at path and returns its secret.
func addClient(t *testing.T, path string, c auth.Client) string {
	t.Helper()
	secret, err := auth.AddClient(path, c)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// catalogGateway is a gateway config with the catalog on in mode, its
// clients file (one client "app", required on ingest) and, with redisAddr,
// the Redis store under a key prefix of the test's own.
func catalogGateway(t *testing.T, brokers []string, topic string, mode catalog.Mode, redisAddr string) (gateway.Config, string) {
	t.Helper()
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Catalog.Enabled = true
	cfg.Catalog.Mode = mode
	cfg.Catalog.CacheTTL = time.Hour
	if redisAddr != "" {
		cfg.RedisAddr = redisAddr
		cfg.Catalog.Store = catalog.StoreRedis
		cfg.Catalog.RedisPrefix = testkit.Unique(t, "inlet-test:catalog:") + ":"
	}
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	cfg.Auth.HTTP = true
	secret := addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "app"})
	return cfg, secret
}

// storeConfig is the catalog config the gateway of cfg opens.
func storeConfig(cfg gateway.Config) catalog.Config {
	cc := cfg.Catalog
	cc.RedisAddr = cfg.RedisAddr
	cc.Path = filepath.Join(cfg.DataDir, "catalog.db")
	return cc
}

// decodeAnswer decodes a batch answer with its violations.
func decodeAnswer(t *testing.T, r testkit.Response) ingest.Answer {
	t.Helper()
	var a ingest.Answer
	if err := json.Unmarshal(r.Body, &a); err != nil || a.Rejected == nil {
		t.Fatalf("answer %s is not a batch answer: %v", r, err)
	}
	return a
}

// TestCatalogBlock: in mode block, against real Kafka, credentials and the
// catalog (embedded and Redis stores), a batch with one event of each
// violation type has each rejected with its type, and dead-lettered with
// its violations; the valid events land with their codes, groups and the
// client's id.
func TestCatalogBlock(t *testing.T) {
	brokers := testkit.Brokers(t)
	for _, store := range []string{catalog.StoreEmbedded, catalog.StoreRedis} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			redisAddr := ""
			if store == catalog.StoreRedis {
				redisAddr = testkit.Redis(t)
			}
			topic := testkit.Unique(t, "t-")
			cfg, secret := catalogGateway(t, brokers, topic, catalog.ModeBlock, redisAddr)
			codes := seedCatalog(t, storeConfig(cfg), e2ePlan)
			g := gatewaytest.Start(t, cfg)

			r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte("["+strings.Join(e2eBatch, ",")+"]"),
				"Content-Type", "application/json", "Authorization", "Bearer "+secret)
			if r.Status != http.StatusOK {
				t.Fatalf("answer %s, want 200", r)
			}
			a := decodeAnswer(t, r)
			if a.Accepted != 2 || len(a.Rejected) != len(e2eViolations) {
				t.Fatalf("answer %s: want 2 accepted, %d rejected", r, len(e2eViolations))
			}
			for _, rej := range a.Rejected {
				want := e2eViolations[rej.Index]
				if len(rej.Violations) != 1 || string(rej.Violations[0].Type) != want[0] || rej.Violations[0].Path != want[1] {
					t.Errorf("event %d: rejection %+v, want one %s at %q", rej.Index, rej, want[0], want[1])
				}
				if !strings.Contains(rej.Error, want[0]) {
					t.Errorf("event %d: error %q does not name %s", rej.Index, rej.Error, want[0])
				}
			}

			recs := byName(testkit.ConsumeN(t, brokers, topic, 2, time.Second))
			for name, want := range map[string]struct {
				group string
				code  int64
			}{"purchase": {"default", codes["default/purchase"]}, "signup": {"web", codes["web/signup"]}} {
				rec := recs[name]
				if want.code == 0 || rec.Fields["code"] != float64(want.code) || rec.Headers["inlet-event-code"] != strconv.FormatInt(want.code, 10) {
					t.Errorf("%s: value %s headers %v, want code %d in both", name, rec.Value, rec.Headers, want.code)
				}
				if rec.Fields["group"] != want.group || rec.Fields["client"] != "app" {
					t.Errorf("%s: value %s, want group %s and client app", name, rec.Value, want.group)
				}
			}

			dead := testkit.ConsumeN(t, brokers, topic+".invalid", len(e2eViolations), time.Second)
			seen := map[string]bool{}
			for _, d := range dead {
				var vs []struct{ Type, Path string }
				if err := json.Unmarshal([]byte(d.Headers["inlet-violations"]), &vs); err != nil || len(vs) != 1 {
					t.Fatalf("dead letter %s: inlet-violations %q: %v", d.Value, d.Headers["inlet-violations"], err)
				}
				if d.Headers["inlet-reason"] != "plan_violation" || !strings.Contains(d.Headers["inlet-error"], vs[0].Type) {
					t.Errorf("dead letter %s: headers %v", d.Value, d.Headers)
				}
				uid := fmt.Sprint(func() any { var m map[string]any; _ = json.Unmarshal(d.Value, &m); return m["uid"] }())
				i, _ := strconv.Atoi(strings.TrimPrefix(uid, "u"))
				if want := e2eViolations[i]; want[0] != vs[0].Type || want[1] != vs[0].Path {
					t.Errorf("dead letter of event %d has %+v, want %v", i, vs[0], want)
				}
				seen[vs[0].Type] = true
			}
			if len(seen) != 6 {
				t.Errorf("violation types in the dead-letter topic: %v, want all six", seen)
			}
		})
	}
}

// TestAuthRefusedLandsNothing: with the real credentials over HTTP, every
// bad credential gets 401 with why, and nothing reaches Kafka: after them
// one good request lands exactly its event and its one dead letter.
func TestAuthRefusedLandsNothing(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg, secret := catalogGateway(t, brokers, topic, catalog.ModeOpen, "")
	cfg.Catalog.Enabled = false // credentials alone
	shop := addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "shop"})
	key := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Auth.TokenKeyFile = key
	g := gatewaytest.Start(t, cfg)

	// Session tokens minted with the gateway's key: one of shop's, and one
	// of app's that expired an hour ago.
	minter := func(now func() time.Time) *auth.Authenticator {
		ac := auth.DefaultConfig()
		ac.ClientsFile, ac.TokenKeyFile, ac.TokenTTL, ac.Now = cfg.Auth.ClientsFile, key, time.Minute, now
		a, err := auth.Open(ac, testkit.Logger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	shopTok, err := minter(time.Now).Authenticate("shop", shop)
	if err != nil {
		t.Fatal(err)
	}
	oldTok, err := minter(func() time.Time { return time.Now().Add(-time.Hour) }).Authenticate("app", secret)
	if err != nil {
		t.Fatal(err)
	}
	appTok, err := minter(time.Now).Authenticate("app", secret)
	if err != nil {
		t.Fatal(err)
	}
	tampered := appTok.Session[:len(appTok.Session)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(appTok.Session, "AA")]

	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	base := "http://" + g.Addr()
	for _, tc := range []struct {
		name, header, query, want string
	}{
		{"unknown client", "Basic " + b64("nobody:"+secret), "", "unknown client or wrong secret"},
		{"unknown secret", "Bearer not-a-secret", "", "unknown client or wrong secret"},
		{"wrong secret", "Basic " + b64("app:"+shop), "", "unknown client or wrong secret"},
		{"expired token", "Bearer " + oldTok.Session, "", "session token expired"},
		{"tampered token", "Bearer " + tampered, "", "session token invalid"},
		{"token of another client", "Basic " + b64("app:"+shopTok.Session), "", "session token of another client"},
		{"missing header", "", "", "no credentials"},
		{"malformed Basic", "Basic !!!", "", "malformed Basic credentials"},
		{"wrong k=", "", "?k=not-a-secret", "unknown client or wrong secret"},
	} {
		var h []string
		if tc.header != "" {
			h = []string{"Authorization", tc.header}
		}
		r := testkit.Do(t, "POST", base+"/v1/batch"+tc.query, []byte(`[{"event":"refused"},{"nope":1}]`), append(h, "Content-Type", "application/json")...)
		var e struct{ Error string }
		_ = json.Unmarshal(r.Body, &e)
		if r.Status != http.StatusUnauthorized || !strings.Contains(e.Error, tc.want) || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: answer %s (WWW-Authenticate %q), want 401 saying %q", tc.name, r, r.Header.Get("WWW-Authenticate"), tc.want)
		}
		for _, s := range []string{secret, shop, oldTok.Session, shopTok.Session, tampered} {
			if strings.Contains(string(r.Body), s) {
				t.Errorf("%s: the answer echoes a credential: %s", tc.name, r)
			}
		}
		px := testkit.Do(t, "GET", base+"/i?e=refused&k=not-a-secret", nil, h...)
		checkGIF(t, px, http.StatusUnauthorized)
	}

	// A session token and k= are accepted.
	r := testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"good"},{"nope":1}]`), "Content-Type", "application/json", "Authorization", "Bearer "+appTok.Session)
	if r.Status != 200 {
		t.Fatalf("good request: %s", r)
	}
	checkGIF(t, testkit.Do(t, "GET", base+"/i?e=good_pixel&k="+shop, nil), http.StatusOK)
	recs := byName(testkit.ConsumeN(t, brokers, topic, 2, 2*time.Second))
	if recs["good"].Fields["client"] != "app" || recs["good_pixel"].Fields["client"] != "shop" {
		t.Errorf("good events %v, want clients app and shop", recs)
	}
	testkit.ConsumeN(t, brokers, topic+".invalid", 1, 2*time.Second)
}

// TestAuthRateLimit: over its client's rate a request gets 429 with
// Retry-After and lands nothing; after that long it is served again.
func TestAuthRateLimit(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	cfg.Auth.HTTP = true
	secret := addClient(t, cfg.Auth.ClientsFile, auth.Client{ID: "slow", Rate: 1, Burst: 2})
	g := gatewaytest.Start(t, cfg)
	url := "http://" + g.Addr() + "/v1/batch"
	send := func(name string) testkit.Response {
		return testkit.Do(t, "POST", url, []byte(`[{"event":"`+name+`"},{"event":"`+name+`"}]`), "Content-Type", "application/json", "Authorization", "Bearer "+secret)
	}
	if r := send("first"); r.Status != 200 {
		t.Fatalf("within the burst: %s", r)
	}
	r := send("over")
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("over the rate: %s, want 429", r)
	}
	wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 2 {
		t.Fatalf("Retry-After %q, want 1 or 2 (two events at one per second)", r.Header.Get("Retry-After"))
	}
	var after testkit.Response
	testkit.WaitFor(t, time.Duration(wait)*time.Second+10*time.Second, "the rate to recover", func() bool {
		after = send("after")
		return after.Status == 200
	})
	recs := testkit.ConsumeN(t, brokers, topic, 4, 2*time.Second)
	for _, rec := range recs {
		if n := rec.Headers["inlet-event-name"]; n != "first" && n != "after" {
			t.Errorf("event %q landed: a request over the rate was stored", n)
		}
	}
}

// TestCatalogRedisDown: in mode open on a Redis that stops, cached names
// keep their codes, new names are accepted without a code and counted,
// /readyz stays 200 (it reports the store), and nothing is lost; once Redis
// is back new names get codes again.
func TestCatalogRedisDown(t *testing.T) {
	brokers := testkit.Brokers(t)
	redis := testkit.PrivateRedis(t)
	topic := testkit.Unique(t, "t-")
	cfg, secret := catalogGateway(t, brokers, topic, catalog.ModeOpen, redis.Addr)
	cfg.Catalog.Timeout = 300 * time.Millisecond
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	send := func(names ...string) {
		t.Helper()
		var items []string
		for _, n := range names {
			items = append(items, `{"event":"`+n+`"}`)
		}
		start := time.Now()
		r := testkit.Do(t, "POST", base+"/v1/batch", []byte("["+strings.Join(items, ",")+"]"), "Content-Type", "application/json", "Authorization", "Bearer "+secret)
		if a := decodeAnswer(t, r); r.Status != 200 || a.Accepted != len(names) {
			t.Fatalf("batch %v: %s, want all accepted", names, r)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("batch %v took %v: a store outage must not hold requests", names, took)
		}
	}
	send("cached_a", "cached_b")
	redis.Stop()
	send("cached_a", "new_c", "cached_b", "new_d")
	testkit.WaitFor(t, 10*time.Second, "/readyz to report the store down", func() bool {
		_, rd := getReady(t, base)
		return rd.Catalog != nil && rd.Catalog.Healthy != "ok" && rd.Catalog.Healthy != "not checked yet"
	})
	if status, rd := getReady(t, base); status != 200 || !rd.Ready || rd.Catalog.Store != "redis" {
		t.Errorf("/readyz with the catalog's Redis down: %d %+v, want 200 and ready (ingest fails open)", status, rd)
	}
	if n := unresolved(t, base); n != 2 {
		t.Errorf("inlet_catalog_unresolved_events_total{reason=unavailable} %v, want 2", n)
	}
	redis.Start()
	testkit.WaitFor(t, 20*time.Second, "/readyz to report the store back", func() bool {
		_, rd := getReady(t, base)
		return rd.Catalog.Healthy == "ok"
	})
	send("new_e")

	recs := testkit.ConsumeN(t, brokers, topic, 7, 2*time.Second)
	codes := map[string][]any{}
	for _, r := range recs {
		codes[r.Headers["inlet-event-name"]] = append(codes[r.Headers["inlet-event-name"]], r.Fields["code"])
	}
	a, b := codes["cached_a"], codes["cached_b"]
	if len(a) != 2 || a[0] == nil || a[0] != a[1] || len(b) != 2 || b[0] == nil || b[0] != b[1] {
		t.Errorf("cached names: codes %v and %v, want the same code both times", a, b)
	}
	if codes["new_c"][0] != nil || codes["new_d"][0] != nil {
		t.Errorf("names first seen with Redis down got codes %v %v, want none", codes["new_c"], codes["new_d"])
	}
	if codes["new_e"][0] == nil {
		t.Errorf("a new name after Redis came back got no code")
	}
}

// unresolved reads inlet_catalog_unresolved_events_total{reason="unavailable"}.
func unresolved(t *testing.T, base string) float64 {
	t.Helper()
	r := testkit.Do(t, "GET", base+"/metrics", nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, `inlet_catalog_unresolved_events_total{reason="unavailable"} `); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	t.Fatalf("no inlet_catalog_unresolved_events_total in /metrics")
	return 0
}

// TestCatalogRPCShared: the gateway serves its catalog over gRPC
// (--grpc-listen) beside ingest: a code assigned by a gRPC lookup is the
// code ingest gives the same event type.
func TestCatalogRPCShared(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg, secret := catalogGateway(t, brokers, topic, catalog.ModeOpen, "")
	cfg.CatalogRPC.GRPCListen = "127.0.0.1:0"
	cfg.CatalogRPC.ThriftListen = "127.0.0.1:0"
	g := gatewaytest.Start(t, cfg)
	if g.GRPCAddr() == "" || g.ThriftAddr() == "" {
		t.Fatalf("gRPC %q, Thrift %q: want both listening", g.GRPCAddr(), g.ThriftAddr())
	}
	conn, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rp, err := inf.NewDataClient(conn).DataType(ctx, &inf.DataTypeRq{AuthRq: &inf.AuthRq{ClientId: "app", Token: secret}, GroupName: "default", EnName: "checkout"})
	if err != nil || rp.CodeId == 0 {
		t.Fatalf("DataType: %v %v", rp, err)
	}
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/track", []byte(`{"event":"checkout"}`), "Content-Type", "application/json", "Authorization", "Bearer "+secret)
	if r.Status != 200 {
		t.Fatalf("track: %s", r)
	}
	rec := testkit.ConsumeN(t, brokers, topic, 1, 0)[0]
	if rec.Fields["code"] != float64(rp.CodeId) {
		t.Errorf("ingest gave code %v, gRPC %d: want one code per event type", rec.Fields["code"], rp.CodeId)
	}
}

// TestCatalogStartFailureTearsDown: a start that fails at the Thrift
// listener (its address in use) returns that error within the shutdown
// timeout and leaves nothing behind: the gRPC listener is closed and the
// embedded catalog released (another process may open it).
func TestCatalogStartFailureTearsDown(t *testing.T) {
	brokers := testkit.Brokers(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg, _ := catalogGateway(t, brokers, testkit.Unique(t, "t-"), catalog.ModeOpen, "")
	cfg.CatalogRPC.GRPCListen = testkit.FreeAddr(t)
	cfg.CatalogRPC.ThriftListen = busy.Addr().String()
	cfg.ShutdownTimeout = 2 * time.Second
	start := time.Now()
	g, err := gateway.Start(cfg, testkit.Logger(t))
	if g != nil || err == nil || !strings.Contains(err.Error(), "listening on "+cfg.CatalogRPC.ThriftListen+" (--thrift-listen)") {
		t.Fatalf("Start: %v, %v: want the Thrift listen error", g, err)
	}
	if took := time.Since(start); took > cfg.ShutdownTimeout+5*time.Second {
		t.Errorf("Start failed after %v, want within the shutdown timeout", took)
	}
	l, err := net.Listen("tcp", cfg.CatalogRPC.GRPCListen)
	if err != nil {
		t.Errorf("the gRPC address is still held after the failed start: %v", err)
	} else {
		l.Close()
	}
	cat, err := catalog.Open(storeConfig(cfg), testkit.Logger(t), nil)
	if err != nil {
		t.Fatalf("the embedded catalog is still held after the failed start: %v", err)
	}
	cat.Close()
}
