package ingest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
)

// fakeAuth is an Authenticator with the contract of auth.Authenticator on a
// fixed set of clients: a secret is presented as is, a session token as
// "tok.<client>.<state>" (state ok, expired or forged). It records its calls
// and is safe for concurrent use.
type fakeAuth struct {
	clients map[string]*fakeClient // by id

	mu sync.Mutex
	// budget is the events each client may still send (absent: no limit);
	// over it Allow answers wait.
	budget  map[string]int
	wait    time.Duration
	allowed []int // n of each Allow call

	fromHTTP atomic.Int64
	sources  []string // the source of each FromHTTP call, under mu
}

type fakeClient struct {
	client auth.Client
	secret string
}

func newFakeAuth() *fakeAuth {
	a := &fakeAuth{clients: map[string]*fakeClient{}, budget: map[string]int{}, wait: 1200 * time.Millisecond}
	for _, c := range []fakeClient{
		{auth.Client{ID: "web"}, "web-secret-0123456789"},
		{auth.Client{ID: "shop", Groups: []string{"shop", "payments"}, DefaultGroup: "shop"}, "shop-secret-0123456789"},
		{auth.Client{ID: "ads", Groups: []string{"ads"}}, "ads-secret-0123456789"},
	} {
		a.clients[c.client.ID] = &c
	}
	return a
}

func (a *fakeAuth) FromHTTP(r *http.Request, source string) (auth.Principal, error) {
	a.fromHTTP.Add(1)
	a.mu.Lock()
	a.sources = append(a.sources, source)
	a.mu.Unlock()
	h := r.Header.Get("Authorization")
	switch {
	case strings.HasPrefix(h, "Bearer "):
		return a.authenticate("", strings.TrimPrefix(h, "Bearer "))
	case strings.HasPrefix(h, "Basic "):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
		id, secret, ok := strings.Cut(string(b), ":")
		if err != nil || !ok {
			return auth.Principal{}, fmt.Errorf("%w: malformed Basic credentials (want base64 of <client id>:<secret>)", auth.ErrMissing)
		}
		if secret == "" { // the write-key convention: the secret as the user
			id, secret = "", id
		}
		return a.authenticate(id, secret)
	case h != "":
		return auth.Principal{}, fmt.Errorf("%w: Authorization scheme is neither Bearer nor Basic", auth.ErrMissing)
	}
	if k := r.URL.Query().Get("k"); k != "" {
		return a.authenticate("", k)
	}
	return auth.Principal{}, fmt.Errorf("%w: no Authorization header and no k=", auth.ErrMissing)
}

func (a *fakeAuth) authenticate(id, token string) (auth.Principal, error) {
	if rest, ok := strings.CutPrefix(token, "tok."); ok {
		owner, state, _ := strings.Cut(rest, ".")
		c := a.clients[owner]
		switch {
		case c == nil || state == "forged":
			return auth.Principal{}, fmt.Errorf("%w: bad signature", auth.ErrTampered)
		case id != "" && id != owner:
			return auth.Principal{}, fmt.Errorf("%w: presented by %q", auth.ErrWrongClient, id)
		case state == "expired":
			return auth.Principal{}, fmt.Errorf("%w: renew it with the secret", auth.ErrExpired)
		}
		return auth.Principal{Client: &c.client, Session: token}, nil
	}
	for _, c := range a.clients {
		if (id == "" || id == c.client.ID) && token == c.secret {
			return auth.Principal{Client: &c.client, Session: "tok." + c.client.ID + ".ok"}, nil
		}
	}
	return auth.Principal{}, auth.ErrBadCredentials
}

func (a *fakeAuth) Allow(p auth.Principal, n int) (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allowed = append(a.allowed, n)
	left, limited := a.budget[p.Client.ID]
	if !limited {
		return 0, nil
	}
	if n > left {
		return a.wait, fmt.Errorf("%w: %d events/s", auth.ErrRateLimited, 5)
	}
	a.budget[p.Client.ID] = left - n
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
	return fmt.Errorf("%w: group %q", auth.ErrForbidden, group)
}

func (a *fakeAuth) setBudget(client string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.budget[client] = n
}

func (a *fakeAuth) allowCalls() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.allowed...)
}

var _ Authenticator = (*fakeAuth)(nil)

func basic(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
}

// TestAuthRefused: every bad credential is answered 401 with
// WWW-Authenticate and a JSON error that says why (and never the secret),
// on every ingest route, the pixel with its image; the sink gets nothing.
func TestAuthRefused(t *testing.T) {
	t.Parallel()
	fa := newFakeAuth()
	h := newHarness(t, nil, WithAuth(fa))
	const batch = `[{"event":"a"},{"event":"b"}]`
	cases := []struct {
		name   string
		header string // Authorization; "" for none
		k      string // the pixel's k=
		secret string // must not appear in the answer
		want   string
		reason string
	}{
		{"unknown client", basic("nobody", "web-secret-0123456789"), "", "web-secret-0123456789", "unknown client or wrong secret", "bad_credentials"},
		{"unknown secret", "Bearer not-a-secret-of-anyone", "not-a-secret-of-anyone", "not-a-secret-of-anyone", "unknown client or wrong secret", "bad_credentials"},
		{"wrong secret", basic("web", "guessed-secret"), "", "guessed-secret", "unknown client or wrong secret", "bad_credentials"},
		{"expired token", "Bearer tok.web.expired", "tok.web.expired", "tok.web.expired", "session token expired", "expired"},
		{"tampered token", "Bearer tok.web.forged", "tok.web.forged", "tok.web.forged", "session token invalid", "tampered"},
		{"token of another client", basic("web", "tok.shop.ok"), "", "tok.shop.ok", `session token of another client: presented by "web"`, "wrong_client"},
		{"missing header", "", "", "", "no Authorization header and no k=", "missing"},
		{"malformed Basic", "Basic !!!not-base64", "", "!!!not-base64", "malformed Basic credentials", "missing"},
		{"Basic without colon", "Basic " + base64.StdEncoding.EncodeToString([]byte("web")), "", "", "malformed Basic credentials", "missing"},
		{"unknown scheme", "Digest web", "", "", "neither Bearer nor Basic", "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(h.s.metrics.AuthRejected.WithLabelValues(tc.reason))
			var headers []string
			if tc.header != "" {
				headers = []string{"Authorization", tc.header}
			}
			for _, route := range []struct{ path, body string }{{"/v1/batch", batch}, {"/v1/track", `{"event":"a"}`}} {
				r := h.do(t, "POST", route.path, []byte(route.body), append(headers, "Content-Type", "application/json")...)
				if r.status != http.StatusUnauthorized {
					t.Fatalf("%s: answer %s, want 401", route.path, r)
				}
				if ch := r.header.Values("WWW-Authenticate"); len(ch) != 1 || !strings.HasPrefix(ch[0], `Bearer realm="inlet"`) {
					t.Errorf("%s: WWW-Authenticate %q, want the Bearer challenge", route.path, ch)
				}
				msg := decodeError(t, r).Error
				if !strings.Contains(msg, tc.want) || !strings.HasPrefix(msg, "credentials refused: ") {
					t.Errorf("%s: error %q, want it to say %q", route.path, msg, tc.want)
				}
				if tc.secret != "" && strings.Contains(string(r.body), tc.secret) {
					t.Errorf("%s: the answer echoes the credential %q: %s", route.path, tc.secret, r)
				}
			}
			q := "/i?e=pixel_view"
			if tc.k != "" {
				q += "&k=" + url.QueryEscape(tc.k)
			}
			r := h.do(t, "GET", q, nil, headers...)
			if r.status != http.StatusUnauthorized || r.header.Get("Content-Type") != "image/gif" || !strings.HasPrefix(string(r.body), "GIF89a") {
				t.Errorf("pixel: answer %d %q %q, want 401 and the GIF", r.status, r.header.Get("Content-Type"), r.body)
			}
			if got := testutil.ToFloat64(h.s.metrics.AuthRejected.WithLabelValues(tc.reason)) - before; got != 3 {
				t.Errorf("inlet_auth_rejected_total{reason=%q} rose by %v, want 3", tc.reason, got)
			}
		})
	}
	if calls := h.sink.calls(); len(calls) != 0 {
		t.Fatalf("the sink got %d writes for refused requests, want none: %v", len(calls), calls)
	}
	if n := fa.allowCalls(); len(n) != 0 {
		t.Errorf("Allow was called %v for refused requests", n)
	}
}

// TestAuthBeforeBody: credentials are checked before the body is read. The
// client asks for 100-continue and sends its body only when the server
// reads it: a refused request is answered at once and its body never
// sent, where a server that read first would answer only after the
// client gave up waiting (ExpectContinueTimeout) and sent it.
func TestAuthBeforeBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithAuth(newFakeAuth()))
	tr := h.srv.Client().Transport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = 30 * time.Second
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	do := func(authorization string) (int, int64, time.Duration) {
		body := &watchedBody{data: `[{"event":"late"}]`}
		req, err := http.NewRequest("POST", h.srv.URL+"/v1/batch", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		req.Header.Set("Authorization", authorization)
		start := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, body.read.Load(), time.Since(start)
	}
	status, read, took := do(basic("web", "wrong"))
	if status != http.StatusUnauthorized || took > 10*time.Second {
		t.Fatalf("answer %d after %v, want 401 at once", status, took)
	}
	if read > 0 {
		t.Errorf("%d bytes of the body were sent before the credentials were refused", read)
	}
	// The same with good credentials reads the body (the test can fail).
	if status, read, _ := do(basic("web", "web-secret-0123456789")); status != 200 || read == 0 {
		t.Fatalf("good credentials: answer %d with %d body bytes read, want 200 and the body", status, read)
	}
}

// watchedBody is a request body that counts the bytes taken from it.
type watchedBody struct {
	data string
	read atomic.Int64
}

func (b *watchedBody) Read(p []byte) (int, error) {
	off := b.read.Load()
	if off >= int64(len(b.data)) {
		return 0, io.EOF
	}
	n := copy(p, b.data[off:])
	b.read.Add(int64(n))
	return n, nil
}

// TestAuthAccepted: Basic, Bearer (a secret or a session token) and the
// pixel's k= are all accepted; each event carries its client id, and k=
// does not leak into the event.
func TestAuthAccepted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithAuth(newFakeAuth()))
	for _, tc := range []struct {
		name, header, client string
	}{
		{"Basic", basic("web", "web-secret-0123456789"), "web"},
		{"Bearer secret", "Bearer shop-secret-0123456789", "shop"},
		{"Bearer session token", "Bearer tok.web.ok", "web"},
		{"Basic with session token", basic("shop", "tok.shop.ok"), "shop"},
	} {
		r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"ok_`+tc.client+`"}]`), "Content-Type", "application/json", "Authorization", tc.header)
		if r.status != http.StatusOK {
			t.Fatalf("%s: answer %s, want 200", tc.name, r)
		}
		recs := h.sink.calls()
		f := fields(t, recs[len(recs)-1][0])
		if f["client"] != tc.client {
			t.Errorf("%s: record %v, want client %q", tc.name, f, tc.client)
		}
	}
	r := h.do(t, "GET", "/i?e=pixel_view&k=web-secret-0123456789&uid=u1", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "image/gif" {
		t.Fatalf("pixel with k=: %s", r)
	}
	recs := h.sink.calls()
	rec := recs[len(recs)-1][0]
	f := fields(t, rec)
	if f["client"] != "web" || f["event"] != "pixel_view" || f["group"] != "default" {
		t.Errorf("pixel record %s, want client web, group default", rec.Value)
	}
	if strings.Contains(string(rec.Value), "web-secret") {
		t.Errorf("the pixel's k= leaked into the event: %s", rec.Value)
	}
}

// TestRateLimit: a request over its client's rate is answered 429 with
// Retry-After (seconds, rounded up) and stores nothing, on the routes and
// the pixel; once the client has room again it is served.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	fa := newFakeAuth()
	h := newHarness(t, nil, WithAuth(fa))
	fa.setBudget("web", 2)
	auth := []string{"Content-Type", "application/json", "Authorization", basic("web", "web-secret-0123456789")}
	r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"},{"event":"b"},{"event":"c"}]`), auth...)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" {
		t.Fatalf("answer %s, Retry-After %q: want 429 with Retry-After 2 (1.2 s rounded up)", r, r.header.Get("Retry-After"))
	}
	if msg := decodeError(t, r).Error; !strings.Contains(msg, `client "web" is over its rate`) || !strings.Contains(msg, "3 events") {
		t.Errorf("error %q", msg)
	}
	if calls := h.sink.calls(); len(calls) != 0 {
		t.Fatalf("the sink got %v for a request over the rate", calls)
	}
	if got := fa.allowCalls(); len(got) != 1 || got[0] != 3 {
		t.Errorf("Allow calls %v, want one for the 3 events of the body", got)
	}
	fa.setBudget("web", 0)
	pr := h.do(t, "GET", "/i?e=p&k=web-secret-0123456789", nil)
	if pr.status != http.StatusTooManyRequests || pr.header.Get("Retry-After") != "2" || pr.header.Get("Content-Type") != "image/gif" {
		t.Fatalf("pixel over the rate: %d %v, want 429, Retry-After 2 and the GIF", pr.status, pr.header)
	}
	if got := testutil.ToFloat64(h.s.metrics.AuthRejected.WithLabelValues("rate_limited")); got != 2 {
		t.Errorf("inlet_auth_rejected_total{reason=rate_limited} %v, want 2", got)
	}
	// Room again: the same request is served. Another client was never limited.
	fa.setBudget("web", 3)
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"},{"event":"b"},{"event":"c"}]`), auth...); r.status != 200 {
		t.Fatalf("after the rate recovered: %s, want 200", r)
	}
	if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"x","context":{"group":"shop"}}`), "Content-Type", "application/json", "Authorization", "Bearer shop-secret-0123456789"); r.status != 200 {
		t.Fatalf("another client: %s, want 200", r)
	}
	if n := len(h.sink.onTopic("events")); n != 4 {
		t.Fatalf("%d events stored, want 4", n)
	}
}

// TestGroups: an event's group is its context.group, else its client's
// default group, else the default; a group its client may not send is
// rejected per event and dead-lettered; a context.group that is not a
// string is an invalid event.
func TestGroups(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithAuth(newFakeAuth()))
	items := []string{
		`{"event":"own","context":{"group":"payments","lib":"js"}}`,
		`{"event":"client_default"}`,
		`{"event":"forbidden","context":{"group":"web"}}`,
		`{"event":"number","context":{"group":7}}`,
		`{"event":"empty_is_none","context":{"group":""}}`,
		`{"event":"null_is_none","context":{"group":null}}`,
	}
	r := h.do(t, "POST", "/v1/batch", []byte("["+strings.Join(items, ",")+"]"), "Content-Type", "application/json", "Authorization", basic("shop", "shop-secret-0123456789"))
	if r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	a := decodeAnswer(t, r)
	if a.Accepted != 4 || len(a.Rejected) != 2 {
		t.Fatalf("answer %s: want 4 accepted, 2 rejected", r)
	}
	want := map[int]string{2: `client "shop" may not send events of group "web"`, 3: `"context.group" must be a string naming the event's group, got number`}
	for _, rej := range a.Rejected {
		if !strings.Contains(rej.Error, want[rej.Index]) || want[rej.Index] == "" {
			t.Errorf("rejection %d: %q, want %q", rej.Index, rej.Error, want[rej.Index])
		}
	}
	groups := map[string]string{}
	for _, rec := range h.sink.onTopic("events") {
		f := fields(t, rec)
		groups[f["event"].(string)], _ = f["group"].(string)
	}
	wantGroups := map[string]string{"own": "payments", "client_default": "shop", "empty_is_none": "shop", "null_is_none": "shop"}
	if fmt.Sprint(groups) != fmt.Sprint(wantGroups) {
		t.Errorf("groups %v, want %v", groups, wantGroups)
	}
	dead := h.sink.onTopic("events.invalid")
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	// A client of one group and no default group: its events that name
	// none are of its group, not the gateway's default (which it may not use).
	r = h.do(t, "POST", "/v1/track", []byte(`{"event":"only_group"}`), "Content-Type", "application/json", "Authorization", basic("ads", "ads-secret-0123456789"))
	if r.status != 200 || len(decodeAnswer(t, r).Rejected) != 0 {
		t.Fatalf("single-group client: answer %s", r)
	}
	reasons := map[string]bool{}
	for _, d := range dead {
		v, _ := header(d, event.HeaderReason)
		reasons[v] = true
	}
	if !reasons[string(event.ReasonForbiddenGroup)] || !reasons[string(event.ReasonBadField)] {
		t.Errorf("dead-letter reasons %v, want forbidden_group and bad_field", reasons)
	}

	// A client without a default group gets the default one.
	r = h.do(t, "POST", "/v1/track", []byte(`{"event":"plain"}`), "Content-Type", "application/json", "Authorization", "Bearer web-secret-0123456789")
	if r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	recs := h.sink.calls()
	if f := fields(t, recs[len(recs)-1][0]); f["group"] != "default" || f["client"] != "web" {
		t.Errorf("record %v, want group default, client web", f)
	}
}

// TestNoAuthNoNewFields: without credentials and catalog the record is as
// before: no client, group or code, no new headers.
func TestNoAuthNoNewFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, "POST", "/v1/track", []byte(`{"event":"a","context":{"group":"g"}}`), "Content-Type", "application/json", "Authorization", "Bearer whatever")
	if r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	rec := h.sink.records()[0]
	var f map[string]json.RawMessage
	if err := json.Unmarshal(rec.Value, &f); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"client", "group", "code"} {
		if _, ok := f[k]; ok {
			t.Errorf("record %s has %q without --auth or --catalog", rec.Value, k)
		}
	}
	if len(rec.Headers) != 3 {
		t.Errorf("headers %v, want the three of before", rec.Headers)
	}
}

// TestAuthPreflight: with credentials on, a CORS preflight allows the
// Authorization header (and needs none itself).
func TestAuthPreflight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithAuth(newFakeAuth()))
	r := h.do(t, "OPTIONS", "/v1/batch", nil, "Origin", "https://shop.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization, content-type")
	if r.status != http.StatusNoContent || !strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight %s, Allow-Headers %q: want 204 allowing Authorization", r, r.header.Get("Access-Control-Allow-Headers"))
	}
}

// TestExpectContinue: a request that asks for 100 Continue and is refused
// by its header alone (length, credentials, type) gets its answer, and no
// 100, before it sends a byte of its body, as the route answers it (CORS
// and metrics included): net/http sends 100 Continue only on the body's
// first Read, and checkHeader runs before it. One that passes gets the 100.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AllowedOrigins = []string{"https://shop.example"} }, WithAuth(newFakeAuth()))
	good := basic("web", "web-secret-0123456789")
	for _, tc := range []struct {
		name, path, ct, authorization string
		length                        int64
		status                        int // of the first answer; 100: let through
	}{
		{"good", "/v1/batch", "application/json", good, 50, http.StatusContinue},
		{"good track", "/v1/track", "text/plain", good, 50, http.StatusContinue},
		{"100 MB", "/v1/batch", "application/json", good, 100 << 20, http.StatusRequestEntityTooLarge},
		// A Segment write key may be in the body (analytics-python sends
		// it there): without credentials in the header, the body is read.
		{"no credentials", "/v1/batch", "application/json", "", 50, http.StatusContinue},
		{"no credentials, 100 MB", "/v1/track", "application/json", "", 100 << 20, http.StatusUnauthorized},
		{"wrong credentials", "/v1/track", "application/json", basic("web", "wrong"), 50, http.StatusUnauthorized},
		{"bad type", "/v1/batch", "image/png", good, 50, http.StatusUnsupportedMediaType},
		{"bad type, no credentials", "/v1/batch", "image/png", "", 50, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handler := "batch"
			if tc.path == "/v1/track" {
				handler = "track"
			}
			counter := h.s.metrics.Requests.WithLabelValues(handler, strconv.Itoa(tc.status))
			before := testutil.ToFloat64(counter)
			c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			auth := ""
			if tc.authorization != "" {
				auth = "Authorization: " + tc.authorization + "\r\n"
			}
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nOrigin: https://shop.example\r\nContent-Type: %s\r\n%sContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
				tc.path, tc.ct, auth, tc.length)
			r := readResponse(t, c)
			if r.status != tc.status {
				t.Fatalf("first answer %s; want %d", r, tc.status)
			}
			if tc.status == http.StatusContinue {
				return
			}
			if !strings.Contains(string(r.body), `"error"`) || r.header.Get("Access-Control-Allow-Origin") != "https://shop.example" {
				t.Errorf("refusal %s: want a JSON error with the CORS header", r)
			}
			if got := testutil.ToFloat64(counter) - before; got != 1 {
				t.Errorf("inlet_http_requests_total{handler=%q,code=\"%d\"} rose by %v, want 1", handler, tc.status, got)
			}
		})
	}
}
