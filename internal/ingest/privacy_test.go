package ingest

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/privacy"
)

func trustLocal(tb testing.TB) func(*Config) {
	proxies, err := cliflag.ParsePrefixes("127.0.0.0/8")
	if err != nil {
		tb.Fatal(err)
	}
	return func(c *Config) { c.TrustedProxies = proxies }
}

// TestIPPolicy: each --ip-policy on the peer's address, and on IPv4 and
// IPv6 addresses that came through X-Forwarded-For from a trusted proxy,
// on the batch route and the pixel. Drop leaves no ip field at all.
func TestIPPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy privacy.Policy
		xff    string // "": the peer, 127.0.0.1
		want   string // "": no ip field
	}{
		{privacy.Keep, "", "127.0.0.1"},
		{privacy.Keep, "203.0.113.77", "203.0.113.77"},
		{privacy.Keep, "2001:db8:abcd:12::77", "2001:db8:abcd:12::77"},
		{privacy.Truncate, "", "127.0.0.0"},
		{privacy.Truncate, "203.0.113.77", "203.0.113.0"},
		{privacy.Truncate, "2001:db8:abcd:12::77", "2001:db8:abcd::"},
		{privacy.Drop, "", ""},
		{privacy.Drop, "203.0.113.77", ""},
		{privacy.Drop, "2001:db8:abcd:12::77", ""},
	} {
		t.Run(tc.policy.String()+" "+tc.xff, func(t *testing.T) {
			t.Parallel()
			trust := trustLocal(t)
			h := newHarness(t, func(c *Config) { trust(c); c.Privacy.IPPolicy = tc.policy })
			var hs []string
			if tc.xff != "" {
				hs = []string{"X-Forwarded-For", tc.xff + ", 127.0.0.9"}
			}
			if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"e"}]`), append(hs, "Content-Type", "application/json")...); r.status != 200 {
				t.Fatalf("answer %s", r)
			}
			if r := h.do(t, "GET", "/i?e=view", nil, hs...); r.status != 200 {
				t.Fatalf("pixel answer %s", r)
			}
			for _, rec := range h.sink.records() {
				ip, has := fields(t, rec)["ip"]
				if tc.want == "" && has || tc.want != "" && ip != tc.want {
					t.Errorf("record %s: ip %v, want %q", rec.Value, ip, tc.want)
				}
			}
		})
	}
}

func policyOf(p privacy.Policy) *privacy.Policy { return &p }

// TestIPPolicyClientAndHeader: a client's ip_policy replaces --ip-policy
// (looser or stricter); a request's X-IP-Policy or SP-Anonymous header
// only ever makes it stricter: keep under a client's drop is ignored.
func TestIPPolicyClientAndHeader(t *testing.T) {
	t.Parallel()
	a := newFakeAuth()
	for _, c := range []fakeClient{
		{auth.Client{ID: "private", IPPolicy: policyOf(privacy.Drop)}, "private-secret-0123456789"},
		{auth.Client{ID: "halfway", IPPolicy: policyOf(privacy.Truncate)}, "halfway-secret-0123456789"},
		{auth.Client{ID: "internal", IPPolicy: policyOf(privacy.Keep)}, "internal-secret-0123456789"},
	} {
		a.clients[c.client.ID] = &c
	}
	trust := trustLocal(t)
	h := newHarness(t, func(c *Config) { trust(c); c.Privacy.IPPolicy = privacy.Truncate }, WithAuth(a))
	for _, tc := range []struct {
		client string
		header []string
		want   string
	}{
		{"web", nil, "198.51.100.0"}, // --ip-policy
		{"internal", nil, "198.51.100.23"},
		{"halfway", nil, "198.51.100.0"},
		{"private", nil, ""},
		{"private", []string{"X-IP-Policy", "keep"}, ""},
		{"halfway", []string{"X-IP-Policy", "keep"}, "198.51.100.0"},
		{"internal", []string{"X-IP-Policy", "truncate"}, "198.51.100.0"},
		{"internal", []string{"X-IP-Policy", "drop"}, ""},
		{"internal", []string{"SP-Anonymous", "*"}, ""},
		{"web", []string{"X-IP-Policy", "dorp"}, ""}, // misspelt: the strictest
	} {
		hs := append([]string{"Content-Type", "application/json", "Authorization", basic(tc.client, tc.client+"-secret-0123456789"),
			"X-Forwarded-For", "198.51.100.23"}, tc.header...)
		if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"e"}`), hs...); r.status != 200 {
			t.Fatalf("%s %v: answer %s", tc.client, tc.header, r)
		}
		recs := h.sink.records()
		ip, has := fields(t, recs[len(recs)-1])["ip"]
		if tc.want == "" && has || tc.want != "" && ip != tc.want {
			t.Errorf("client %s, header %v: ip %v, want %q", tc.client, tc.header, ip, tc.want)
		}
	}
}

var redactKey = []byte("0123456789abcdef0123456789abcdef")

// redactingAuth is newFakeAuth with client "pii", whose rules hash
// props.user.email, context.traits.email and traits.phone and drop
// props.card, checked and compiled as the clients file's are.
func redactingAuth(tb testing.TB) *fakeAuth {
	tb.Helper()
	a := newFakeAuth()
	cs := []auth.Client{{ID: "pii", SecretSHA256: auth.HashSecret("pii-secret-0123456789"), Redact: []privacy.Rule{
		{Path: "props.user.email", Action: "hash"},
		{Path: "/context/traits/email", Action: "hash"},
		{Path: "traits.phone", Action: "hash"},
		{Path: "props.card", Action: "drop"},
	}}}
	if err := auth.ValidateClients(cs); err != nil {
		tb.Fatal(err)
	}
	a.clients["pii"] = &fakeClient{cs[0], "pii-secret-0123456789"}
	return a
}

// TestRedactClient: a client's rules rewrite its records and its dead
// letters (hashes under the key, dropped fields gone); a dead letter
// that is not JSON is withheld; another client's events are untouched.
func TestRedactClient(t *testing.T) {
	t.Parallel()
	key := writeTemp(t, hex.EncodeToString(redactKey)+"\n")
	h := newHarness(t, func(c *Config) { c.Privacy.RedactKeyFile = key }, WithAuth(redactingAuth(t)))
	body := `[{"event":"buy","props":{"user":{"email":"a@example.com","plan":"pro"},"card":"4111"},"context":{"traits":{"email":"a@example.com"}}},` +
		`{"event":"esc","props":{"user":{"em\u0061il":"a@example.com"}}},` +
		`{"event":"late","ts":"1999-01-01T00:00:00Z","props":{"user":{"email":"b@example.com"},"card":"4222"}}]`
	pii := basic("pii", "pii-secret-0123456789")
	if r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", pii); r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	ok := h.sink.onTopic("events")
	dead := h.sink.onTopic("events.invalid")
	if len(ok) != 2 || len(dead) != 1 {
		t.Fatalf("records %d and dead letters %d, want 2 and 1", len(ok), len(dead))
	}
	if v := string(ok[1].Value); strings.Contains(v, "a@example.com") {
		t.Errorf("record %s: a name spelt with an escape was not redacted", v)
	}
	hashA := privacy.Hash(redactKey, "a@example.com")
	want := `"props":{"user":{"email":"` + hashA + `","plan":"pro"}},"context":{"traits":{"email":"` + hashA + `"}}`
	if v := string(ok[0].Value); !strings.Contains(v, want) || strings.Contains(v, "4111") || !strings.Contains(v, `"client":"pii"`) {
		t.Errorf("record %s, want it with %s and no card", v, want)
	}
	if v := string(dead[0].Value); !strings.Contains(v, privacy.Hash(redactKey, "b@example.com")) || strings.Contains(v, "b@example.com") || strings.Contains(v, "4222") {
		t.Errorf("dead letter %s: want it redacted", v)
	}
	// The pixel's dead letter is a query, not JSON: withheld.
	if r := h.do(t, "GET", "/i?k=pii-secret-0123456789&email=c@example.com", nil); r.status != 200 {
		t.Fatalf("pixel answer %s", r)
	}
	dead = h.sink.onTopic("events.invalid")
	last := dead[len(dead)-1]
	if w, _ := header(last, event.HeaderRedacted); len(last.Value) != 0 || w != "withheld" {
		t.Errorf("pixel dead letter %q, inlet-redacted %q: want it withheld", last.Value, w)
	}
	for kind, want := range map[string]float64{"record": 2, "dead_letter": 1, "withheld": 1} {
		if got := testutil.ToFloat64(h.s.metrics.Redacted.WithLabelValues(kind)); got != want {
			t.Errorf("inlet_redacted_records_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	// Another client has no rules.
	if r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", basic("web", "web-secret-0123456789")); r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	ok = h.sink.onTopic("events")
	if v := string(ok[len(ok)-1].Value); !strings.Contains(v, "a@example.com") {
		t.Errorf("web's record %s was redacted", v)
	}
}

// TestRedactRoute: a route's rules apply to the events it routes, after
// the client's; a record key taken from a redacted field follows it.
func TestRedactRoute(t *testing.T) {
	t.Parallel()
	key := writeTemp(t, hex.EncodeToString(redactKey)+"\n")
	rt := routesOf(t, `
routes:
  - name: signup
    match: {event: "signup*"}
    topic: signups
    key: props.name
    redact:
      - {path: traits.address.street, action: drop}
      - {path: /props/name, action: hash}
  - name: orders
    match: {event: "order*"}
    topic: orders
    key: props.card
`)
	h := newHarness(t, func(c *Config) { c.Privacy.RedactKeyFile = key }, WithRoutes(rt), WithAuth(redactingAuth(t)))
	body := `[{"event":"signup","props":{"name":"Ann","card":"4111"}},{"event":"view","props":{"name":"Ann"}},{"event":"order","props":{"card":"4222"}}]`
	if r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", basic("pii", "pii-secret-0123456789")); r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	s := h.sink.onTopic("signups")
	if len(s) != 1 || !strings.Contains(string(s[0].Value), `"props":{"name":"`+privacy.Hash(redactKey, "Ann")+`"}`) {
		t.Errorf("signups %v: want props.name hashed, props.card dropped", s)
	}
	if len(s) == 1 && string(s[0].Key) != privacy.Hash(redactKey, "Ann") {
		t.Errorf("signup's key %q: want the hash of props.name", s[0].Key)
	}
	if e := h.sink.onTopic("events"); len(e) != 1 || !strings.Contains(string(e[0].Value), `"name":"Ann"`) {
		t.Errorf("events %v: want the other route's event as sent", e)
	}
	// The client's rules drop props.card, the orders route's key.
	if o := h.sink.onTopic("orders"); len(o) != 1 || strings.Contains(string(o[0].Value)+string(o[0].Key), "4222") || string(o[0].Key) != o[0].EventID {
		t.Errorf("orders %+v: want props.card dropped, the key the event id", o)
	}
}

// writeTemp writes s to a file of the test's and returns its path.
func writeTemp(tb testing.TB, s string) string {
	tb.Helper()
	p := tb.TempDir() + "/file"
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}
