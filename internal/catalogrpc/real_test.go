package catalogrpc

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/inlet-dev/inlet/api/gen/pb/catalogv1"
	thriftcat "github.com/inlet-dev/inlet/api/gen/thrift/catalogv1"
	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// The front ends on the real catalog (embedded store) and real credentials
// (a clients file; a clock the test moves): the catalog service end to end,
// paging through the real store, rate limits and token expiry.
func TestRealCatalogAndAuth(t *testing.T) {
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	adminSecret, err := auth.AddClient(clients, auth.Client{ID: "admin", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	webSecret, err := auth.AddClient(clients, auth.Client{ID: "web", Rate: 1, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	acfg := auth.DefaultConfig()
	acfg.ClientsFile = clients
	acfg.TokenTTL = time.Minute
	acfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	ts := startReal(t, acfg, dir)
	data, cl, _ := ts.grpcClients(t)
	_, tc := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)
	admin := &catalogv1.Credentials{ClientId: "admin", Token: adminSecret}

	// Upsert, Get, Block, List pages over the real store.
	for i := range 7 {
		_, err := cl.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: fmt.Sprintf("e%d", i),
			DisplayName: proto.String(fmt.Sprintf("Event %d", i)), Schema: proto.String(`{"type":"object","required":["sku"]}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = cl.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "bad", Schema: proto.String(`{"type":12}`)})
	wantStatus(t, "Upsert of a schema that does not compile", err, codes.InvalidArgument, "schema")
	_, err = cl.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "bad\x01name"})
	wantStatus(t, "Upsert of a bad name", err, codes.InvalidArgument, "control character")
	bl, err := cl.Block(ctx, &catalogv1.BlockRequest{Auth: admin, Group: "shop", Name: "e3"})
	if err != nil || bl.Entry.Status != catalogv1.Status_STATUS_BLOCKED || bl.Entry.DisplayName != "Event 3" {
		t.Fatalf("Block: %v %v", bl, err)
	}
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		rp, err := cl.List(ctx, &catalogv1.ListRequest{Auth: admin, Group: "shop", PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rp.Entries {
			names = append(names, e.Name)
		}
		if token = rp.NextPageToken; token == "" || pages > 5 {
			break
		}
	}
	if fmt.Sprint(names) != "[e0 e1 e2 e3 e4 e5 e6]" {
		t.Errorf("List in pages of 3: %v", names)
	}
	g, err := tc.Get(ctx, &thriftcat.Credentials{ClientId: "admin", Token: adminSecret}, "shop", "e3")
	if err != nil || g.Entry.Status != thriftcat.Status_BLOCKED || g.Entry.Schema == "" {
		t.Fatalf("thrift Get: %v %v", g, err)
	}
	_, err = tc.Get(ctx, &thriftcat.Credentials{ClientId: "admin", Token: adminSecret}, "shop", "nothing")
	wantCatalogError(t, "thrift Get of nothing", err, thriftcat.ErrorCode_NOT_FOUND)

	// web: burst 3 at 1/s; the clock does not move, so the fourth call is
	// over the rate, and one second later it is admitted again.
	var sess string
	for i := range 3 {
		rp, err := data.DataType(ctx, dataRq("web", webSecret, "shop", "e1"))
		if err != nil || rp.CodeId == 0 || rp.CnName != "Event 1" {
			t.Fatalf("call %d: %v %v", i, rp, err)
		}
		sess = rp.AuthRp.Token
	}
	_, err = data.DataType(ctx, dataRq("web", sess, "shop", "e1"))
	wantStatus(t, "fourth call at once", err, codes.ResourceExhausted, `client "web" is over its rate`)
	now.Add(int64(1100 * time.Millisecond))
	if _, err := data.DataType(ctx, dataRq("web", sess, "shop", "e1")); err != nil {
		t.Fatalf("a second later: %v", err)
	}
	// The session token expires with the clock.
	now.Add(int64(2 * time.Minute))
	_, err = data.DataType(ctx, dataRq("web", sess, "shop", "e1"))
	wantStatus(t, "expired session token", err, codes.Unauthenticated, "session token expired")
	_, err = data.DataType(ctx, dataRq("admin", sess, "shop", "e1"))
	wantStatus(t, "web's token presented for admin", err, codes.Unauthenticated)
}

// Bad credentials from one address are throttled on both front ends, as on
// HTTP: past the burst, ResourceExhausted, whatever the credentials, until
// the failures age out; an unknown client and a wrong secret count alike.
func TestRealThrottleFailedCredentials(t *testing.T) {
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	secret, err := auth.AddClient(clients, auth.Client{ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	acfg := auth.DefaultConfig()
	acfg.ClientsFile = clients
	acfg.FailBurst, acfg.FailEvery = 3, time.Hour
	ts := startReal(t, acfg, dir)
	data, _, _ := ts.grpcClients(t)
	_, tc := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)

	if _, err := data.DataType(ctx, dataRq("web", secret, "shop", "e1")); err != nil {
		t.Fatalf("good credentials before any failure: %v", err)
	}
	for i, id := range []string{"web", "nobody", "web"} {
		_, err := data.DataType(ctx, dataRq(id, "wrong-secret", "shop", "e1"))
		wantStatus(t, fmt.Sprintf("bad credentials %d", i), err, codes.Unauthenticated, "no client has these credentials")
	}
	_, err = data.DataType(ctx, dataRq("web", "wrong-secret", "shop", "e1"))
	wantStatus(t, "bad credentials past the burst", err, codes.ResourceExhausted, "too many failed credentials")
	_, err = data.DataType(ctx, dataRq("web", secret, "shop", "e1"))
	wantStatus(t, "good credentials from a throttled address", err, codes.ResourceExhausted, "retry after")
	_, err = tc.Get(ctx, &thriftcat.Credentials{ClientId: "web", Token: secret}, "shop", "e1")
	wantCatalogError(t, "Thrift from the throttled address", err, thriftcat.ErrorCode_RESOURCE_EXHAUSTED, "too many failed credentials")
}

// startReal serves the front ends over the real catalog (an embedded store
// under dir) and real credentials (acfg), until the test ends.
func startReal(t *testing.T, acfg auth.Config, dir string) *testServer {
	t.Helper()
	au, err := auth.Open(acfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { au.Close() })
	ccfg := catalog.DefaultConfig()
	ccfg.Store, ccfg.Path = catalog.StoreEmbedded, filepath.Join(dir, "catalog.db")
	cat, err := catalog.Open(ccfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	s, err := New(cat, au, DefaultConfig(), testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{}
	ts.grpcAddr, ts.thriftAddr = testkit.ServeTwo(t, s.ServeGRPC, s.ServeThrift, s.Shutdown)
	return ts
}
