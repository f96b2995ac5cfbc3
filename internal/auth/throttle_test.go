package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBadCredentialsOneAnswer: an unknown client id and a wrong secret for
// a known one get the same error, message and challenge, so an answer
// never tells whether a client id exists; over Basic too, and for a
// session token presented under an id that exists or not.
func TestBadCredentialsOneAnswer(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.session(t)
	_, unknown := client(t, "zz")
	pairs := []struct {
		name    string
		id, tok string
	}{
		{"unknown id, a's secret", "nobody", f.sa},
		{"known id, wrong secret", "a", f.sb + "x"},
		{"known id, b's secret", "a", f.sb},
		{"unknown id, unknown secret", "nobody", unknown},
		{"no id, unknown secret", "", unknown},
	}
	var msgs []string
	for _, c := range pairs {
		_, err := f.a.Authenticate(c.id, c.tok)
		if !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("%s: %v, want ErrBadCredentials", c.name, err)
		}
		msgs = append(msgs, err.Error()+" | "+WWWAuthenticate(err))
		r := httptest.NewRequest(http.MethodPost, "/v1/batch", nil)
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.id+":"+c.tok)))
		if c.id == "" {
			r.Header.Set("Authorization", "Bearer "+c.tok)
		}
		_, err = f.a.FromHTTP(r, "")
		msgs = append(msgs, err.Error()+" | "+WWWAuthenticate(err))
	}
	if len(slices.Compact(slices.Clone(msgs))) != 1 {
		t.Errorf("answers differ:\n%q", msgs)
	}
	// A session token under another id: the same answer whether that id
	// exists or not.
	_, e1 := f.a.Authenticate("b", tok)
	_, e2 := f.a.Authenticate("nobody", tok)
	if e1 == nil || e2 == nil || e1.Error() != e2.Error() {
		t.Errorf("session token under b: %v; under nobody: %v", e1, e2)
	}
	if got := testutil.ToFloat64(f.a.m.failures.WithLabelValues("bad_credentials")); got != float64(2*len(pairs)) {
		t.Errorf("inlet_auth_failures_total{reason=bad_credentials} = %v, want %d", got, 2*len(pairs))
	}
}

// TestBadCredentialsTiming: an unknown id and a wrong secret take the
// same time, within wide margins (the two paths are one; this catches one
// doing much more work than the other). The medians of interleaved runs.
func TestBadCredentialsTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	f := newFixture(t, nil)
	const rounds = 2001
	unknown, wrong := make([]time.Duration, 0, rounds), make([]time.Duration, 0, rounds)
	for range rounds {
		t0 := time.Now()
		_, e1 := f.a.Authenticate("nobody", f.sa)
		t1 := time.Now()
		_, e2 := f.a.Authenticate("a", f.sb)
		t2 := time.Now()
		if e1 == nil || e2 == nil {
			t.Fatal("accepted")
		}
		unknown, wrong = append(unknown, t1.Sub(t0)), append(wrong, t2.Sub(t1))
	}
	slices.Sort(unknown)
	slices.Sort(wrong)
	mu, mw := unknown[rounds/2], wrong[rounds/2]
	if ratio := float64(mu) / float64(mw); ratio < 0.5 || ratio > 2 {
		t.Errorf("median unknown id %v, wrong secret %v: ratio %.2f, want within 0.5-2", mu, mw, ratio)
	}
	t.Logf("median unknown id %v, wrong secret %v", mu, mw)
}

// TestThrottle: after FailBurst bad credentials from one address, its
// requests are refused with ErrThrottled (429, Retry-After), good
// credentials too, while another address is served; one more try is
// allowed per FailEvery; missing credentials do not count; an IPv6
// address counts by its /64.
func TestThrottle(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.FailBurst, c.FailEvery = 3, 10*time.Second })
	bad := func(src string) error { _, err := f.a.AuthenticateFrom(src, "a", f.sb); return err }
	good := func(src string) error { _, err := f.a.AuthenticateFrom(src, "a", f.sa); return err }
	for i := range 3 {
		if err := bad("192.0.2.1"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	for _, try := range []func(string) error{bad, good} {
		err := try("192.0.2.1")
		if !errors.Is(err, ErrThrottled) || !errors.Is(err, ErrRateLimited) || HTTPStatus(err) != http.StatusTooManyRequests {
			t.Fatalf("after 3 failures: %v (status %d), want ErrThrottled, 429", err, HTTPStatus(err))
		}
		if d := RetryAfter(err); d <= 0 || d > 10*time.Second {
			t.Errorf("RetryAfter %v, want (0, 10s]", d)
		}
	}
	if err := good("192.0.2.2"); err != nil {
		t.Errorf("another address: %v", err)
	}
	if err := good(""); err != nil {
		t.Errorf("no address: %v", err)
	}
	f.clk.Add(10 * time.Second)
	if err := bad("192.0.2.1"); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("one more try after FailEvery: %v", err)
	}
	if err := good("192.0.2.1"); !errors.Is(err, ErrThrottled) {
		t.Errorf("then throttled again: %v", err)
	}
	f.clk.Add(30 * time.Second)
	if err := good("192.0.2.1"); err != nil {
		t.Errorf("failures aged out: %v", err)
	}
	// Missing credentials are not guesses.
	for range 10 {
		if _, err := f.a.AuthenticateFrom("192.0.2.3", "a", ""); !errors.Is(err, ErrMissing) {
			t.Fatal(err)
		}
	}
	if err := good("192.0.2.3"); err != nil {
		t.Errorf("after missing credentials: %v", err)
	}
	// An IPv6 /64 is one source; another /64 is not.
	for i := range 3 {
		_ = bad(fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	if err := good("2001:db8:1:2:ffff::1"); !errors.Is(err, ErrThrottled) {
		t.Errorf("same /64: %v, want ErrThrottled", err)
	}
	if err := good("2001:db8:1:3::1"); err != nil {
		t.Errorf("another /64: %v", err)
	}
	if got := testutil.ToFloat64(f.a.m.failures.WithLabelValues("throttled")); got != 4 {
		t.Errorf("inlet_auth_failures_total{reason=throttled} = %v, want 4", got)
	}
}

// TestThrottleBounded: the table of failing addresses holds at most
// FailSources; past it addresses are forgotten (counted), aged-out ones
// first.
func TestThrottleBounded(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.FailBurst, c.FailEvery, c.FailSources = 1, time.Minute, 64 })
	for i := range 5000 {
		_, _ = f.a.AuthenticateFrom(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), "a", f.sb)
	}
	if n := f.a.fails.len(); n > 64 {
		t.Errorf("%d addresses remembered, want at most 64", n)
	}
	if ev := testutil.ToFloat64(f.a.m.throttleEvictions); ev < 5000-64 {
		t.Errorf("evictions %v, want at least %d", ev, 5000-64)
	}
	// All aged out: new addresses take their places without forgetting
	// anyone still failing.
	f.clk.Add(2 * time.Minute)
	before := testutil.ToFloat64(f.a.m.throttleEvictions)
	for i := range 64 {
		_, _ = f.a.AuthenticateFrom(fmt.Sprintf("172.16.0.%d", i), "a", f.sb)
	}
	if n := f.a.fails.len(); n > 64 {
		t.Errorf("%d addresses remembered, want at most 64", n)
	}
	if after := testutil.ToFloat64(f.a.m.throttleEvictions); after-before > 8 {
		t.Errorf("%v evictions of addresses still failing, while aged-out ones could go", after-before)
	}
}

// TestThrottleOff: --auth-fail-burst -1 never throttles.
func TestThrottleOff(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.FailBurst = -1 })
	for range 100 {
		_, _ = f.a.AuthenticateFrom("192.0.2.1", "a", f.sb)
	}
	if _, err := f.a.AuthenticateFrom("192.0.2.1", "a", f.sa); err != nil {
		t.Errorf("after 100 failures with throttling off: %v", err)
	}
}
