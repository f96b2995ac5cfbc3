package loadclient

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbinf "github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
	"github.com/inlet-dev/inlet/internal/bench"
)

// fakeCatalog is the inf.Data service of the tests: client "c1" with
// secret "s3cret"; a call with the secret gets a fresh session token, a
// call with a session token gets it back (until it has been used
// expireAfter times, if set: then it is refused). It records every call.
type fakeCatalog struct {
	mu          sync.Mutex
	calls       int
	secretCalls int
	tokenCalls  int
	names       map[string]int
	tokens      map[string]int // issued → uses
	issued      int
	expireAfter int
	// refreshAfter, if set, answers a token used that many times with a
	// new one (as a server does for a token near its expiry).
	refreshAfter int
	// fail, if set, answers a name with an error status.
	fail func(name string) codes.Code
}

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{names: map[string]int{}, tokens: map[string]int{}}
}

// answer is the fake's logic, shared by its gRPC and Thrift servers.
func (f *fakeCatalog) answer(id, token, group, name string) (code int64, session string, err codes.Code, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.names[group+"/"+name]++
	switch uses, isToken := f.tokens[token]; {
	case id != "c1":
		return 0, "", codes.Unauthenticated, "auth: unknown client"
	case token == "s3cret":
		f.secretCalls++
		f.issued++
		session = fmt.Sprintf("session-%d", f.issued)
		f.tokens[session] = 0
	case isToken && f.expireAfter > 0 && uses >= f.expireAfter:
		return 0, "", codes.Unauthenticated, "auth: session token expired"
	case isToken && f.refreshAfter > 0 && uses+1 >= f.refreshAfter:
		f.tokenCalls++
		f.tokens[token]++
		f.issued++
		session = fmt.Sprintf("session-%d", f.issued)
		f.tokens[session] = 0
	case isToken:
		f.tokenCalls++
		f.tokens[token]++
		session = token
	default:
		return 0, "", codes.Unauthenticated, "auth: wrong secret"
	}
	if f.fail != nil {
		if c := f.fail(name); c != codes.OK {
			return 0, "", c, "failing " + name + " as told"
		}
	}
	return int64(len(name)), session, codes.OK, ""
}

func (f *fakeCatalog) snapshot() (calls, secret, token int, names map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := make(map[string]int, len(f.names))
	for k, v := range f.names {
		n[k] = v
	}
	return f.calls, f.secretCalls, f.tokenCalls, n
}

type fakeGRPC struct {
	pbinf.UnimplementedDataServer
	f *fakeCatalog
}

func (s fakeGRPC) DataType(_ context.Context, rq *pbinf.DataTypeRq) (*pbinf.DataTypeRp, error) {
	code, session, c, msg := s.f.answer(rq.GetAuthRq().GetClientId(), rq.GetAuthRq().GetToken(), rq.GetGroupName(), rq.GetEnName())
	if c != codes.OK {
		return nil, status.Error(c, msg)
	}
	return &pbinf.DataTypeRp{AuthRp: &pbinf.AuthRp{Token: session}, CodeId: code, CnName: "N"}, nil
}

type fakeThrift struct{ f *fakeCatalog }

func (s fakeThrift) DataType(_ context.Context, rq *thriftinf.DataTypeRq) (*thriftinf.DataTypeRp, error) {
	code, session, c, msg := s.f.answer(rq.GetAuthrq().GetClientId(), rq.GetAuthrq().GetToken(), rq.GetGroupName(), rq.GetEnName())
	if c != codes.OK {
		// As inf.Data's IDL declares no exception: a TApplicationException
		// whose message says why.
		return nil, thrift.NewTApplicationException(thrift.INTERNAL_ERROR, c.String()+": "+msg)
	}
	return &thriftinf.DataTypeRp{Authrp: &thriftinf.AuthRp{Token: session}, CodeId: code, CnName: "N"}, nil
}

// startFake serves f over proto on loopback and returns its address.
func startFake(t *testing.T, proto, transport string, f *fakeCatalog) string {
	t.Helper()
	if proto == ProtoGRPC {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		pbinf.RegisterDataServer(s, fakeGRPC{f: f})
		go s.Serve(l)
		t.Cleanup(s.Stop)
		return l.Addr().String()
	}
	sock, err := thrift.NewTServerSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tf := thrift.TTransportFactory(thrift.NewTFramedTransportFactoryConf(thrift.NewTTransportFactory(), nil))
	if transport == ThriftBuffered {
		tf = thrift.NewTBufferedTransportFactory(4096)
	}
	s := thrift.NewTSimpleServer4(thriftinf.NewDataProcessor(fakeThrift{f: f}), sock, tf, thrift.NewTBinaryProtocolFactoryConf(nil))
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Stop() })
	return sock.Addr().String()
}

func catalogTarget(t *testing.T, cfg CatalogConfig) *Catalog {
	t.Helper()
	c, err := NewCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// protos are the protocols and transports every test runs over.
var protos = []struct{ proto, transport string }{
	{ProtoGRPC, ""}, {ProtoThrift, ThriftFramed}, {ProtoThrift, ThriftBuffered},
}

func forEachProto(t *testing.T, test func(t *testing.T, f *fakeCatalog, cfg CatalogConfig)) {
	for _, p := range protos {
		t.Run(p.proto+p.transport, func(t *testing.T) {
			f := newFakeCatalog()
			cfg := DefaultCatalogConfig()
			cfg.Proto, cfg.ThriftTransport = p.proto, p.transport
			if cfg.ThriftTransport == "" {
				cfg.ThriftTransport = ThriftFramed
			}
			cfg.Addr = startFake(t, p.proto, cfg.ThriftTransport, f)
			cfg.ClientID, cfg.Secret = "c1", "s3cret"
			cfg.Connections, cfg.Keys = 4, 10
			test(t, f, cfg)
		})
	}
}

// TestCatalogSessionToken: the first call presents the secret, the second
// the session token the first answer carried, not the secret.
func TestCatalogSessionToken(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		c := catalogTarget(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 3 {
			if res := c.Do(ctx); !res.OK || res.Status != StatusOK || res.Err != nil || res.Sent == 0 || res.Received == 0 {
				t.Fatalf("call %d: %+v", i, res)
			}
		}
		calls, secret, token, _ := f.snapshot()
		if calls != 3 || secret != 1 || token != 2 {
			t.Fatalf("server saw %d calls, %d with the secret, %d with a session token; want 3, 1, 2", calls, secret, token)
		}
		if st := c.AuthStats(); st != (CatalogAuthStats{Secret: 1, Session: 2, Adopted: 1}) {
			t.Fatalf("auth stats %+v", st)
		}
	})
}

// TestCatalogSecretEveryCall: with AuthSecret, no session token is used.
func TestCatalogSecretEveryCall(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		cfg.Auth = AuthSecret
		c := catalogTarget(t, cfg)
		for range 3 {
			if res := c.Do(context.Background()); !res.OK {
				t.Fatalf("%+v", res)
			}
		}
		if _, secret, token, _ := f.snapshot(); secret != 3 || token != 0 {
			t.Fatalf("%d calls with the secret, %d with a token; want 3, 0", secret, token)
		}
	})
}

// TestCatalogTokenRefused: a session token the server refuses (expired)
// is counted as Unauthenticated, and the next call presents the secret
// again and carries on with the new token.
func TestCatalogTokenRefused(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		f.expireAfter = 2
		c := catalogTarget(t, cfg)
		var got []string
		for range 6 {
			got = append(got, c.Do(context.Background()).Status)
		}
		// secret, token, token, refused, secret, token
		want := "OK OK OK Unauthenticated OK OK"
		if strings.Join(got, " ") != want {
			t.Fatalf("answers %v, want %s", got, want)
		}
		if st := c.AuthStats(); st.Secret != 2 || st.Refused != 1 || st.Adopted != 2 {
			t.Fatalf("auth stats %+v", st)
		}
	})
}

// TestCatalogTokenRefreshed: a new token in an answer is presented from
// then on.
func TestCatalogTokenRefreshed(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		f.refreshAfter = 2
		c := catalogTarget(t, cfg)
		for range 5 {
			if res := c.Do(context.Background()); !res.OK {
				t.Fatalf("%+v", res)
			}
		}
		// secret → session-1; session-1 twice (the second answer brings
		// session-2); session-2 twice (→ session-3).
		f.mu.Lock()
		uses := fmt.Sprint(f.tokens["session-1"], f.tokens["session-2"], f.tokens["session-3"], f.secretCalls)
		f.mu.Unlock()
		if uses != "2 2 0 1" {
			t.Fatalf("uses of session-1, -2, -3 and of the secret: %s, want 2 2 0 1", uses)
		}
		if st := c.AuthStats(); st.Adopted != 3 || st.Secret != 1 || st.Session != 4 {
			t.Fatalf("auth stats %+v", st)
		}
	})
}

// TestCatalogClosedLoop: every lookup the server answered is in the
// report, over the kept connections, and the cycled keys are those asked.
func TestCatalogClosedLoop(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		c := catalogTarget(t, cfg)
		rep, err := bench.Run(context.Background(), closedLoop(8, 0, 300*time.Millisecond), c.Do)
		if err != nil {
			t.Fatal(err)
		}
		calls, secret, token, names := f.snapshot()
		if rep.Requests == 0 || rep.OK != rep.Requests || int64(calls) != rep.Requests || rep.Events != rep.Requests {
			t.Fatalf("report: %d requests, %d ok, %d events; server saw %d", rep.Requests, rep.OK, rep.Events, calls)
		}
		if rep.Status[StatusOK] != rep.OK || len(rep.Errors) != 0 {
			t.Fatalf("statuses %v, errors %v", rep.Status, rep.Errors)
		}
		// The first call presents the secret, the others wait for the
		// token it brings and present that.
		if secret != 1 || secret+token != calls || token == 0 {
			t.Fatalf("%d calls: %d with the secret, %d with a token", calls, secret, token)
		}
		if len(names) != 10 {
			t.Fatalf("%d distinct keys asked, want 10: %v", len(names), names)
		}
		// Each secret call got a token of its own; the target keeps the
		// first and does not flip between them as their answers come.
		if st := c.AuthStats(); st.Adopted != 1 || st.Secret != int64(secret) || st.Session != int64(token) {
			t.Fatalf("auth stats %+v; server saw %d with the secret, %d with a token", st, secret, token)
		}
		for k := range names {
			if !strings.HasPrefix(k, "bench/key-") {
				t.Fatalf("key %q", k)
			}
		}
	})
}

// TestCatalogOpenLoop: the open loop sends what its rate says.
func TestCatalogOpenLoop(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		c := catalogTarget(t, cfg)
		rep, err := bench.Run(context.Background(), openLoop(400, 16, 0, 500*time.Millisecond), c.Do)
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _, _ := f.snapshot()
		if rep.Mode != "open" || rep.Intended != 200 || rep.Requests+rep.Dropped != 200 || rep.OK != rep.Requests || int64(calls) != rep.Requests {
			t.Fatalf("mode %s: %d intended, %d requests, %d dropped, %d ok; server saw %d", rep.Mode, rep.Intended, rep.Requests, rep.Dropped, rep.OK, calls)
		}
		if rep.Dropped > 20 {
			t.Fatalf("%d of 200 dropped on loopback", rep.Dropped)
		}
	})
}

// TestCatalogMiss: every lookup is of a name not asked before.
func TestCatalogMiss(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		cfg.Miss = true
		c := catalogTarget(t, cfg)
		rep, err := bench.Run(context.Background(), closedLoop(4, 0, 200*time.Millisecond), c.Do)
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _, names := f.snapshot()
		if rep.OK == 0 || len(names) != calls {
			t.Fatalf("%d ok, %d calls, %d distinct names", rep.OK, calls, len(names))
		}
		c2 := catalogTarget(t, cfg)
		c2.Do(context.Background())
		if _, _, _, names2 := f.snapshot(); len(names2) != calls+1 {
			t.Fatal("a second target asked a name the first had")
		}
	})
}

// TestCatalogPrefill asks every key once.
func TestCatalogPrefill(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		cfg.Keys = 100
		c := catalogTarget(t, cfg)
		if err := c.Prefill(context.Background(), 8); err != nil {
			t.Fatal(err)
		}
		calls, _, _, names := f.snapshot()
		if calls != 100 || len(names) != 100 {
			t.Fatalf("prefill: %d calls, %d keys", calls, len(names))
		}
		f.fail = func(name string) codes.Code {
			if name == "key-42" {
				return codes.Unavailable
			}
			return codes.OK
		}
		if err := c.Prefill(context.Background(), 8); err == nil || !strings.Contains(err.Error(), "bench/key-42") || !strings.Contains(err.Error(), "Unavailable") {
			t.Fatalf("prefill with a failing key: %v", err)
		}
	})
}

// TestCatalogErrorsClassified: the server's errors are counted by status
// as gRPC names them, on both protocols; a refused connection is a
// client error.
func TestCatalogErrorsClassified(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		f.fail = func(name string) codes.Code {
			switch name {
			case "key-1":
				return codes.ResourceExhausted
			case "key-2":
				return codes.Unavailable
			case "key-3":
				return codes.PermissionDenied
			}
			return codes.OK
		}
		cfg.Keys = 5
		c := catalogTarget(t, cfg)
		rep, err := bench.Run(context.Background(), closedLoop(1, 0, 200*time.Millisecond), c.Do)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{StatusOK, StatusResourceExhausted, StatusUnavailable, StatusPermissionDenied} {
			if rep.Status[s] == 0 {
				t.Errorf("no %s in %v", s, rep.Status)
			}
		}
		if len(rep.Status) != 4 || len(rep.Errors) != 0 || rep.OK != rep.Status[StatusOK] {
			t.Errorf("statuses %v, errors %v, ok %d", rep.Status, rep.Errors, rep.OK)
		}

		cfg.Secret = "wrong"
		bad := catalogTarget(t, cfg)
		rep, err = bench.Run(context.Background(), closedLoop(2, 0, 100*time.Millisecond), bad.Do)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK != 0 || rep.Status[StatusUnauthenticated] != rep.Requests || rep.Requests == 0 {
			t.Errorf("wrong secret: %d requests, statuses %v", rep.Requests, rep.Status)
		}
		if st := bad.AuthStats(); st.Session != 0 || st.Adopted != 0 {
			t.Errorf("wrong secret: auth stats %+v", st)
		}

		l, _ := net.Listen("tcp", "127.0.0.1:0")
		cfg.Addr = l.Addr().String()
		l.Close()
		gone := catalogTarget(t, cfg)
		r := closedLoop(1, 0, 100*time.Millisecond)
		r.Timeout = time.Second
		rep, err = bench.Run(context.Background(), r, gone.Do)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Requests == 0 || len(rep.Errors) != 1 || rep.Errors[0].Kind != bench.KindRefused {
			t.Errorf("no server: %d requests, statuses %v, errors %+v", rep.Requests, rep.Status, rep.Errors)
		}
	})
}

// TestCatalogTimeout: a server that does not answer in time is a timeout,
// and a Thrift connection cut by one is not reused out of step.
func TestCatalogTimeout(t *testing.T) {
	forEachProto(t, func(t *testing.T, f *fakeCatalog, cfg CatalogConfig) {
		release := make(chan struct{})
		var held, released sync.Once
		let := func() { released.Do(func() { close(release) }) }
		defer let()
		f.fail = func(name string) codes.Code {
			if name == "key-0" {
				held.Do(func() { <-release })
			}
			return codes.OK
		}
		cfg.Connections = 1
		c := catalogTarget(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		res := c.Do(ctx)
		cancel()
		if res.Err == nil || bench.Classify(res.Err) != bench.KindTimeout {
			t.Fatalf("slow answer: %+v", res)
		}
		// The late answer to key-0 must not be taken for the next call's.
		let()
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res = c.Do(ctx)
			cancel()
			if !res.OK {
				t.Fatalf("after a timeout: %+v", res)
			}
		}
	})
}

// TestThriftStatus names the messages a Thrift server may give.
func TestThriftStatus(t *testing.T) {
	for msg, want := range map[string]string{
		"Unauthenticated: auth: wrong secret":           StatusUnauthenticated,
		"auth: session token invalid":                   StatusUnauthenticated,
		"auth: over the client's rate":                  StatusResourceExhausted,
		"catalog: store unavailable":                    StatusUnavailable,
		"catalog: no such event type":                   StatusNotFound,
		"catalog: invalid entry: empty name":            StatusInvalidArgument,
		"auth: not allowed: group x":                    StatusPermissionDenied,
		"something else":                                "TApplicationException",
		"rate limited: client \"c\" is over its rate":   StatusResourceExhausted,
		"deadline exceeded: the catalog did not answer": StatusDeadlineExceeded,
		"internal: checking the credentials failed":     StatusInternal,
		"RESOURCE_EXHAUSTED: retry after 1s please":     StatusResourceExhausted,
	} {
		if got := ThriftStatus(thrift.NewTApplicationException(thrift.INTERNAL_ERROR, msg)); got != want {
			t.Errorf("%q: %s, want %s", msg, got, want)
		}
	}
}
