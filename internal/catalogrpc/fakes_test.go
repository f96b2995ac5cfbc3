package catalogrpc

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inlet-dev/inlet/api/gen/pb/catalogv1"
	"github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftcat "github.com/inlet-dev/inlet/api/gen/thrift/catalogv1"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fakeCatalog is an in-memory Catalog that records its calls. Names with
// the prefixes below fail as they say.
type fakeCatalog struct {
	mu      sync.Mutex
	entries map[catalog.Key]catalog.Entry
	next    int64
	open    bool
	calls   []string
	// block, when set, is waited on (or the call's context) by Lookup.
	block chan struct{}
}

const (
	nameUnavailable = "unavailable-"
	nameInvalid     = "invalid-"
	nameSlow        = "slow-"
)

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{entries: map[catalog.Key]catalog.Entry{}, open: true}
}

func (f *fakeCatalog) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeCatalog) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCatalog) fail(ctx context.Context, k catalog.Key) error {
	switch {
	case strings.HasPrefix(k.Name, nameUnavailable):
		return fmt.Errorf("redis 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused: %w", catalog.ErrUnavailable) // as go-redis says it
	case strings.HasPrefix(k.Name, nameInvalid):
		return fmt.Errorf("%w: name %q has a bad character", catalog.ErrInvalid, k.Name)
	case strings.HasPrefix(k.Name, nameSlow):
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *fakeCatalog) Lookup(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	f.record("Lookup " + k.Group + "/" + k.Name)
	if err := f.fail(ctx, k); err != nil {
		return catalog.Entry{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[k]; ok {
		return e, nil
	}
	if !f.open {
		return catalog.Entry{}, fmt.Errorf("%s/%s: %w", k.Group, k.Name, catalog.ErrNotFound)
	}
	f.next++
	now := time.Now()
	e := catalog.Entry{Group: k.Group, Name: k.Name, Code: f.next, Status: catalog.StatusObserved, Created: now, Updated: now}
	f.entries[k] = e
	return e, nil
}

func (f *fakeCatalog) Get(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	f.record("Get " + k.Group + "/" + k.Name)
	if err := f.fail(ctx, k); err != nil {
		return catalog.Entry{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[k]; ok {
		return e, nil
	}
	return catalog.Entry{}, fmt.Errorf("%s/%s: %w", k.Group, k.Name, catalog.ErrNotFound)
}

func (f *fakeCatalog) List(ctx context.Context, group string, after catalog.Key, limit int) ([]catalog.Entry, error) {
	f.record(fmt.Sprintf("List %q after %s/%s limit %d", group, after.Group, after.Name, limit))
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []catalog.Entry
	for _, e := range f.entries {
		if group == "" || e.Group == group {
			all = append(all, e)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Group != all[j].Group {
			return all[i].Group < all[j].Group
		}
		return all[i].Name < all[j].Name
	})
	var out []catalog.Entry
	for _, e := range all {
		if after.Name != "" && (e.Group < after.Group || e.Group == after.Group && e.Name <= after.Name) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

func (f *fakeCatalog) Update(ctx context.Context, k catalog.Key, fn func(catalog.Entry, bool) (catalog.Entry, error)) (catalog.Entry, error) {
	f.record("Update " + k.Group + "/" + k.Name)
	if err := f.fail(ctx, k); err != nil {
		return catalog.Entry{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.entries[k]
	if !ok {
		old = catalog.Entry{Group: k.Group, Name: k.Name}
	}
	e, err := fn(old, ok)
	if err != nil {
		return catalog.Entry{}, err
	}
	if len(e.Schema) > 0 && e.Schema[0] != '{' {
		return catalog.Entry{}, fmt.Errorf("%w: the schema is not a JSON object", catalog.ErrInvalid)
	}
	now := time.Now()
	if ok {
		e.Code, e.Created = old.Code, old.Created
	} else {
		f.next++
		e.Code, e.Created = f.next, now
	}
	e.Updated = now
	f.entries[k] = e
	return e, nil
}

func (f *fakeCatalog) Block(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	f.record("Block " + k.Group + "/" + k.Name)
	return f.Update(ctx, k, func(e catalog.Entry, _ bool) (catalog.Entry, error) {
		e.Status = catalog.StatusBlocked
		return e, nil
	})
}

func (f *fakeCatalog) DefaultGroup() string { return "default" }

// fakeAuth knows clients by id; a client's secret is "secret-<id>"; its
// session tokens are "sess.<id>.<n>"; "sess-expired.<id>" is expired and
// any other "sess" token tampered. Its errors quote the token, as a careless
// authenticator might, so that tests can check the front ends never pass
// them on.
type fakeAuth struct {
	mu      sync.Mutex
	clients map[string]*auth.Client
	n       int
	limited map[string]bool
	calls   []string
}

func newFakeAuth(clients ...auth.Client) *fakeAuth {
	a := &fakeAuth{clients: map[string]*auth.Client{}, limited: map[string]bool{}}
	for i := range clients {
		a.clients[clients[i].ID] = &clients[i]
	}
	return a
}

func secretOf(id string) string { return "secret-" + id }

func (a *fakeAuth) AuthenticateFrom(_, id, token string) (auth.Principal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, "Authenticate "+id)
	if token == "" {
		return auth.Principal{}, auth.ErrMissing
	}
	if strings.HasPrefix(token, "sess") {
		if strings.HasPrefix(token, "sess-expired.") {
			return auth.Principal{}, fmt.Errorf("%w: token %q", auth.ErrExpired, token)
		}
		parts := strings.Split(token, ".")
		c, ok := a.clients[parts[min(1, len(parts)-1)]]
		if len(parts) != 3 || parts[0] != "sess" || !ok {
			return auth.Principal{}, fmt.Errorf("%w: token %q", auth.ErrTampered, token)
		}
		if id != "" && id != c.ID {
			return auth.Principal{}, fmt.Errorf("%w: token %q is %s's", auth.ErrWrongClient, token, c.ID)
		}
		return a.principal(c), nil
	}
	if id == "" {
		for _, c := range a.clients {
			if token == secretOf(c.ID) {
				return a.principal(c), nil
			}
		}
		return auth.Principal{}, fmt.Errorf("%w: secret %q", auth.ErrBadCredentials, token)
	}
	c, ok := a.clients[id]
	if !ok {
		return auth.Principal{}, fmt.Errorf("%w: %q with secret %q", auth.ErrBadCredentials, id, token)
	}
	if token != secretOf(id) {
		return auth.Principal{}, fmt.Errorf("%w: %q is not %s's secret", auth.ErrBadCredentials, token, id)
	}
	return a.principal(c), nil
}

func (a *fakeAuth) principal(c *auth.Client) auth.Principal {
	a.n++
	return auth.Principal{Client: c, Session: fmt.Sprintf("sess.%s.%d", c.ID, a.n), Expires: time.Now().Add(time.Minute)}
}

func (a *fakeAuth) Allow(p auth.Principal, n int) (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.limited[p.Client.ID] {
		return 1500 * time.Millisecond, fmt.Errorf("%w: %s", auth.ErrRateLimited, p.Client.ID)
	}
	return 0, nil
}

func (a *fakeAuth) AllowGroup(p auth.Principal, group string) error {
	if len(p.Client.Groups) == 0 {
		return nil
	}
	for _, g := range p.Client.Groups {
		if g == group {
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not use %s", auth.ErrForbidden, p.Client.ID, group)
}

func (a *fakeAuth) setLimited(id string, on bool) {
	a.mu.Lock()
	a.limited[id] = on
	a.mu.Unlock()
}

// The test clients: web (any group), shop (group shop only, default group
// shop), admin (may write).
func testClients() []auth.Client {
	return []auth.Client{
		{ID: "web"},
		{ID: "shop", Groups: []string{"shop"}, DefaultGroup: "shop"},
		{ID: "admin", Admin: true},
	}
}

// testServer is a Server on loopback listeners of both front ends.
type testServer struct {
	*Server
	cat        *fakeCatalog
	au         *fakeAuth
	reg        *prometheus.Registry
	grpcAddr   string
	thriftAddr string
	done       chan error
}

func startServer(t *testing.T, mutate func(*Config)) *testServer {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	ts := &testServer{cat: newFakeCatalog(), au: newFakeAuth(testClients()...), reg: prometheus.NewRegistry(), done: make(chan error, 2)}
	s, err := New(ts.cat, ts.au, cfg, testkit.Logger(t), ts.reg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = s
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.grpcAddr, ts.thriftAddr = gl.Addr().String(), tl.Addr().String()
	go func() { ts.done <- s.ServeGRPC(gl) }()
	go func() { ts.done <- s.ServeThrift(tl) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		for range 2 {
			select {
			case err := <-ts.done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("a Serve did not return after Shutdown")
			}
		}
	})
	return ts
}

// grpcClients dials the gRPC front end.
func (ts *testServer) grpcClients(t *testing.T) (inf.DataClient, catalogv1.CatalogClient, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inf.NewDataClient(cc), catalogv1.NewCatalogClient(cc), cc
}

// thriftClients connects to the Thrift front end: inf.Data unmultiplexed,
// the Catalog multiplexed, on one connection (use them one call at a time).
func thriftClients(t *testing.T, addr string, framed bool) (*thriftinf.DataClient, *thriftcat.CatalogClient) {
	t.Helper()
	conf := &thrift.TConfiguration{ConnectTimeout: 5 * time.Second, SocketTimeout: 10 * time.Second}
	sock := thrift.NewTSocketConf(addr, conf)
	if err := sock.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	var tr thrift.TTransport = thrift.NewTBufferedTransport(sock, 4096)
	if framed {
		tr = thrift.NewTFramedTransportConf(sock, conf)
	}
	proto := thrift.NewTBinaryProtocolConf(tr, conf)
	mp := thrift.NewTMultiplexedProtocol(proto, CatalogService)
	return thriftinf.NewDataClient(thrift.NewTStandardClient(proto, proto)), thriftcat.NewCatalogClient(thrift.NewTStandardClient(mp, mp))
}
