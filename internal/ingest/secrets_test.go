package ingest

import (
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
)

// TestAuthBeforeContentChecks: with credentials on, a request without
// valid ones is answered 401 whatever its content type, encoding or
// announced length: it learns nothing of what the server would take.
func TestAuthBeforeContentChecks(t *testing.T) {
	t.Parallel()
	fa := newFakeAuth()
	h := newHarness(t, func(c *Config) { c.MaxBodyBytes = 1000 }, WithAuth(fa))
	body := []byte(`[{"event":"a"}]`)
	for _, tc := range []struct {
		name, path string
		body       []byte
		headers    []string
	}{
		{"content type", "/v1/batch", body, []string{"Content-Type", "image/png"}},
		{"unparsable content type", "/v1/batch", body, []string{"Content-Type", "a/b; ==="}},
		{"ndjson on track", "/v1/track", []byte(`{"event":"a"}`), []string{"Content-Type", "application/x-ndjson"}},
		{"encoding", "/v1/batch", body, []string{"Content-Type", "application/json", "Content-Encoding", "br"}},
		{"length", "/v1/batch", make([]byte, 5000), []string{"Content-Type", "application/json"}},
	} {
		for _, cred := range []string{"", basic("web", "wrong-secret")} {
			headers := tc.headers
			if cred != "" {
				headers = append(append([]string{}, headers...), "Authorization", cred)
			}
			r := h.do(t, "POST", tc.path, tc.body, headers...)
			if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s, credentials %q: answer %s, want 401 with WWW-Authenticate", tc.name, cred, r)
			}
		}
		// With good credentials the content check answers (the test can fail).
		r := h.do(t, "POST", tc.path, tc.body, append(append([]string{}, tc.headers...), "Authorization", basic("web", "web-secret-0123456789"))...)
		if r.status/100 != 4 || r.status == http.StatusUnauthorized {
			t.Errorf("%s, good credentials: answer %s, want a 4xx of the content", tc.name, r)
		}
	}
}

// realAuth is an auth.Authenticator over a clients file of one client,
// "web", whose secret it returns, throttling an address after burst bad
// credentials for a minute each.
func realAuth(t *testing.T, burst int) (*auth.Authenticator, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clients.json")
	secret, err := auth.AddClient(path, auth.Client{ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.Open(auth.Config{ClientsFile: path, HTTP: true, FailBurst: burst, FailEvery: time.Minute}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, secret
}

// TestAuthThrottled: after --auth-fail-burst bad credentials from one
// client address (behind a trusted proxy: the X-Forwarded-For address
// ingest records), its requests are answered 429 with Retry-After, good
// credentials too and the pixel with its image, while another address is
// served.
func TestAuthThrottled(t *testing.T) {
	t.Parallel()
	a, secret := realAuth(t, 3)
	h := newHarness(t, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }, WithAuth(a))
	post := func(from, cred string) response {
		return h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`), "Content-Type", "application/json", "X-Forwarded-For", from, "Authorization", cred)
	}
	for i := range 3 {
		if r := post("198.51.100.7", basic("web", "guess-"+strconv.Itoa(i))); r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %s, want 401", i+1, r)
		}
	}
	for _, cred := range []string{basic("web", "guess-again"), basic("web", secret)} {
		r := post("198.51.100.7", cred)
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != http.StatusTooManyRequests || ra < 1 || ra > 60 {
			t.Errorf("after 3 failures: %s, Retry-After %q; want 429 with 1-60", r, r.header.Get("Retry-After"))
		}
		if msg := decodeError(t, r).Error; !strings.Contains(msg, "too many failed attempts") {
			t.Errorf("message %q", msg)
		}
	}
	pix := h.do(t, "GET", "/i?e=view&k="+secret, nil, "X-Forwarded-For", "198.51.100.7")
	if pix.status != http.StatusTooManyRequests || pix.header.Get("Retry-After") == "" || !strings.HasPrefix(string(pix.body), "GIF89a") {
		t.Errorf("pixel from the throttled address: %d %v, want 429 with Retry-After and the GIF", pix.status, pix.header)
	}
	if r := post("198.51.100.8", basic("web", secret)); r.status != http.StatusOK {
		t.Errorf("another address: %s, want 200", r)
	}
	if n := len(h.sink.calls()); n != 1 {
		t.Errorf("the sink got %d writes, want the other address's 1", n)
	}
}

// TestPixelSecretNotStored: a pixel's k= never reaches a record, a dead
// letter above all (a query that makes no event is dead-lettered as sent,
// minus its credentials), with credentials on or off.
func TestPixelSecretNotStored(t *testing.T) {
	t.Parallel()
	a, secret := realAuth(t, 100)
	for _, opts := range [][]Option{nil, {WithAuth(a)}} {
		h := newHarness(t, nil, opts...)
		k := url.QueryEscape(secret)
		for _, q := range []string{
			"uid=u1&k=" + k,          // no e=: dead-lettered as sent
			"k=" + k + "&e=a&e=b",    // e= twice
			"e=view&data=%%%&k=" + k, // a query that cannot be read
			"data=!!!&k=" + k,        // data= not base64
			"e=view&%6B=" + k,        // k's name escaped
			"e=view&k=" + k,          // a good event
		} {
			r := h.do(t, "GET", "/i?"+q, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s: answer %d, want 200", q, r.status)
			}
		}
		recs := h.sink.records()
		if len(recs) != 6 {
			t.Fatalf("%d records, want 6", len(recs))
		}
		dead := 0
		for _, rec := range recs {
			if rec.Topic != h.s.cfg.Topic {
				dead++
			}
			if strings.Contains(string(rec.Value), secret) || strings.Contains(string(rec.Value), k) {
				t.Errorf("record on %s holds the secret: %s", rec.Topic, rec.Value)
			}
			for _, hd := range rec.Headers {
				if strings.Contains(string(hd.Value), secret) {
					t.Errorf("header %s holds the secret: %s", hd.Key, hd.Value)
				}
			}
		}
		if dead < 4 {
			t.Errorf("%d dead letters, want 4 or more (the test can fail)", dead)
		}
		if strings.Contains(h.logs.String(), secret) {
			t.Errorf("the log holds the secret:\n%s", h.logs)
		}
	}
}

// TestLongInputNotEchoed: an answer quotes at most event.MaxQuoteBytes bytes of a
// header or query pair it refuses, also in a dead letter's error.
func TestLongInputNotEchoed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	long := strings.Repeat("x", 8000)
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"content type", []string{"Content-Type", "text/" + long}},
		{"unparsable content type", []string{"Content-Type", "a/b; ===" + long}},
		{"content encoding", []string{"Content-Type", "application/json", "Content-Encoding", long}},
		{"origin", []string{"Content-Type", "application/json", "Origin", "https://" + long}},
	} {
		r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`), tc.headers...)
		if strings.Contains(string(r.body), strings.Repeat("x", event.MaxQuoteBytes+1)) || len(r.body) > 600 {
			t.Errorf("%s: answer %d bytes: %.300s", tc.name, len(r.body), r.body)
		}
	}
	r := h.do(t, "GET", "/i?e=a&p."+long+"=%zz", nil)
	if r.status != http.StatusOK {
		t.Fatalf("pixel: %d", r.status)
	}
	recs := h.sink.records()
	if len(recs) == 0 || recs[len(recs)-1].Topic != h.s.cfg.DeadLetterTopicName() {
		t.Fatalf("%d records, want the pixel's dead letter last", len(recs))
	}
	if e, _ := header(recs[len(recs)-1], "inlet-error"); e == "" || len(e) > 400 {
		t.Errorf("dead letter's error is %d bytes: %.300s", len(e), e)
	}
}
