package auth

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// client makes a client with a fresh secret.
func client(t *testing.T, id string) (Client, string) {
	t.Helper()
	secret, hash, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return Client{ID: id, SecretSHA256: hash}, secret
}

func writeClients(t *testing.T, path string, cs ...Client) {
	t.Helper()
	if err := WriteFile(path, cs); err != nil {
		t.Fatal(err)
	}
}

// fixture is an Authenticator over a file of clients a and b.
type fixture struct {
	a        *Authenticator
	path     string
	clk      *clock
	ca, cb   Client
	sa, sb   string
	log      *testkit.LogBuffer
	registry *prometheus.Registry
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{clk: newClock(), path: filepath.Join(t.TempDir(), "clients.json"), registry: prometheus.NewRegistry()}
	f.ca, f.sa = client(t, "a")
	f.cb, f.sb = client(t, "b")
	writeClients(t, f.path, f.ca, f.cb)
	cfg := Config{ClientsFile: f.path, Now: f.clk.Now, ReloadInterval: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	var log *slog.Logger
	log, f.log = testkit.NewLogBuffer()
	a, err := Open(cfg, log, f.registry)
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	t.Cleanup(func() {
		a.Close()
		if t.Failed() {
			t.Logf("logs:\n%s", f.log)
		}
	})
	return f
}

// session returns a session token of client a.
func (f *fixture) session(t *testing.T) string {
	t.Helper()
	p, err := f.a.Authenticate("a", f.sa)
	if err != nil {
		t.Fatal(err)
	}
	if !IsSessionToken(p.Session) {
		t.Fatalf("session %q is not a session token", p.Session)
	}
	return p.Session
}

// flip changes one character of the part-th "."-separated part of tok.
func flip(tok string, part int) string {
	parts := strings.Split(tok, ".")
	b := []byte(parts[part])
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	parts[part] = string(b)
	return strings.Join(parts, ".")
}

func TestAuthenticate(t *testing.T) {
	f := newFixture(t, nil)
	p, err := f.a.Authenticate("a", f.sa)
	if err != nil || p.Client.ID != "a" || p.Session == "" || !p.Expires.Equal(f.clk.Now().Add(DefaultTokenTTL)) {
		t.Fatalf("secret of a: %+v, %v", p, err)
	}
	tokA := p.Session
	for _, id := range []string{"a", ""} {
		q, err := f.a.Authenticate(id, tokA)
		if err != nil || q.Client.ID != "a" || q.Session != tokA || !q.Expires.Equal(p.Expires) {
			t.Fatalf("session token of a presented with id %q: %+v, %v", id, q, err)
		}
	}
	if q, err := f.a.Authenticate("", f.sb); err != nil || q.Client.ID != "b" {
		t.Fatalf("the secret of b alone must find b: %+v, %v", q, err)
	}
	_, unknownSecret, _ := NewSecret()
	f.clk.Add(time.Minute)
	tokA2 := f.session(t)
	if tokA2 == tokA {
		t.Fatal("two session tokens alike")
	}

	cases := []struct {
		name     string
		id, tok  string
		want     error
		advance  time.Duration
		wantCode int
	}{
		{"missing", "a", "", ErrMissing, 0, 401},
		{"missing both", "", "", ErrMissing, 0, 401},
		{"unknown client", "nobody", f.sa, ErrBadCredentials, 0, 401},
		{"unknown secret", "", unknownSecret, ErrBadCredentials, 0, 401},
		{"wrong secret", "a", f.sb, ErrBadCredentials, 0, 401},
		{"secret given as id", f.sa, f.sa, ErrBadCredentials, 0, 401},
		{"tampered payload", "a", flip(tokA, 1), ErrTampered, 0, 401},
		{"tampered mac", "a", flip(tokA, 2), ErrTampered, 0, 401},
		{"tampered version", "a", "v2" + tokA[2:], ErrBadCredentials, 0, 401}, // not a v1 token: taken as a secret
		{"truncated", "a", tokA[:len(tokA)-3], ErrTampered, 0, 401},
		{"token of another client", "b", tokA, ErrWrongClient, 0, 401},
		{"token for an unknown client", "nobody", tokA, ErrWrongClient, 0, 401},
		{"expired", "a", tokA, ErrExpired, DefaultTokenTTL - time.Minute, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.clk.Add(c.advance)
			p, err := f.a.Authenticate(c.id, c.tok)
			if !errors.Is(err, c.want) {
				t.Fatalf("Authenticate: %+v, %v: want %v", p, err, c.want)
			}
			if got := HTTPStatus(err); got != c.wantCode {
				t.Errorf("HTTPStatus(%v) = %d, want %d", err, got, c.wantCode)
			}
			for _, s := range []string{f.sa, f.sb, tokA, tokA2, unknownSecret, c.tok} {
				if s != "" && strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains a secret or token", err)
				}
				if s != "" && strings.Contains(WWWAuthenticate(err), s) {
					t.Errorf("WWW-Authenticate %q contains a secret or token", WWWAuthenticate(err))
				}
			}
			if !strings.HasPrefix(WWWAuthenticate(err), `Bearer realm="inlet"`) {
				t.Errorf("WWW-Authenticate %q", WWWAuthenticate(err))
			}
			if p.Client != nil || p.Session != "" {
				t.Errorf("a refused credential returned %+v", p)
			}
		})
	}
	// tokA2, made a minute after tokA, expires a minute later.
	f.clk.Add(time.Minute - time.Second)
	if _, err := f.a.Authenticate("a", tokA2); err != nil {
		t.Errorf("a token a second before its expiry: %v", err)
	}
	f.clk.Add(time.Second)
	if _, err := f.a.Authenticate("a", tokA2); !errors.Is(err, ErrExpired) {
		t.Errorf("a token at its expiry: %v, want ErrExpired", err)
	}
	if p, err := f.a.Authenticate("a", f.sa); err != nil || !p.Expires.After(f.clk.Now()) {
		t.Errorf("the secret still works after its tokens expired: %+v, %v", p, err)
	}
	if got := testutil.ToFloat64(f.a.m.failures.WithLabelValues("tampered")); got != 3 {
		t.Errorf("inlet_auth_failures_total{reason=tampered} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(f.a.m.failures.WithLabelValues("expired")); got != 2 {
		t.Errorf("inlet_auth_failures_total{reason=expired} = %v, want 2", got)
	}
	if WWWAuthenticate(ErrMissing) != BearerChallenge || !strings.Contains(WWWAuthenticate(ErrExpired), `error="invalid_token"`) {
		t.Errorf("WWW-Authenticate: %q, %q", WWWAuthenticate(ErrMissing), WWWAuthenticate(ErrExpired))
	}
}

func TestFromHTTP(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.session(t)
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name, auth, query string
		want              error // nil: client a
	}{
		{"bearer secret", "Bearer " + f.sa, "", nil},
		{"bearer session", "Bearer " + tok, "", nil},
		{"bearer lower case", "bearer " + f.sa, "", nil},
		{"basic id and secret", basic("a:" + f.sa), "", nil},
		{"basic id and session", basic("a:" + tok), "", nil},
		{"basic secret as user", basic(f.sa + ":"), "", nil},
		{"basic secret as password", basic(":" + f.sa), "", nil},
		{"basic unpadded", "Basic " + base64.RawStdEncoding.EncodeToString([]byte("a:"+f.sa)), "", nil},
		{"query secret", "", "k=" + f.sa, nil},
		{"query session", "", "k=" + tok, nil},
		{"header wins over query", "Bearer " + f.sa, "k=" + f.sb, nil},
		{"missing", "", "", ErrMissing},
		{"empty k", "", "k=", ErrMissing},
		{"empty bearer", "Bearer ", "", ErrMissing},
		{"malformed basic: not base64", "Basic %%%" + f.sa, "", ErrMissing},
		{"malformed basic: no colon", basic("a" + f.sa), "", ErrMissing},
		{"malformed basic: empty", basic(":"), "", ErrMissing},
		{"other scheme", "Digest " + f.sa, "", ErrMissing},
		{"no scheme", f.sa, "", ErrMissing},
		{"basic wrong secret", basic("a:" + f.sb), "", ErrBadCredentials},
		{"basic unknown id", basic("zz:" + f.sa), "", ErrBadCredentials},
		{"basic token of another client", basic("b:" + tok), "", ErrWrongClient},
		{"bearer tampered", "Bearer " + flip(tok, 2), "", ErrTampered},
		{"query tampered", "", "k=" + flip(tok, 1), ErrTampered},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/batch?"+c.query, nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			p, err := f.a.FromHTTP(r, "")
			if c.want == nil {
				if err != nil || p.Client.ID != "a" {
					t.Fatalf("%+v, %v: want client a", p, err)
				}
				// HTTP cannot hand a session token back: none is minted.
				if !strings.Contains(c.name, "session") && p.Session != "" {
					t.Errorf("a session token was minted for an HTTP request: %+v", p)
				}
				return
			}
			if !errors.Is(err, c.want) || HTTPStatus(err) != 401 {
				t.Fatalf("%+v, %v (status %d): want %v, 401", p, err, HTTPStatus(err), c.want)
			}
			for _, s := range []string{f.sa, f.sb, tok} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains a secret or token", err)
				}
			}
		})
	}
}

func TestReload(t *testing.T) {
	f := newFixture(t, nil)
	tokA := f.session(t)
	cc, sc := client(t, "c")

	writeClients(t, f.path, f.cb, cc) // a removed, c added
	testkit.WaitFor(t, 5*time.Second, "client c after a reload", func() bool {
		_, err := f.a.Authenticate("c", sc)
		return err == nil
	})
	if _, err := f.a.Authenticate("a", f.sa); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("secret of removed client a: %v, want ErrBadCredentials", err)
	}
	if _, err := f.a.Authenticate("", f.sa); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("secret of removed client a alone: %v, want ErrBadCredentials", err)
	}
	if _, err := f.a.Authenticate("", tokA); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("session token of removed client a: %v, want ErrBadCredentials", err)
	}
	if _, err := f.a.Authenticate("b", f.sb); err != nil {
		t.Errorf("b, kept: %v", err)
	}
	if got := testutil.ToFloat64(f.a.m.clients); got != 2 {
		t.Errorf("inlet_auth_clients = %v, want 2", got)
	}

	// A bad file on reload keeps the clients loaded before.
	for i, bad := range []string{`{"clients":[{"id":"b","secret_sha256":"nothex"}]}`, `{"clients":[`, ``} {
		before := f.log.Count("clients file not reloaded")
		if err := os.WriteFile(f.path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, "the bad file logged", func() bool { return f.log.Count("clients file not reloaded") > before })
		if _, err := f.a.Authenticate("c", sc); err != nil {
			t.Errorf("bad file %d: client c lost: %v", i, err)
		}
		if err := f.a.Reload(); err == nil || !strings.Contains(err.Error(), f.path) {
			t.Errorf("Reload of bad file %d: %v, want an error naming the file", i, err)
		}
	}
	// Logged once per change, not at every poll.
	n := f.log.Count("clients file not reloaded")
	time.Sleep(100 * time.Millisecond) // ten polls
	if got := f.log.Count("clients file not reloaded"); got != n {
		t.Errorf("an unchanged bad file was logged %d more times", got-n)
	}
	// A removed file too, then a good one again.
	os.Remove(f.path)
	testkit.WaitFor(t, 5*time.Second, "the missing file logged", func() bool { return f.log.Count("does not exist") > 0 })
	if _, err := f.a.Authenticate("c", sc); err != nil {
		t.Errorf("file removed: client c lost: %v", err)
	}
	writeClients(t, f.path, f.ca)
	testkit.WaitFor(t, 5*time.Second, "client a back", func() bool {
		_, err := f.a.Authenticate("a", f.sa)
		return err == nil
	})
	if _, err := f.a.Authenticate("c", sc); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("client c after the file lost it: %v", err)
	}
	if got := testutil.ToFloat64(f.a.m.reloadErrors); got < 4 {
		t.Errorf("inlet_auth_reload_errors_total = %v, want 4 or more", got)
	}
}

func TestSecretRotation(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.session(t)
	// The new file has the size and modification time of the old one (a
	// new secret of the same length): the poll sees the rename.
	a2, s2 := client(t, "a")
	fi, err := os.Stat(f.path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := f.path + ".new"
	writeClients(t, tmp, a2, f.cb)
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if fj, _ := os.Stat(tmp); fj.Size() != fi.Size() {
		t.Fatalf("sizes %d and %d: the test needs them equal", fj.Size(), fi.Size())
	}
	if err := os.Rename(tmp, f.path); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the new secret of a", func() bool {
		_, err := f.a.Authenticate("a", s2)
		return err == nil
	})
	if _, err := f.a.Authenticate("a", f.sa); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("old secret: %v, want ErrBadCredentials", err)
	}
	if _, err := f.a.Authenticate("a", tok); !errors.Is(err, ErrExpired) {
		t.Errorf("session of the old secret: %v, want ErrExpired", err)
	}
	if _, err := f.a.Authenticate("a", s2); err != nil {
		t.Errorf("new secret: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t, nil)
	f.ca.Rate, f.ca.Burst = 10, 5
	writeClients(t, f.path, f.ca, f.cb)
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	p, err := f.a.Authenticate("a", f.sa)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := f.a.Allow(p, 6); !errors.Is(err, ErrOverBurst) || !errors.Is(err, ErrRateLimited) || d != 0 || HTTPStatus(err) != 413 {
		t.Errorf("a batch over the burst: %v, %v (status %d): want ErrOverBurst at once, 413", d, err, HTTPStatus(err))
	}
	if _, err := f.a.Allow(p, 5); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	d, err := f.a.Allow(p, 3)
	if !errors.Is(err, ErrRateLimited) || errors.Is(err, ErrOverBurst) || HTTPStatus(err) != 429 {
		t.Fatalf("over the rate: %v, %v (status %d): want ErrRateLimited, 429", d, err, HTTPStatus(err))
	}
	if d < 290*time.Millisecond || d > 310*time.Millisecond {
		t.Errorf("retry after %v for 3 events at 10/s from empty: want 300ms", d)
	}
	// A refusal takes nothing: after 300ms the 3 are there.
	f.clk.Add(299 * time.Millisecond)
	if _, err := f.a.Allow(p, 3); !errors.Is(err, ErrRateLimited) {
		t.Errorf("1ms early: %v, want ErrRateLimited", err)
	}
	f.clk.Add(time.Millisecond)
	if _, err := f.a.Allow(p, 3); err != nil {
		t.Errorf("after the retry-after: %v", err)
	}
	if got := testutil.ToFloat64(f.a.m.rateLimited.WithLabelValues("a")); got != 3 {
		t.Errorf("inlet_auth_rate_limited_total{client=a} = %v, want 3", got)
	}
	// b has no rate.
	pb, _ := f.a.Authenticate("b", f.sb)
	if _, err := f.a.Allow(pb, 1_000_000); err != nil {
		t.Errorf("no rate: %v", err)
	}
	// A reload with the same rate keeps the (empty) bucket; a new rate applies.
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.Allow(p, 1); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after a reload: %v, want the bucket kept (ErrRateLimited)", err)
	}
	f.ca.Rate, f.ca.Burst = 1000, 50
	writeClients(t, f.path, f.ca, f.cb)
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(50 * time.Millisecond)
	if _, err := f.a.Allow(p, 50); err != nil {
		t.Errorf("after raising the rate: %v", err)
	}
	// The default burst is the rate rounded up.
	f.ca.Rate, f.ca.Burst = 2.5, 0
	writeClients(t, f.path, f.ca, f.cb)
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.Allow(p, 4); !errors.Is(err, ErrOverBurst) {
		t.Errorf("4 at rate 2.5, default burst 3: %v, want ErrOverBurst", err)
	}
	// A removed client is refused.
	writeClients(t, f.path, f.cb)
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.Allow(p, 1); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("removed client: %v, want ErrBadCredentials", err)
	}
	if _, err := f.a.Allow(Principal{}, 1); !errors.Is(err, ErrMissing) {
		t.Errorf("no principal: %v", err)
	}
}

func TestAllowGroup(t *testing.T) {
	f := newFixture(t, nil)
	f.ca.Groups = []string{"web", "ios"}
	writeClients(t, f.path, f.ca, f.cb)
	if err := f.a.Reload(); err != nil {
		t.Fatal(err)
	}
	pa, _ := f.a.Authenticate("a", f.sa)
	pb, _ := f.a.Authenticate("b", f.sb)
	if err := f.a.AllowGroup(pa, "ios"); err != nil {
		t.Errorf("a, ios: %v", err)
	}
	if err := f.a.AllowGroup(pa, "billing"); !errors.Is(err, ErrForbidden) || HTTPStatus(err) != 403 {
		t.Errorf("a, billing: %v (status %d), want ErrForbidden, 403", err, HTTPStatus(err))
	}
	if err := f.a.AllowGroup(pb, "billing"); err != nil {
		t.Errorf("b (no groups), billing: %v", err)
	}
}

func TestTokenKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f1 := newFixture(t, func(c *Config) { c.TokenKeyFile = keyFile })
	f2 := newFixture(t, func(c *Config) { c.TokenKeyFile = keyFile })
	writeClients(t, f2.path, f1.ca, f1.cb) // the same clients
	if err := f2.a.Reload(); err != nil {
		t.Fatal(err)
	}
	tok := f1.session(t)
	if p, err := f2.a.Authenticate("", tok); err != nil || p.Client.ID != "a" {
		t.Fatalf("a token of instance 1 on instance 2 (shared key): %+v, %v", p, err)
	}
	// Random keys: a token of one instance is not valid on another.
	f3 := newFixture(t, nil)
	writeClients(t, f3.path, f1.ca, f1.cb)
	if err := f3.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := f3.a.Authenticate("", tok); !errors.Is(err, ErrTampered) {
		t.Errorf("a token on an instance with a random key: %v, want ErrTampered", err)
	}
	if f3.log.Count("valid on this instance only") != 1 || f1.log.Count("valid on this instance only") != 0 {
		t.Errorf("the random key is logged once, only when there is no key file:\n%s", f3.log)
	}
	// A removed key file keeps the key loaded.
	os.Remove(keyFile)
	testkit.WaitFor(t, 5*time.Second, "the missing key file logged", func() bool { return f1.log.Count("session key not reloaded") > 0 })
	if _, err := f1.a.Authenticate("", tok); err != nil {
		t.Errorf("key file removed: %v, want the key kept", err)
	}
	// Too short: kept too.
	os.WriteFile(keyFile, []byte("short"), 0o600)
	testkit.WaitFor(t, 5*time.Second, "the short key logged", func() bool { return f1.log.Count("want 32 or more") > 0 })
	if _, err := f1.a.Authenticate("", tok); err != nil {
		t.Errorf("short key file: %v, want the key kept", err)
	}
	// A rotated key: old tokens refused, new ones work.
	os.WriteFile(keyFile, []byte(strings.Repeat("n", 32)), 0o600)
	testkit.WaitFor(t, 5*time.Second, "the new key", func() bool {
		_, err := f1.a.Authenticate("", tok)
		return errors.Is(err, ErrTampered)
	})
	tok2 := f1.session(t)
	if _, err := f1.a.Authenticate("a", tok2); err != nil {
		t.Errorf("a token of the new key: %v", err)
	}
	if f1.log.Count("session key changed") != 1 {
		t.Errorf("key change not logged once:\n%s", f1.log)
	}
	// At Open, a bad key file is an error.
	cfg := Config{ClientsFile: f1.path, TokenKeyFile: keyFile}
	os.WriteFile(keyFile, []byte(strings.Repeat("n", 31)+"\n"), 0o600)
	if _, err := Open(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "31 bytes") {
		t.Errorf("Open with a 31-byte key: %v", err)
	}
	os.Remove(keyFile)
	if _, err := Open(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Errorf("Open with no key file: %v", err)
	}
}

func TestOpenBadFile(t *testing.T) {
	_, sa := client(t, "a")
	h := HashSecret(sa)
	cases := []struct{ name, body, want string }{
		{"empty", ``, "empty file"},
		{"not json", `clients: []`, "invalid"},
		{"unknown field", `{"clients":[{"id":"a","secret_sha256":"` + h + `","secret":"x"}]}`, "unknown"},
		{"unknown top field", `{"clients":[],"version":1}`, "unknown"},
		{"wrong case", `{"clients":[{"ID":"a","secret_sha256":"` + h + `"}]}`, "unknown"},
		{"duplicate key", `{"clients":[{"id":"a","id":"b","secret_sha256":"` + h + `"}]}`, "duplicate"},
		{"invalid utf-8", "{\"clients\":[{\"id\":\"a\xff\",\"secret_sha256\":\"" + h + "\"}]}", "UTF-8"},
		{"duplicate id", `{"clients":[{"id":"a","secret_sha256":"` + h + `"},{"id":"a","secret_sha256":"` + HashSecret("other") + `"}]}`, "twice"},
		{"same secret", `{"clients":[{"id":"a","secret_sha256":"` + h + `"},{"id":"b","secret_sha256":"` + h + `"}]}`, "same secret"},
		{"empty id", `{"clients":[{"id":"","secret_sha256":"` + h + `"}]}`, "id"},
		{"bad id", `{"clients":[{"id":"a b","secret_sha256":"` + h + `"}]}`, "id"},
		{"long id", `{"clients":[{"id":"` + strings.Repeat("x", 65) + `","secret_sha256":"` + h + `"}]}`, "id"},
		{"short hash", `{"clients":[{"id":"a","secret_sha256":"abc"}]}`, "64 hex"},
		{"not hex", `{"clients":[{"id":"a","secret_sha256":"` + strings.Repeat("z", 64) + `"}]}`, "not hex"},
		{"negative rate", `{"clients":[{"id":"a","secret_sha256":"` + h + `","rate":-1}]}`, "rate"},
		{"negative burst", `{"clients":[{"id":"a","secret_sha256":"` + h + `","burst":-1}]}`, "burst"},
		{"empty group", `{"clients":[{"id":"a","secret_sha256":"` + h + `","groups":[""]}]}`, "group"},
		{"rate as string", `{"clients":[{"id":"a","secret_sha256":"` + h + `","rate":"5"}]}`, "rate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "clients.json")
			os.WriteFile(path, []byte(c.body), 0o600)
			a, err := Open(Config{ClientsFile: path}, nil, nil)
			if err == nil {
				a.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: want the file's name and %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "none.json")
	if _, err := Open(Config{ClientsFile: path}, nil, nil); err == nil || !strings.Contains(err.Error(), "inlet clients add") {
		t.Errorf("no file: %v", err)
	}
	if _, err := Open(Config{}, nil, nil); err == nil || !strings.Contains(err.Error(), "--clients") {
		t.Errorf("no --clients: %v", err)
	}
	// A good file: upper-case hex, every field.
	good := `{"clients":[{"id":"a.b_c-9","secret_sha256":"` + strings.ToUpper(h) + `","groups":["web"],"default_group":"web","rate":5,"burst":10,"admin":true,"created":"2026-01-02T03:04:05Z"},{"id":"empty","secret_sha256":"` + HashSecret("x") + `"}]}`
	os.WriteFile(path, []byte(good), 0o600)
	a, err := Open(Config{ClientsFile: path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Authenticate("a.b_c-9", sa)
	if err != nil || !p.Client.Admin || p.Client.DefaultGroup != "web" || p.Client.Burst != 10 || p.Client.Created.Year() != 2026 {
		t.Errorf("good file: %+v, %v", p.Client, err)
	}
}

func TestWriteFileAndAddClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clients.json")
	secret, err := AddClient(path, Client{ID: "web", Groups: []string{"web"}, Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != 43 {
		t.Errorf("secret %d characters, want 43 (32 bytes base64url)", len(secret))
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), secret) || !strings.Contains(string(b), HashSecret(secret)) {
		t.Errorf("the file must hold the hash, not the secret:\n%s", b)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	if _, err := AddClient(path, Client{ID: "web"}); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := AddClient(path, Client{ID: "bad id"}); err == nil {
		t.Error("bad id added")
	}
	s2, err := AddClient(path, Client{ID: "ios"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(Config{ClientsFile: path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for id, s := range map[string]string{"web": secret, "ios": s2} {
		if p, err := a.Authenticate("", s); err != nil || p.Client.ID != id {
			t.Errorf("%s: %+v, %v", id, p, err)
		}
	}
	if err := RemoveClient(path, "web"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveClient(path, "web"); err == nil {
		t.Error("removed twice")
	}
	cs, _ := ReadFile(path)
	if len(cs) != 1 || cs[0].ID != "ios" || cs[0].Created.IsZero() {
		t.Errorf("after remove: %+v", cs)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// TestTokenGarbage feeds parseToken and Authenticate garbage and every
// one-byte change of a valid token: no panic, always an error.
func TestTokenGarbage(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.session(t)
	key := *f.a.key.Load()
	garbage := []string{"", ".", "..", "v1", "v1.", "v1..", "v1...", "v1.x.y", "v1.AAAA.AAAA", "v1.=.=",
		"v1." + strings.Repeat("A", 600), "v1.\x00\xff.\x00", "v1.." + strings.Split(tok, ".")[2],
		"v1." + b64.EncodeToString([]byte("short")) + "." + b64.EncodeToString(mac(key, []byte("short"))),
		"v1." + b64.EncodeToString(make([]byte, payloadFixed)) + "." + b64.EncodeToString(mac(key, make([]byte, payloadFixed))),
		"v1." + b64.EncodeToString(append(make([]byte, payloadFixed), " bad id"...)) + "." + b64.EncodeToString(mac(key, append(make([]byte, payloadFixed), " bad id"...))),
		tok + ".", tok + "A", tok[:len(tok)-1], strings.ToUpper(tok), strings.Replace(tok, ".", "..", 1)}
	for i := range len(tok) {
		for _, c := range []byte{'A', '_', '-', '.', '=', 0, 0xff} {
			if tok[i] != c {
				garbage = append(garbage, tok[:i]+string(c)+tok[i+1:])
			}
		}
	}
	for _, g := range garbage {
		if _, err := parseToken(key, g); err == nil {
			t.Errorf("parseToken(%q) accepted", g)
		}
		p, err := f.a.Authenticate("", g)
		if err == nil {
			t.Errorf("Authenticate(%q) accepted as %+v", g, p)
		} else if HTTPStatus(err) != 401 {
			t.Errorf("Authenticate(%q): %v, status %d", g, err, HTTPStatus(err))
		}
	}
}

// FuzzParseToken: parseToken never panics, and accepts only tokens signed
// with the key.
func FuzzParseToken(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	// A fixed token (no random nonce): fuzzing workers are other processes.
	payload := append(make([]byte, payloadFixed), 'a')
	good := tokenPrefix + b64.EncodeToString(payload) + "." + b64.EncodeToString(mac(key, payload))
	for _, s := range []string{good, "", "v1.", "v1.AA.AA", good[:20]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseToken(key, s)
		if err == nil && (s != good || c.id != "a") {
			t.Errorf("accepted %q as %+v", s, c)
		}
		if err != nil && !errors.Is(err, ErrTampered) {
			t.Errorf("%q: %v, want ErrTampered", s, err)
		}
	})
}

func TestHTTPStatus(t *testing.T) {
	for err, want := range map[error]int{nil: 200, ErrMissing: 401, ErrBadCredentials: 401, ErrThrottled: 429, &throttleError{time.Second}: 429,
		ErrExpired: 401, ErrTampered: 401, ErrWrongClient: 401, ErrForbidden: 403, ErrRateLimited: 429,
		ErrOverBurst: 413, errors.New("other"): 500} {
		if got := HTTPStatus(err); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", err, got, want)
		}
	}
}

func TestConfig(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if c.TokenTTL != 15*time.Minute || c.ReloadInterval != 2*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if c.FailBurst != 20 || c.FailEvery != 5*time.Second {
		t.Errorf("throttle defaults: %+v", c)
	}
	if err := fs.Parse([]string{"--clients", "c.json", "--auth", "--auth-token-ttl", "1h", "--auth-token-key-file", "k", "--clients-reload-interval", "5s",
		"--auth-fail-burst", "-1", "--auth-fail-every", "1s", "--rate-limit-store", "local", "--rate-limit-timeout", "10ms"}); err != nil {
		t.Fatal(err)
	}
	if c.ClientsFile != "c.json" || !c.HTTP || c.TokenTTL != time.Hour || c.TokenKeyFile != "k" || c.ReloadInterval != 5*time.Second ||
		c.FailBurst != -1 || c.FailEvery != time.Second || c.RateStore != RateStoreLocal || c.RateTimeout != 10*time.Millisecond {
		t.Errorf("flags: %+v", c)
	}
	// Rates in Redis by default once there is one; local opts out.
	for _, tc := range []struct{ store, redis, want string }{
		{"", "", RateStoreLocal}, {"", "r:6379", RateStoreRedis}, {RateStoreLocal, "r:6379", RateStoreLocal}, {RateStoreRedis, "r:6379", RateStoreRedis},
	} {
		if got := (Config{RateStore: tc.store, RedisAddr: tc.redis}).RateStoreKind(); got != tc.want {
			t.Errorf("--rate-limit-store %q --redis %q: %s, want %s", tc.store, tc.redis, got, tc.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid: %v", err)
	}
	for _, bad := range []Config{{HTTP: true}, {TokenKeyFile: "k"}, {ClientsFile: "c", TokenTTL: time.Millisecond},
		{ClientsFile: "c", TokenTTL: 48 * time.Hour}, {ClientsFile: "c", ReloadInterval: time.Microsecond},
		{ClientsFile: "c", FailBurst: -2}, {ClientsFile: "c", FailEvery: time.Microsecond},
		{ClientsFile: "c", RateStore: "memcached", RedisAddr: "r:6379"}, {ClientsFile: "c", RateStore: RateStoreRedis},
		{ClientsFile: "c", RedisAddr: "r:6379", RateTimeout: time.Microsecond}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: valid", bad)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("auth off: %v", err)
	}
}

func TestClientGroup(t *testing.T) {
	for _, c := range []struct {
		client Client
		want   string
	}{
		{Client{ID: "a"}, ""},
		{Client{ID: "a", DefaultGroup: "d", Groups: []string{"x"}}, "d"},
		{Client{ID: "a", Groups: []string{"only"}}, "only"},
		{Client{ID: "a", Groups: []string{"x", "y"}}, ""},
	} {
		if got := c.client.Group(); got != c.want {
			t.Errorf("%+v: Group() = %q, want %q", c.client, got, c.want)
		}
	}
}

func TestWithoutCredentials(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"e=view&uid=u1", "e=view&uid=u1"},
		{"k=s3cret", ""},
		{"e=view&k=s3cret&uid=u1", "e=view&uid=u1"},
		{"k=a&e=view&k=b", "e=view"},
		{"%6B=s3cret&e=x", "e=x"},
		{"%6b=s3cret", ""},
		{"k", ""},
		{"k=%zz&e=x", "e=x"},
		{"%6b%zz=s3cret&e=x", "e=x"},
		{"kk=1&ok=2&p.k=3", "kk=1&ok=2&p.k=3"},
		{"e=%zz&k=s", "e=%zz"},
		{"k=s&k=t&a=%20x", "a=%20x"},
		{"kk=1&k&a", "kk=1&a"},
		{"a=1&&b=%zz", "a=1&&b=%zz"},
	} {
		if got := WithoutCredentials(c.in); got != c.want {
			t.Errorf("WithoutCredentials(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func BenchmarkWithoutCredentials(b *testing.B) {
	for _, q := range []string{"e=click&uid=u1&p.sku=A1&cb=123", "e=click&uid=u1&k=0123456789abcdef0123456789abcdef012&cb=1"} {
		b.Run(fmt.Sprint(len(q)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = WithoutCredentials(q)
			}
		})
	}
}
