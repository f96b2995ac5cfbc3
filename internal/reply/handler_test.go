package reply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fakeTransport is a Transport whose health a test sets.
type fakeTransport struct {
	mu  sync.Mutex
	err error
}

func (t *fakeTransport) Address() Address { return Address{Kind: "kafka", Name: "inlet.replies.test"} }
func (t *fakeTransport) Close()           {}

func (t *fakeTransport) Healthy() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// fakeProducer records the request records it is handed and plays the
// worker: it decodes each with ParseRequest and delivers worker's reply to
// the router, on the handler's sender goroutine.
type fakeProducer struct {
	tb     testing.TB
	router *Router

	mu     sync.Mutex
	recs   []event.Record
	refuse error                       // Produce returns it
	fail   error                       // done gets it: Kafka did not take the record
	worker func(Request) (Reply, bool) // the reply to a request; false: none
}

func (p *fakeProducer) Produce(rec *event.Record, done func(error)) error {
	p.mu.Lock()
	p.recs = append(p.recs, *rec)
	refuse, fail, worker := p.refuse, p.fail, p.worker
	p.mu.Unlock()
	if refuse != nil {
		return refuse
	}
	if fail != nil {
		done(fail)
		return nil
	}
	req, err := ParseRequest(rec.Key, rec.Value, rec.Headers, "")
	if err != nil {
		p.tb.Errorf("the handler produced a request no worker can read: %v", err)
		return nil
	}
	if worker != nil {
		if rep, ok := worker(req); ok {
			rep.ID = req.ID
			p.router.Deliver(rep)
		}
	}
	done(nil)
	return nil
}

// records returns the records produced so far.
func (p *fakeProducer) records() []event.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event.Record(nil), p.recs...)
}

var _ Producer = (*fakeProducer)(nil)
var _ Transport = (*fakeTransport)(nil)

// echo answers each request with its body and content type.
func echo(req Request) (Reply, bool) {
	return Reply{Status: 200, ContentType: req.ContentType, Body: req.Body}, true
}

// fixture is a Handler with fakes behind it.
type fixture struct {
	tb        testing.TB
	cfg       Config
	router    *Router
	transport *fakeTransport
	producer  *fakeProducer
	mux       *http.ServeMux
}

// newFixture returns a handler enabling services billing and slow, with a
// 2 s timeout capped at 5 s, a 64-byte body limit and the echo worker;
// edit changes the config.
func newFixture(tb testing.TB, edit func(*Config)) *fixture {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Services = []string{"billing", "slow"}
	cfg.Timeout, cfg.MaxTimeout, cfg.MaxBodyBytes = 2*time.Second, 5*time.Second, 64
	if edit != nil {
		edit(&cfg)
	}
	f := &fixture{tb: tb, cfg: cfg, router: NewRouter(cfg.MaxInFlight, nil), transport: &fakeTransport{}, mux: http.NewServeMux()}
	f.producer = &fakeProducer{tb: tb, router: f.router, worker: echo}
	h, err := NewHandler(cfg, f.router, f.transport, f.producer, testkit.Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	h.Register(f.mux)
	tb.Cleanup(h.Close)
	return f
}

// serve runs one call and checks that it left no waiter of its own behind.
func (f *fixture) serve(r *http.Request) *httptest.ResponseRecorder {
	f.tb.Helper()
	before := f.router.InFlight()
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, r)
	if n := f.router.InFlight() - before; n != 0 {
		f.tb.Errorf("%s %s: %d waiters left in the router", r.Method, r.URL, n)
	}
	return w
}

// post is a POST of body to /v1/rpc/service with headers (name, value, ...).
func post(service, body string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/rpc/"+service, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// chunked makes r a request of unknown length, as a chunked one is.
func chunked(r *http.Request) *http.Request {
	r.ContentLength = -1
	return r
}

// errorOf is the message of a JSON error answer.
func errorOf(tb testing.TB, w *httptest.ResponseRecorder) string {
	tb.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
		tb.Fatalf("answer %d %q: not a JSON error", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		tb.Errorf("error answer with content type %q", ct)
	}
	return e.Error
}

// TestHandlerForwardsHeaders: what a request record carries of the HTTP
// request. Credentials and the query string are withheld unless allowed
// (the request topic keeps them for its retention; they were copied).
func TestHandlerForwardsHeaders(t *testing.T) {
	t.Parallel()
	for _, allowed := range []bool{false, true} {
		t.Run(fmt.Sprintf("credentials allowed=%v", allowed), func(t *testing.T) {
			t.Parallel()
			testForwardHeaders(t, allowed)
		})
	}
}

func testForwardHeaders(t *testing.T, allowed bool) {
	f := newFixture(t, func(c *Config) {
		if allowed {
			c.ForwardHeaders, c.ForwardQuery = []string{"authorization", "Cookie"}, true
		}
	})
	r := post("billing", `{"n":1}`,
		"Cookie", "session=s3cret",
		"Content-Type", "application/json",
		"X-Trace-Id", "t1",
		"Authorization", "Bearer x",
		"Accept", "text/plain", "Accept", "application/json",
		"Inlet-Timeout", "1s",
		"Connection", "keep-alive, X-Hop", "X-Hop", "1",
		"Keep-Alive", "timeout=5", "Te", "trailers", "Upgrade", "h2c", "Trailer", "X-T",
		"Transfer-Encoding", "chunked", "Proxy-Connection", "close", "Proxy-Authorization", "Basic x",
		"Content-Length", "7")
	r.URL.RawQuery = "a=1&b=2"
	w := f.serve(r)
	if w.Code != http.StatusOK || w.Body.String() != `{"n":1}` || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d %q (%s)", w.Code, w.Body, w.Header().Get("Content-Type"))
	}
	recs := f.producer.records()
	if len(recs) != 1 {
		t.Fatalf("%d records produced, want 1", len(recs))
	}
	rec := recs[0]
	if rec.Topic != "rpc.billing" || rec.EventID == "" || string(rec.Key) != rec.EventID {
		t.Errorf("record topic %q, key %q, event id %q", rec.Topic, rec.Key, rec.EventID)
	}
	got := map[string]string{}
	for _, h := range rec.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	if got[HeaderCorrelationID] != rec.EventID || got[HeaderReplyTo] != "kafka:inlet.replies.test" || got[HeaderDeadline] == "" {
		t.Errorf("correlation id, reply-to, deadline: %q %q %q", got[HeaderCorrelationID], got[HeaderReplyTo], got[HeaderDeadline])
	}
	delete(got, HeaderCorrelationID)
	delete(got, HeaderReplyTo)
	delete(got, HeaderDeadline)
	want := map[string]string{
		HeaderService:        "billing",
		HeaderContentType:    "application/json",
		HeaderReplyPartition: "0",
		"http-x-trace-id":    "t1",
		"http-accept":        "text/plain, application/json",
	}
	if allowed {
		want[HeaderQuery] = "a=1&b=2"
		want["http-authorization"] = "Bearer x"
		want["http-cookie"] = "session=s3cret"
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header  string        // Inlet-Timeout; "" for none
		want    time.Duration // the deadline's distance from arrival
		wantErr string        // a 400's message, when it is one
	}{
		{header: "", want: 2 * time.Second}, // Config.Timeout
		{header: "1500ms", want: 1500 * time.Millisecond},
		{header: "1.5s", want: 1500 * time.Millisecond},
		{header: "250", want: 250 * time.Millisecond}, // milliseconds
		{header: "4999ms", want: 4999 * time.Millisecond},
		{header: "6s", want: 5 * time.Second}, // capped to MaxTimeout
		{header: "2562047h", want: 5 * time.Second},
		{header: "9223372036854", want: 5 * time.Second}, // the most milliseconds a Duration holds
		// Past a Duration, milliseconds saturate (and are capped).
		{header: "9223372036855", want: 5 * time.Second},
		{header: "18446744073710", want: 5 * time.Second}, // times 1e6, it wrapped to 448µs
		{header: "99999999999999999999", want: 5 * time.Second},
		{header: "-99999999999999999999", wantErr: "must be positive"},
		{header: "0", wantErr: "must be positive"},
		{header: "0s", wantErr: "must be positive"},
		{header: "-1s", wantErr: "must be positive"},
		{header: "-5", wantErr: "must be positive"},
		{header: "soon", wantErr: "want a duration such as 2s or 500ms, or milliseconds"},
		{header: "1.5", wantErr: "want a duration"},
		{header: "10000000000h", wantErr: "want a duration"}, // past a Duration
	}
	f := newFixture(t, nil)
	for _, tt := range tests {
		t.Run("Inlet-Timeout="+tt.header, func(t *testing.T) {
			var headers []string
			if tt.header != "" {
				headers = []string{"Inlet-Timeout", tt.header}
			}
			before := len(f.producer.records())
			start := time.Now()
			w := f.serve(post("billing", "x", headers...))
			end := time.Now()
			recs := f.producer.records()
			if tt.wantErr != "" {
				if w.Code != http.StatusBadRequest {
					t.Fatalf("answer %d %q, want 400", w.Code, w.Body)
				}
				if msg := errorOf(t, w); !strings.Contains(msg, "Inlet-Timeout") || !strings.Contains(msg, tt.wantErr) {
					t.Errorf("error %q, want ...Inlet-Timeout...%s...", msg, tt.wantErr)
				}
				if len(recs) != before {
					t.Error("a refused call was produced")
				}
				return
			}
			if w.Code != http.StatusOK || len(recs) != before+1 {
				t.Fatalf("answer %d %q, %d records", w.Code, w.Body, len(recs)-before)
			}
			last := recs[len(recs)-1]
			req, err := ParseRequest(last.Key, last.Value, last.Headers, "")
			if err != nil {
				t.Fatal(err)
			}
			// The deadline is in whole milliseconds, counted from arrival.
			if lo, hi := start.Add(tt.want-time.Millisecond), end.Add(tt.want); req.Deadline.Before(lo) || req.Deadline.After(hi) {
				t.Errorf("deadline %v after the call, want %v", req.Deadline.Sub(start), tt.want)
			}
		})
	}
}

func TestHandlerRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		edit     func(*fixture) // before the call
		req      *http.Request
		want     int
		wantMsg  string
		produced bool // the call reached the producer
	}{
		{name: "GET", req: httptest.NewRequest(http.MethodGet, "/v1/rpc/billing", nil),
			want: 405, wantMsg: "method GET is not allowed on /v1/rpc/billing; use POST"},
		{name: "PUT", req: httptest.NewRequest(http.MethodPut, "/v1/rpc/billing", strings.NewReader("x")),
			want: 405, wantMsg: "use POST"},
		{name: "unknown service", req: post("shipping", "x"),
			want: 404, wantMsg: `service "shipping" is not enabled on this gateway`},
		{name: "bad service name", req: post("a$b", "x"),
			want: 400, wantMsg: `service "a$b": letters, digits`},
		{name: "body over the limit", req: post("billing", strings.Repeat("x", 65)),
			want: 413, wantMsg: "body exceeds 64 bytes, the limit"},
		{name: "body at the limit", req: post("billing", strings.Repeat("x", 64)), want: 200, produced: true},
		{name: "chunked body over the limit", req: chunked(post("billing", strings.Repeat("x", 65))),
			want: 413, wantMsg: "body exceeds 64 bytes, the limit"},
		{name: "chunked body at the limit", req: chunked(post("billing", strings.Repeat("x", 64))), want: 200, produced: true},
		{name: "body shorter than its Content-Length", req: func() *http.Request {
			r := post("billing", "xx")
			r.ContentLength = 3
			return r
		}(), want: 400, wantMsg: "reading body: unexpected EOF"},
		{name: "in-flight cap reached", edit: func(f *fixture) {
			if _, err := f.router.Add("other"); err != nil {
				f.tb.Fatal(err)
			}
			f.tb.Cleanup(func() { f.router.Remove("other") })
		}, req: post("billing", "x"), want: 503, wantMsg: "1 requests are waiting for replies, the limit"},
		{name: "replies cannot arrive", edit: func(f *fixture) { f.transport.err = errors.New("reply topic unreadable") },
			req: post("billing", "x"), want: 503, wantMsg: "replies cannot arrive now: reply topic unreadable"},
		{name: "producer refuses", edit: func(f *fixture) { f.producer.refuse = errors.New("buffer full") },
			req: post("billing", "x"), want: 503, wantMsg: "request not sent to kafka: buffer full", produced: true},
		{name: "kafka fails the record", edit: func(f *fixture) { f.producer.fail = errors.New("not leader") },
			req: post("billing", "x"), want: 503, wantMsg: "request not sent to kafka: not leader", produced: true},
		{name: "no reply", edit: func(f *fixture) { f.producer.worker = nil },
			req: post("slow", "x", "Inlet-Timeout", "30ms"), want: 504, wantMsg: `no reply from service "slow" within 30ms: is a worker for it running and reading topic rpc.slow? (inlet worker --service slow`, produced: true},
		{name: "worker failed", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 502, Err: "database unreachable"}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker failed: database unreachable", produced: true},
		{name: "worker answered an invalid status", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 42}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker answered status 42; a reply must carry a final HTTP status, 200 to 599", produced: true},
		// A 101 was passed on as Switching Protocols: a proxy in front
		// would have switched the connection to a raw tunnel.
		{name: "worker answered 101", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 101}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker answered status 101", produced: true},
		{name: "worker answered 100", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 100}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker answered status 100", produced: true},
		{name: "worker answered 199", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 199}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker answered status 199", produced: true},
		{name: "worker answered 600", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 600}, true }
		}, req: post("billing", "x"), want: 502, wantMsg: "the worker answered status 600", produced: true},
		{name: "worker answered 599", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 599}, true }
		}, req: post("billing", "x"), want: 599, produced: true},
		{name: "worker answered 0", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Body: []byte("ok")}, true }
		}, req: post("billing", "x"), want: 200, produced: true},
		{name: "worker answered 418", edit: func(f *fixture) {
			f.producer.worker = func(Request) (Reply, bool) { return Reply{Status: 418}, true }
		}, req: post("billing", "x"), want: 418, produced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(c *Config) { c.MaxInFlight = 1 })
			if tt.edit != nil {
				tt.edit(f)
			}
			w := f.serve(tt.req)
			if w.Code != tt.want {
				t.Fatalf("answer %d %q, want %d", w.Code, w.Body, tt.want)
			}
			if tt.wantMsg != "" {
				if msg := errorOf(t, w); !strings.Contains(msg, tt.wantMsg) {
					t.Errorf("error %q, want ...%s...", msg, tt.wantMsg)
				}
			}
			switch tt.want {
			case 405:
				if a := w.Header().Get("Allow"); a != http.MethodPost {
					t.Errorf("Allow %q", a)
				}
			case 503:
				if ra := w.Header().Get("Retry-After"); ra != "1" {
					t.Errorf("Retry-After %q, want 1", ra)
				}
			}
			if n := len(f.producer.records()); (n == 1) != tt.produced || n > 1 {
				t.Errorf("%d records produced", n)
			}
			// A reply with a status that is not final is counted.
			wantMalformed := 0.0
			if strings.Contains(tt.wantMsg, "the worker answered status") {
				wantMalformed = 1
			}
			if n := testutil.ToFloat64(f.router.metrics.Malformed); n != wantMalformed {
				t.Errorf("inlet_rpc_malformed_replies_total = %v, want %v", n, wantMalformed)
			}
			if n := testutil.ToFloat64(f.router.metrics.Requests.WithLabelValues(strconv.Itoa(tt.want))); n != 1 {
				t.Errorf("inlet_rpc_requests_total{code=%d} = %v, want 1", tt.want, n)
			}
		})
	}
}

// TestHandlerDisabled: with no service enabled, there is no producer nor
// transport, and every call is answered 404.
func TestHandlerDisabled(t *testing.T) {
	t.Parallel()
	r := NewRouter(10, nil)
	h, err := NewHandler(DefaultConfig(), r, nil, nil, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	mux := http.NewServeMux()
	h.Register(mux)
	for _, service := range []string{"billing", "rpc"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, post(service, "x"))
		if w.Code != http.StatusNotFound {
			t.Errorf("%s: answer %d %q, want 404", service, w.Code, w.Body)
		}
		if msg := errorOf(t, w); !strings.Contains(msg, "is not enabled on this gateway") {
			t.Errorf("%s: error %q", service, msg)
		}
	}
	if r.InFlight() != 0 {
		t.Error("a waiter was left behind")
	}
}

// TestHandlerAnyService: "*" enables every well-named service.
func TestHandlerAnyService(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Services = []string{"*"} })
	if w := f.serve(post("shipping.v2", "hi")); w.Code != http.StatusOK || w.Body.String() != "hi" {
		t.Errorf("answer %d %q", w.Code, w.Body)
	}
	if recs := f.producer.records(); len(recs) != 1 || recs[0].Topic != "rpc.shipping.v2" {
		t.Errorf("records %+v", recs)
	}
}

// TestHandlerOverHTTP runs the handler in a real HTTP server: a reply, and
// a caller that goes away while waiting (its waiter is removed).
func TestHandlerOverHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	produced := make(chan struct{}, 1)
	f.producer.worker = func(req Request) (Reply, bool) {
		if string(req.Body) == "hold" {
			produced <- struct{}{}
			return Reply{}, false
		}
		return Reply{Status: 201, ContentType: "text/plain", Body: []byte("made " + string(req.Body))}, true
	}
	srv := httptest.NewServer(f.mux)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	resp, err := client.Post(srv.URL+"/v1/rpc/billing", "text/plain", strings.NewReader("order 7"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || string(body) != "made order 7" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("answer %d %q (%s)", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/rpc/billing", strings.NewReader("hold"))
	errc := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-produced
	if n := f.router.InFlight(); n != 1 {
		t.Errorf("%d waiting while the call waits, want 1", n)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call: %v", err)
	}
	gone := f.router.metrics.Requests.WithLabelValues("499")
	testkit.WaitFor(t, 5*time.Second, "the server to see the caller gone", func() bool { return testutil.ToFloat64(gone) == 1 })
	if n := f.router.InFlight(); n != 0 {
		t.Errorf("%d waiters left after the caller went away", n)
	}
}

// TestHandlerAdmit: Config.Admit runs before anything else of the call:
// a refused call is answered with the refusal's status, headers and
// message (401 for an error that is not a *Refusal), gets no waiter and
// produces no record, and learns nothing of the services (a refusal, not
// 404, for a service that is not enabled); an admitted call's record
// names its client in inlet-client, which a caller's own Inlet-Client
// header cannot forge.
func TestHandlerAdmit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) {
		c.Admit = func(r *http.Request) (string, error) {
			switch r.Header.Get("Authorization") {
			case "Bearer good":
				return "web", nil
			case "Bearer fast":
				return "", &Refusal{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3"}}, Msg: "client web is over its rate"}
			case "":
				return "", &Refusal{Status: http.StatusUnauthorized, Header: http.Header{"Www-Authenticate": {`Bearer realm="inlet"`}}, Msg: "credentials refused: none sent"}
			}
			return "", errors.New("bad secret")
		}
	})
	for _, tt := range []struct {
		name, service, auth string
		code                int
		header, msg         string
	}{
		{"no credentials", "billing", "", http.StatusUnauthorized, "Www-Authenticate", "credentials refused: none sent"},
		{"no credentials, service not enabled", "nope", "", http.StatusUnauthorized, "Www-Authenticate", "credentials refused: none sent"},
		{"over the rate", "billing", "Bearer fast", http.StatusTooManyRequests, "Retry-After", "client web is over its rate"},
		{"another error", "billing", "Bearer bad", http.StatusUnauthorized, "", "credentials refused: bad secret"},
	} {
		w := f.serve(post(tt.service, "hi", "Authorization", tt.auth))
		if w.Code != tt.code {
			t.Errorf("%s: answer %d %q, want %d", tt.name, w.Code, w.Body, tt.code)
			continue
		}
		if msg := errorOf(t, w); msg != tt.msg {
			t.Errorf("%s: message %q, want %q", tt.name, msg, tt.msg)
		}
		if tt.header != "" && w.Header().Get(tt.header) == "" {
			t.Errorf("%s: no %s header on the answer", tt.name, tt.header)
		}
	}
	if recs := f.producer.records(); len(recs) != 0 {
		t.Fatalf("refused calls produced %d records", len(recs))
	}

	w := f.serve(post("billing", "hi", "Authorization", "Bearer good", "Inlet-Client", "admin"))
	if w.Code != http.StatusOK || w.Body.String() != "hi" {
		t.Fatalf("admitted call: answer %d %q", w.Code, w.Body)
	}
	recs := f.producer.records()
	if len(recs) != 1 {
		t.Fatalf("admitted call produced %d records", len(recs))
	}
	req, err := ParseRequest(recs[0].Key, recs[0].Value, recs[0].Headers, "")
	if err != nil {
		t.Fatal(err)
	}
	if req.Client != "web" || req.Headers.Get("Inlet-Client") != "admin" {
		t.Errorf("record: client %q, forwarded Inlet-Client %q; want web and the caller's admin apart", req.Client, req.Headers.Get("Inlet-Client"))
	}
}

// TestHandlerQuotesLittle: what a caller sent is quoted in an error cut to
// its first 128 bytes: a 10,000-character service name was echoed whole.
func TestHandlerQuotesLittle(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", 10_000)
	for _, tt := range []struct {
		name  string
		req   *http.Request
		code  int
		quote string // what the message quotes, cut
	}{
		{"service name", post(long, "x"), 400, `service "` + long[:128] + `..."`},
		{"service name with a multi-byte rune at the cut", post(strings.Repeat("s", 127)+strings.Repeat("é", 100), "x"), 400, `service "` + strings.Repeat("s", 127) + `..."`},
		{"Inlet-Timeout", post("billing", "x", "Inlet-Timeout", long), 400, `Inlet-Timeout "` + long[:128] + `..."`},
		{"method", httptest.NewRequest(strings.Repeat("M", 10_000), "/v1/rpc/billing", nil), 405, "method " + strings.Repeat("M", 128) + "... is not allowed"},
	} {
		f := newFixture(t, nil)
		w := f.serve(tt.req)
		msg := errorOf(t, w)
		if w.Code != tt.code || !strings.Contains(msg, tt.quote) || len(msg) > 128+150 {
			t.Errorf("%s: %d, %d bytes: %.300q; want %d quoting %.200q, at most %d bytes", tt.name, w.Code, len(msg), msg, tt.code, tt.quote, 128+150)
		}
	}
}
