package catalogrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inlet-dev/inlet/api/gen/pb/catalogv1"
	"github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftcat "github.com/inlet-dev/inlet/api/gen/thrift/catalogv1"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dataRq(id, token, group, name string) *inf.DataTypeRq {
	return &inf.DataTypeRq{AuthRq: &inf.AuthRq{ClientId: id, Token: token}, GroupName: group, EnName: name}
}

func thriftRq(id, token, group, name string) *thriftinf.DataTypeRq {
	return &thriftinf.DataTypeRq{Authrq: &thriftinf.AuthRq{ClientId: id, Token: token}, GroupName: group, EnName: name}
}

// wantStatus fails unless err is a gRPC status of code whose message has
// each of want.
func wantStatus(t *testing.T, what string, err error, code codes.Code, want ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code {
		t.Errorf("%s: got %v, want %v", what, err, code)
		return
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: message %q does not say %q", what, st.Message(), w)
		}
	}
}

// wantAppException fails unless err is a TApplicationException whose
// message has each of want.
func wantAppException(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	var ae thrift.TApplicationException
	if !errors.As(err, &ae) {
		t.Errorf("%s: got %T %v, want a TApplicationException", what, err, err)
		return
	}
	if ae.TypeId() != thrift.INTERNAL_ERROR {
		t.Errorf("%s: exception type %d, want INTERNAL_ERROR", what, ae.TypeId())
	}
	if len(want) > 0 && !strings.HasPrefix(ae.Error(), want[0]) {
		t.Errorf("%s: message %q does not begin with the reason %q", what, ae.Error(), want[0])
	}
	for _, w := range want {
		if !strings.Contains(ae.Error(), w) {
			t.Errorf("%s: message %q does not say %q", what, ae.Error(), w)
		}
	}
}

// wantCatalogError fails unless err is the declared CatalogError of code.
func wantCatalogError(t *testing.T, what string, err error, code thriftcat.ErrorCode, want ...string) {
	t.Helper()
	var ce *thriftcat.CatalogError
	if !errors.As(err, &ce) {
		t.Errorf("%s: got %T %v, want a CatalogError", what, err, err)
		return
	}
	if ce.Code != code {
		t.Errorf("%s: code %v (%s), want %v", what, ce.Code, ce.Message, code)
	}
	for _, w := range want {
		if !strings.Contains(ce.Message, w) {
			t.Errorf("%s: message %q does not say %q", what, ce.Message, w)
		}
	}
}

func TestDataTypeFirstSightRepeatAndSession(t *testing.T) {
	ts := startServer(t, nil)
	data, _, _ := ts.grpcClients(t)
	ctx := ctxT(t)

	rp, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", "checkout"))
	if err != nil {
		t.Fatal(err)
	}
	if rp.CodeId != 1 || rp.CnName != "" || !strings.HasPrefix(rp.GetAuthRp().GetToken(), "sess.web.") {
		t.Fatalf("first sight: %v", rp)
	}
	// The session token instead of the secret; with and without the id.
	for _, id := range []string{"web", ""} {
		again, err := data.DataType(ctx, dataRq(id, rp.GetAuthRp().GetToken(), "shop", "checkout"))
		if err != nil {
			t.Fatalf("session token, client id %q: %v", id, err)
		}
		if again.CodeId != rp.CodeId {
			t.Fatalf("repeat: code %d, first %d", again.CodeId, rp.CodeId)
		}
	}
	// A display name is cnName; no group is the client's default group,
	// else the catalog's.
	ts.cat.entries[catalog.Key{Group: "default", Name: "signup"}] = catalog.Entry{Group: "default", Name: "signup", Code: 77, DisplayName: "Sign-up"}
	rp, err = data.DataType(ctx, dataRq("web", secretOf("web"), "", "signup"))
	if err != nil || rp.CodeId != 77 || rp.CnName != "Sign-up" {
		t.Fatalf("default group: %v %v", rp, err)
	}
	rp, err = data.DataType(ctx, dataRq("shop", secretOf("shop"), "", "checkout"))
	if err != nil || rp.CodeId != 1 {
		t.Fatalf("client's default group: %v %v", rp, err)
	}

	// Over Thrift, framed: the same code and a session token that works.
	td, _ := thriftClients(t, ts.thriftAddr, true)
	trp, err := td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "checkout"))
	if err != nil || trp.CodeId != 1 || !strings.HasPrefix(trp.Authrp.Token, "sess.web.") {
		t.Fatalf("thrift: %v %v", trp, err)
	}
	trp, err = td.DataType(ctx, thriftRq("web", trp.Authrp.Token, "shop", "basket"))
	if err != nil || trp.CodeId != 2 {
		t.Fatalf("thrift, session token, new key: %v %v", trp, err)
	}
	if got := testutil.ToFloat64(ts.m.calls.WithLabelValues("grpc", "inf.Data/DataType", "OK")); got != 5 {
		t.Errorf("grpc DataType OK calls counted: %v, want 5", got)
	}
	if got := testutil.ToFloat64(ts.m.calls.WithLabelValues("thrift", "inf.Data/DataType", "OK")); got != 2 {
		t.Errorf("thrift DataType OK calls counted: %v, want 2", got)
	}
}

// badCredentials are the ways a call's credentials are wrong, and what the
// answer must say.
var badCredentials = []struct {
	name, id, token string
	want            []string
}{
	{"missing", "", "", []string{"unauthenticated", "no credentials"}},
	{"missing token", "web", "", []string{"unauthenticated", "no credentials"}},
	// An unknown client and a wrong secret get one answer: it tells no one
	// which client ids exist.
	{"unknown client", "nobody", secretOf("nobody"), []string{"unauthenticated", "no client has these credentials"}},
	{"unknown secret", "", "not-a-secret", []string{"unauthenticated", "no client has these credentials"}},
	{"wrong secret", "web", secretOf("shop"), []string{"unauthenticated", "no client has these credentials"}},
	{"expired token", "web", "sess-expired.web", []string{"unauthenticated", "session token expired"}},
	{"tampered token", "web", "sess.web", []string{"unauthenticated", "session token invalid"}},
	{"token of another client", "web", "sess.shop.1", []string{"unauthenticated", `another client than "web"`}},
}

func TestBadCredentials(t *testing.T) {
	ts := startServer(t, nil)
	data, cat, _ := ts.grpcClients(t)
	ctx := ctxT(t)
	for _, framed := range []bool{true, false} {
		if !framed {
			ts.Shutdown(ctx)
			ts = startServer(t, func(c *Config) { c.ThriftTransport = TransportBuffered })
			data, cat, _ = ts.grpcClients(t)
		}
		td, tc := thriftClients(t, ts.thriftAddr, framed)
		for _, bc := range badCredentials {
			what := fmt.Sprintf("%s (thrift framed %v)", bc.name, framed)
			_, err := data.DataType(ctx, dataRq(bc.id, bc.token, "shop", "checkout"))
			wantStatus(t, "grpc DataType: "+what, err, codes.Unauthenticated, bc.want...)
			_, err = cat.Get(ctx, &catalogv1.GetRequest{Auth: &catalogv1.Credentials{ClientId: bc.id, Token: bc.token}, Group: "shop", Name: "checkout"})
			wantStatus(t, "grpc Get: "+what, err, codes.Unauthenticated, bc.want...)
			_, err = td.DataType(ctx, thriftRq(bc.id, bc.token, "shop", "checkout"))
			wantAppException(t, "thrift DataType: "+what, err, bc.want...)
			_, err = tc.Get(ctx, &thriftcat.Credentials{ClientId: bc.id, Token: bc.token}, "shop", "checkout")
			wantCatalogError(t, "thrift Get: "+what, err, thriftcat.ErrorCode_UNAUTHENTICATED, bc.want...)
			for _, e := range []error{err} {
				if bc.token != "" && strings.Contains(e.Error(), bc.token) {
					t.Errorf("%s: the answer %q gives the token away", what, e)
				}
			}
		}
		// The connection is still good after the exceptions.
		if _, err := td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "checkout")); err != nil {
			t.Fatalf("thrift after the bad calls: %v", err)
		}
	}
	// A DataTypeRq without the AuthRq at all.
	_, err := data.DataType(ctx, &inf.DataTypeRq{GroupName: "shop", EnName: "checkout"})
	wantStatus(t, "grpc DataType without AuthRq", err, codes.Unauthenticated, "no credentials")
	if calls := ts.cat.Calls(); len(calls) != 1 {
		t.Errorf("the catalog was asked %v; only the good call may reach it", calls)
	}
}

// Secrets and tokens never appear in an answer, whatever the authenticator
// put in its errors (the fake quotes them).
func TestBadCredentialsNeverEchoTheSecret(t *testing.T) {
	ts := startServer(t, nil)
	data, _, _ := ts.grpcClients(t)
	td, _ := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)
	for _, bc := range badCredentials {
		if bc.token == "" {
			continue
		}
		_, gerr := data.DataType(ctx, dataRq(bc.id, bc.token, "shop", "checkout"))
		_, terr := td.DataType(ctx, thriftRq(bc.id, bc.token, "shop", "checkout"))
		for _, err := range []error{gerr, terr} {
			if err == nil || strings.Contains(err.Error(), bc.token) {
				t.Errorf("%s: answer %v gives the token away", bc.name, err)
			}
		}
	}
}

func TestRateLimitAndGroups(t *testing.T) {
	ts := startServer(t, nil)
	data, cat, _ := ts.grpcClients(t)
	td, tc := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)
	creds := &catalogv1.Credentials{ClientId: "web", Token: secretOf("web")}
	tcreds := &thriftcat.Credentials{ClientId: "web", Token: secretOf("web")}

	ts.au.setLimited("web", true)
	_, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", "checkout"))
	wantStatus(t, "grpc DataType over the rate", err, codes.ResourceExhausted, `client "web" is over its rate`, "retry after 1.5s")
	_, err = cat.List(ctx, &catalogv1.ListRequest{Auth: creds})
	wantStatus(t, "grpc List over the rate", err, codes.ResourceExhausted, "over its rate")
	_, err = td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "checkout"))
	wantAppException(t, "thrift DataType over the rate", err, "rate limited", "retry after 1.5s")
	_, err = tc.Get(ctx, tcreds, "shop", "checkout")
	wantCatalogError(t, "thrift Get over the rate", err, thriftcat.ErrorCode_RESOURCE_EXHAUSTED, "over its rate")
	if got := testutil.ToFloat64(ts.m.calls.WithLabelValues("grpc", "inf.Data/DataType", "ResourceExhausted")); got != 1 {
		t.Errorf("ResourceExhausted calls counted: %v", got)
	}
	// It recovers.
	ts.au.setLimited("web", false)
	if _, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", "checkout")); err != nil {
		t.Fatalf("back under the rate: %v", err)
	}

	// shop may use group shop only.
	_, err = data.DataType(ctx, dataRq("shop", secretOf("shop"), "web", "checkout"))
	wantStatus(t, "grpc DataType of another group", err, codes.PermissionDenied, `client "shop" may not use group "web"`)
	_, err = td.DataType(ctx, thriftRq("shop", secretOf("shop"), "web", "checkout"))
	wantAppException(t, "thrift DataType of another group", err, "permission denied")
	_, err = tc.Get(ctx, &thriftcat.Credentials{ClientId: "shop", Token: secretOf("shop")}, "web", "x")
	wantCatalogError(t, "thrift Get of another group", err, thriftcat.ErrorCode_PERMISSION_DENIED, "may not use group")
}

func TestCatalogServiceGRPC(t *testing.T) {
	ts := startServer(t, nil)
	data, cat, _ := ts.grpcClients(t)
	ctx := ctxT(t)
	web := &catalogv1.Credentials{ClientId: "web", Token: secretOf("web")}
	admin := &catalogv1.Credentials{ClientId: "admin", Token: secretOf("admin")}

	_, err := cat.Get(ctx, &catalogv1.GetRequest{Auth: web, Group: "shop", Name: "checkout"})
	wantStatus(t, "Get of nothing", err, codes.NotFound, `"checkout"`, `"shop"`)
	_, err = cat.Upsert(ctx, &catalogv1.UpsertRequest{Auth: web, Group: "shop", Name: "checkout"})
	wantStatus(t, "Upsert by a client that is not an admin", err, codes.PermissionDenied, "not an admin")
	_, err = cat.Block(ctx, &catalogv1.BlockRequest{Auth: web, Group: "shop", Name: "checkout"})
	wantStatus(t, "Block by a client that is not an admin", err, codes.PermissionDenied, "not an admin")

	up, err := cat.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "checkout", DisplayName: proto.String("Checkout"), Schema: proto.String(`{"type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	e := up.Entry
	if e.Code == 0 || e.DisplayName != "Checkout" || e.Schema != `{"type":"object"}` || e.Status != catalogv1.Status_STATUS_PLANNED || e.CreatedUnixMs == 0 || up.Session.Token == "" || up.Session.ExpiresUnixMs == 0 {
		t.Fatalf("Upsert: %v", up)
	}
	// Unset fields keep their value.
	up, err = cat.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "checkout", Status: catalogv1.Status_STATUS_OBSERVED})
	if err != nil || up.Entry.DisplayName != "Checkout" || up.Entry.Schema == "" || up.Entry.Code != e.Code || up.Entry.Status != catalogv1.Status_STATUS_OBSERVED {
		t.Fatalf("Upsert of the status alone: %v %v", up, err)
	}
	_, err = cat.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "checkout", Schema: proto.String("[1]")})
	wantStatus(t, "Upsert of a bad schema", err, codes.InvalidArgument, "schema")
	_, err = cat.Upsert(ctx, &catalogv1.UpsertRequest{Auth: admin, Group: "shop", Name: "x", Status: 9})
	wantStatus(t, "Upsert of a bad status", err, codes.InvalidArgument, "status 9")
	got, err := cat.Get(ctx, &catalogv1.GetRequest{Auth: web, Group: "shop", Name: "checkout"})
	if err != nil || got.Entry.Code != e.Code || got.Entry.DisplayName != "Checkout" {
		t.Fatalf("Get: %v %v", got, err)
	}
	bl, err := cat.Block(ctx, &catalogv1.BlockRequest{Auth: admin, Group: "shop", Name: "checkout"})
	if err != nil || bl.Entry.Status != catalogv1.Status_STATUS_BLOCKED || bl.Entry.Code != e.Code {
		t.Fatalf("Block: %v %v", bl, err)
	}
	// DataType gives a blocked entry's code too: it is a dictionary.
	rp, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", "checkout"))
	if err != nil || rp.CodeId != e.Code || rp.CnName != "Checkout" {
		t.Fatalf("DataType of the entry: %v %v", rp, err)
	}

	// Catalog errors.
	for _, c := range []struct {
		name string
		code codes.Code
		want string
	}{
		{nameUnavailable + "x", codes.Unavailable, "connection refused"},
		{nameInvalid + "x", codes.InvalidArgument, "bad character"},
		{"", codes.InvalidArgument, "name"},
	} {
		_, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", c.name))
		wantStatus(t, "DataType of "+c.name, err, c.code, c.want)
		_, err = cat.Get(ctx, &catalogv1.GetRequest{Auth: web, Group: "shop", Name: c.name})
		wantStatus(t, "Get of "+c.name, err, c.code, c.want)
	}
}

func TestListPages(t *testing.T) {
	ts := startServer(t, nil)
	_, cat, _ := ts.grpcClients(t)
	_, tc := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)
	for _, g := range []string{"a", "shop", "z"} {
		for i := range 5 {
			ts.cat.Update(ctx, catalog.Key{Group: g, Name: fmt.Sprintf("e%d", i)}, func(e catalog.Entry, _ bool) (catalog.Entry, error) {
				e.Status = catalog.StatusPlanned
				return e, nil
			})
		}
	}
	web := &catalogv1.Credentials{ClientId: "web", Token: secretOf("web")}
	shop := &catalogv1.Credentials{ClientId: "shop", Token: secretOf("shop")}
	pages := func(creds *catalogv1.Credentials, group string, size int32) (names []string, n int) {
		token := ""
		for {
			rp, err := cat.List(ctx, &catalogv1.ListRequest{Auth: creds, Group: group, PageSize: size, PageToken: token})
			if err != nil {
				t.Fatalf("List %q page %d: %v", group, n, err)
			}
			n++
			for _, e := range rp.Entries {
				names = append(names, e.Group+"/"+e.Name)
			}
			if token = rp.NextPageToken; token == "" || n > 20 {
				return names, n
			}
		}
	}
	names, n := pages(web, "", 4)
	if len(names) != 15 || names[0] != "a/e0" || names[14] != "z/e4" || n != 4 {
		t.Errorf("every group in pages of 4: %d pages %v", n, names)
	}
	names, n = pages(web, "shop", 2)
	if len(names) != 5 || names[0] != "shop/e0" || n != 3 {
		t.Errorf("group shop in pages of 2: %d pages %v", n, names)
	}
	// A client limited to group shop lists every group as shop's alone.
	names, _ = pages(shop, "", 3)
	if len(names) != 5 || names[0] != "shop/e0" || names[4] != "shop/e4" {
		t.Errorf("shop's view of every group: %v", names)
	}
	_, err := cat.List(ctx, &catalogv1.ListRequest{Auth: shop, Group: "a"})
	wantStatus(t, "List of another group", err, codes.PermissionDenied, "may not use group")
	_, err = cat.List(ctx, &catalogv1.ListRequest{Auth: web, PageToken: "garbage"})
	wantStatus(t, "List with a bad token", err, codes.InvalidArgument, "page token")
	rp, _ := cat.List(ctx, &catalogv1.ListRequest{Auth: web, Group: "a", PageSize: 2})
	_, err = cat.List(ctx, &catalogv1.ListRequest{Auth: web, Group: "z", PageToken: rp.NextPageToken})
	wantStatus(t, "List with another group's token", err, codes.InvalidArgument, "page token")

	// Thrift: the same pages.
	tcreds := &thriftcat.Credentials{ClientId: "web", Token: secretOf("web")}
	var tnames []string
	token := ""
	for range 10 {
		lr, err := tc.List(ctx, tcreds, "", 6, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range lr.Entries {
			tnames = append(tnames, e.Group+"/"+e.Name)
		}
		if token = lr.NextPageToken; token == "" {
			break
		}
	}
	if len(tnames) != 15 {
		t.Errorf("thrift List: %v", tnames)
	}
	_, err = tc.List(ctx, tcreds, "", 0, "garbage")
	wantCatalogError(t, "thrift List with a bad token", err, thriftcat.ErrorCode_INVALID_ARGUMENT, "page token")
}

func TestCatalogServiceThrift(t *testing.T) {
	for _, framed := range []bool{true, false} {
		t.Run(fmt.Sprintf("framed=%v", framed), func(t *testing.T) {
			ts := startServer(t, func(c *Config) {
				if !framed {
					c.ThriftTransport = TransportBuffered
				}
			})
			td, tc := thriftClients(t, ts.thriftAddr, framed)
			ctx := ctxT(t)
			web := &thriftcat.Credentials{ClientId: "web", Token: secretOf("web")}
			admin := &thriftcat.Credentials{ClientId: "admin", Token: secretOf("admin")}

			_, err := tc.Get(ctx, web, "shop", "checkout")
			wantCatalogError(t, "Get of nothing", err, thriftcat.ErrorCode_NOT_FOUND, `"checkout"`)
			_, err = tc.Upsert(ctx, web, &thriftcat.UpsertRequest{Group: "shop", Name: "checkout"})
			wantCatalogError(t, "Upsert by web", err, thriftcat.ErrorCode_PERMISSION_DENIED, "not an admin")
			st := thriftcat.Status_PLANNED
			up, err := tc.Upsert(ctx, admin, &thriftcat.UpsertRequest{Group: "shop", Name: "checkout", DisplayName: thrift.StringPtr("Checkout"), Status: &st})
			if err != nil || up.Entry.Code == 0 || up.Entry.DisplayName != "Checkout" || up.Entry.Status != thriftcat.Status_PLANNED || up.Session.Token == "" {
				t.Fatalf("Upsert: %v %v", up, err)
			}
			bl, err := tc.Block(ctx, admin, "shop", "checkout")
			if err != nil || bl.Entry.Status != thriftcat.Status_BLOCKED || bl.Entry.Code != up.Entry.Code {
				t.Fatalf("Block: %v %v", bl, err)
			}
			got, err := tc.Get(ctx, &thriftcat.Credentials{Token: up.Session.Token}, "shop", "checkout")
			if err != nil || got.Entry.Status != thriftcat.Status_BLOCKED {
				t.Fatalf("Get with the session token: %v %v", got, err)
			}
			_, err = tc.Get(ctx, web, "shop", nameUnavailable+"x")
			wantCatalogError(t, "Get, store down", err, thriftcat.ErrorCode_UNAVAILABLE, "retry")
			_, err = tc.Upsert(ctx, admin, &thriftcat.UpsertRequest{Group: "shop", Name: "checkout", Schema: thrift.StringPtr("[")})
			wantCatalogError(t, "Upsert of a bad schema", err, thriftcat.ErrorCode_INVALID_ARGUMENT, "schema")
			// inf.Data on the same connection, unmultiplexed.
			rp, err := td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "checkout"))
			if err != nil || rp.CodeId != up.Entry.Code || rp.CnName != "Checkout" {
				t.Fatalf("DataType: %v %v", rp, err)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond })
	data, _, _ := ts.grpcClients(t)
	td, _ := thriftClients(t, ts.thriftAddr, true)
	ctx := ctxT(t)
	_, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", nameSlow+"x"))
	wantStatus(t, "slow catalog, server's call timeout", err, codes.DeadlineExceeded, "deadline exceeded")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = data.DataType(cctx, dataRq("web", secretOf("web"), "shop", nameSlow+"x"))
	wantStatus(t, "slow catalog, client's deadline", err, codes.DeadlineExceeded)
	_, err = td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", nameSlow+"x"))
	wantAppException(t, "thrift, slow catalog", err, "deadline exceeded")
}

func TestHealthAndReflection(t *testing.T) {
	ts := startServer(t, nil)
	_, _, cc := ts.grpcClients(t)
	ctx := ctxT(t)
	hc := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", DataService, CatalogService} {
		rp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || rp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v", svc, rp, err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	all := strings.Join(names, " ")
	for _, want := range []string{DataService, CatalogService, "grpc.health.v1.Health"} {
		if !strings.Contains(" "+all+" ", " "+want+" ") {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
	// The descriptor of inf.Data, by symbol.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: DataService}}); err != nil {
		t.Fatal(err)
	}
	fd, err := stream.Recv()
	if err != nil || len(fd.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection, file of %s: %v %v", DataService, fd, err)
	}
	stream.CloseSend()

	// Shutdown: NOT_SERVING.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cc.Close()
	if err := ts.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	hr, err := ts.health.Check(ctx, &healthpb.HealthCheckRequest{Service: DataService})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after Shutdown: %v %v", hr, err)
	}
}

// A Thrift client that connects and sends nothing, or half a call, does not
// hold Shutdown past its context, nor a goroutine past the idle timeout.
func TestThriftHungClients(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond; c.CallTimeout = 30 * time.Second })

	// Idle: closed by the server after the idle timeout.
	silent, err := net.Dial("tcp", ts.thriftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent client: read %v, want EOF from the server closing it", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("a silent client was closed after %v, want about the idle timeout of 300ms", d)
	}

	// Silent and half-sent clients at Shutdown.
	silent2, err := net.Dial("tcp", ts.thriftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent2.Close()
	half, err := net.Dial("tcp", ts.thriftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	if _, err := half.Write([]byte{0, 0, 1, 0, 0x80}); err != nil { // a frame of 256 bytes, one sent
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "both connections accepted, one busy", func() bool {
		ts.thrift.mu.Lock()
		defer ts.thrift.mu.Unlock()
		busy := 0
		for c := range ts.thrift.conns {
			if c.busy {
				busy++
			}
		}
		return len(ts.thrift.conns) == 2 && busy == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = ts.Shutdown(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %v with a hung client; its context had 500ms", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a call cut: %v, want the context's error", err)
	}
	for _, c := range []net.Conn{silent2, half} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("after Shutdown: read %v, want EOF", err)
		}
	}
	// New connections are refused.
	if c, err := net.DialTimeout("tcp", ts.thriftAddr, time.Second); err == nil {
		c.Close()
		t.Error("the Thrift port still accepts after Shutdown")
	}
}

// Shutdown closes idle connections at once and returns without waiting for
// its context.
func TestShutdownIdleIsQuick(t *testing.T) {
	ts := startServer(t, nil)
	td, _ := thriftClients(t, ts.thriftAddr, true)
	data, _, _ := ts.grpcClients(t)
	ctx := ctxT(t)
	if _, err := td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := data.DataType(ctx, dataRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := ts.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown of idle connections took %v", d)
	}
	if _, err := td.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err == nil {
		t.Error("a Thrift call after Shutdown was answered")
	}
}

func TestThriftLimits(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxConns = 2; c.MaxMessageBytes = 2048 })
	ctx := ctxT(t)
	td1, _ := thriftClients(t, ts.thriftAddr, true)
	if _, err := td1.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Fatal(err)
	}
	// A frame over the limit: refused before it is read, with a short
	// answer saying why, and the connection closed.
	big, err := net.Dial("tcp", ts.thriftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	big.Write([]byte{0, 0, 0x10, 0}) // 4096 bytes
	big.SetReadDeadline(time.Now().Add(5 * time.Second))
	if answer, err := io.ReadAll(big); err != nil || !bytes.Contains(answer, []byte("a frame of 4096 bytes; the limit is 2048")) {
		t.Errorf("a frame over --catalog-rpc-max-message-bytes: read %q, %v; want the reason, then EOF", answer, err)
	}
	testkit.WaitFor(t, 5*time.Second, "the big frame's connection gone", func() bool {
		return testutil.ToFloat64(ts.m.conns.WithLabelValues("thrift")) == 1
	})
	// Two open: a third is closed at once.
	td2, _ := thriftClients(t, ts.thriftAddr, true)
	if _, err := td2.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Fatal(err)
	}
	td3, _ := thriftClients(t, ts.thriftAddr, true)
	if _, err := td3.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err == nil {
		t.Error("a third connection over --catalog-rpc-max-conns 2 was served")
	}
	if got := testutil.ToFloat64(ts.m.rejected.WithLabelValues("thrift")); got != 1 {
		t.Errorf("rejected connections counted: %v", got)
	}
	// The first two still work.
	if _, err := td1.DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Errorf("first connection after the limit: %v", err)
	}

	// gRPC: a message over the limit is refused.
	data, _, _ := ts.grpcClients(t)
	_, err = data.DataType(ctx, dataRq("web", secretOf("web"), "shop", strings.Repeat("x", 4096)))
	wantStatus(t, "grpc message over the limit", err, codes.ResourceExhausted)
}

func TestConfig(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.ThriftTransport = "http" }, "--thrift-transport"},
		{func(c *Config) { c.MaxMessageBytes = 10 }, "--catalog-rpc-max-message-bytes"},
		{func(c *Config) { c.MaxConns = 0 }, "--catalog-rpc-max-conns"},
		{func(c *Config) { c.CallTimeout = 0 }, "--catalog-rpc-timeout"},
		{func(c *Config) { c.IdleTimeout = -1 }, "--catalog-rpc-idle-timeout"},
		{func(c *Config) { c.GRPCMaxStreams = 0 }, "--grpc-max-streams"},
		{func(c *Config) { c.GRPCListen, c.ThriftListen = ":9000", ":9000" }, "each its own"},
	} {
		cfg := DefaultConfig()
		c.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want an error about %s", err, c.want)
		}
	}
	if _, err := New(nil, newFakeAuth(), DefaultConfig(), nil, nil); err == nil || !strings.Contains(err.Error(), "--clients") {
		t.Errorf("New without an authenticator: %v", err)
	}
}

// An unknown method of inf.Data is answered with UNKNOWN_METHOD and the
// connection goes on serving.
func TestThriftUnknownMethod(t *testing.T) {
	ts := startServer(t, nil)
	ctx := ctxT(t)
	conf := &thrift.TConfiguration{SocketTimeout: 10 * time.Second}
	sock := thrift.NewTSocketConf(ts.thriftAddr, conf)
	if err := sock.Open(); err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	p := thrift.NewTBinaryProtocolConf(thrift.NewTFramedTransportConf(sock, conf), conf)
	cl := thrift.NewTStandardClient(p, p)
	var res thriftinf.DataDataTypeResult
	_, err := cl.Call(ctx, "NoSuchMethod", &thriftinf.DataDataTypeArgs{DataTypeRq: thriftRq("web", secretOf("web"), "shop", "a")}, &res)
	var ae thrift.TApplicationException
	if !errors.As(err, &ae) || ae.TypeId() != thrift.UNKNOWN_METHOD {
		t.Fatalf("unknown method: %v", err)
	}
	rp, err := thriftinf.NewDataClient(cl).DataType(ctx, thriftRq("web", secretOf("web"), "shop", "a"))
	if err != nil || rp.CodeId == 0 {
		t.Fatalf("DataType after an unknown method, same connection: %v %v", rp, err)
	}
}

func TestGRPCConnectionLimit(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxConns = 1 })
	ctx := ctxT(t)
	first, _, _ := ts.grpcClients(t)
	if _, err := first.DataType(ctx, dataRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Fatal(err)
	}
	second, _, _ := ts.grpcClients(t)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := second.DataType(cctx, dataRq("web", secretOf("web"), "shop", "a")); err == nil {
		t.Error("a second connection over --catalog-rpc-max-conns 1 was served")
	}
	if got := testutil.ToFloat64(ts.m.rejected.WithLabelValues("grpc")); got < 1 {
		t.Errorf("rejected gRPC connections counted: %v", got)
	}
	if _, err := first.DataType(ctx, dataRq("web", secretOf("web"), "shop", "a")); err != nil {
		t.Errorf("the first connection after the limit: %v", err)
	}
}
