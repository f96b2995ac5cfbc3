package auth

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// sharedFixture is n Authenticators on one clients file and one Redis
// (with store redis), like n instances of a fleet, with one client of the
// test's own (a unique id, so its key in the shared Redis is too).
type sharedFixture struct {
	as     []*Authenticator
	logs   []*testkit.LogBuffer
	clk    *clock
	id     string
	secret string
}

func newSharedFixture(t testing.TB, n int, store, redisAddr string, c Client, mod func(*Config)) *sharedFixture {
	t.Helper()
	f := &sharedFixture{clk: newClock(), id: strings.ReplaceAll(testkit.Unique(t, "rl-"), "/", "-")}
	path := filepath.Join(t.TempDir(), "clients.json")
	c.ID = f.id
	secret, err := AddClient(path, c)
	if err != nil {
		t.Fatal(err)
	}
	f.secret = secret
	for range n {
		// A timeout a loaded machine meets; TestSharedRateTimeout sets its own.
		cfg := Config{ClientsFile: path, Now: f.clk.Now, RateStore: store, RedisAddr: redisAddr, RateTimeout: time.Second}
		if mod != nil {
			mod(&cfg)
		}
		log, buf := testkit.NewLogBuffer()
		a, err := Open(cfg, log, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		f.as, f.logs = append(f.as, a), append(f.logs, buf)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range f.logs {
				t.Logf("instance %d logs:\n%s", i, l)
			}
		}
	})
	return f
}

func (f *sharedFixture) principal(t testing.TB) Principal {
	t.Helper()
	p, err := f.as[0].Authenticate(f.id, f.secret)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedRate: two instances on one Redis take a client's tokens from
// one bucket; the same two on their own (local) have a bucket each. Over
// the burst is told from over the rate as without Redis.
func TestSharedRate(t *testing.T) {
	addr := testkit.Redis(t)
	c := Client{Rate: 0.5, Burst: 5} // a token every 2 s: none comes back during the test
	for _, tc := range []struct {
		store string
		want  int // accepted of 10 single events, alternating instances
	}{{RateStoreRedis, 5}, {RateStoreLocal, 10}} {
		t.Run(tc.store, func(t *testing.T) {
			f := newSharedFixture(t, 2, tc.store, addr, c, nil)
			p := f.principal(t)
			ok := 0
			var last error
			var wait time.Duration
			for i := range 10 {
				d, err := f.as[i%2].Allow(p, 1)
				if err == nil {
					ok++
				} else {
					last, wait = err, d
				}
			}
			if ok != tc.want {
				t.Fatalf("%d of 10 accepted over two instances, want %d (burst 5, %s)", ok, tc.want, tc.store)
			}
			if tc.store == RateStoreLocal {
				return
			}
			if !errors.Is(last, ErrRateLimited) || errors.Is(last, ErrOverBurst) || Reason(last) != "rate_limited" || HTTPStatus(last) != 429 {
				t.Errorf("over the shared rate: %v (reason %q, status %d), want rate_limited, 429", last, Reason(last), HTTPStatus(last))
			}
			if wait < time.Second || wait > 2*time.Second {
				t.Errorf("retry after %v at 0.5/s with an empty bucket: want about 2s", wait)
			}
			// Over the burst: refused at once, whatever the bucket holds.
			if d, err := f.as[1].Allow(p, 6); !errors.Is(err, ErrOverBurst) || Reason(err) != "over_burst" || d != 0 || HTTPStatus(err) != 413 {
				t.Errorf("6 events at once, burst 5: %v, %v: want over_burst, 413", d, err)
			}
			for i, a := range f.as {
				// 0: events 6 and 8; 1: events 5, 7, 9 and the batch of 6.
				if got, want := testutil.ToFloat64(a.m.rateLimited.WithLabelValues(f.id)), float64(2+2*i); got != want {
					t.Errorf("instance %d: inlet_auth_rate_limited_total = %v, want %v", i, got, want)
				}
				if got := testutil.ToFloat64(a.m.fallbacks); got != 0 {
					t.Errorf("instance %d: %v fallbacks with Redis up", i, got)
				}
			}
			// The key is the client's, under redis_rate's prefix.
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			if n, err := rdb.Exists(context.Background(), "rate:inlet:"+f.id).Result(); err != nil || n != 1 {
				t.Errorf("key rate:inlet:%s: exists %d, %v", f.id, n, err)
			}
		})
	}
}

// TestSharedRateNoRate: a client without a rate never asks Redis (one
// that does not answer here would count a fallback).
func TestSharedRateNoRate(t *testing.T) {
	f := newSharedFixture(t, 1, RateStoreRedis, blackHole(t, nil), Client{}, func(c *Config) { c.RateTimeout = 5 * time.Millisecond })
	p := f.principal(t)
	for range 100 {
		if _, err := f.as[0].Allow(p, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(f.as[0].m.fallbacks); got != 0 {
		t.Errorf("%v fallbacks for a client without a rate: Redis was asked", got)
	}
}

// TestSharedRateFallback: with Redis stopped, requests are decided by the
// instance's own limiter (never all refused), counted and logged once;
// Redis is left alone for RateRetry, then asked again, and once it
// answers the rate is shared again.
func TestSharedRateFallback(t *testing.T) {
	rc := testkit.PrivateRedis(t)
	f := newSharedFixture(t, 1, RateStoreRedis, rc.Addr, Client{Rate: 0.5, Burst: 3}, nil)
	a, p := f.as[0], f.principal(t)
	if _, err := a.Allow(p, 3); err != nil {
		t.Fatalf("the burst, in Redis: %v", err)
	}
	rc.Stop()
	// The local limiter has had nothing taken: its burst goes, then it refuses.
	for i := range 3 {
		if _, err := a.Allow(p, 1); err != nil {
			t.Fatalf("event %d with Redis stopped: %v, want the local limiter's burst", i, err)
		}
	}
	if _, err := a.Allow(p, 1); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("past the local burst: %v, want ErrRateLimited", err)
	}
	if got := testutil.ToFloat64(a.m.fallbacks); got != 4 {
		t.Errorf("inlet_auth_rate_limit_fallback_total = %v, want 4", got)
	}
	if n := strings.Count(f.logs[0].String(), "redis does not answer"); n != 1 {
		t.Errorf("%d lines 'redis does not answer', want 1 per interval:\n%s", n, f.logs[0])
	}
	rc.Start()
	// Redis is asked again only after RateRetry: until then, local.
	f.clk.Add(DefaultRateRetry - time.Millisecond)
	if _, err := a.Allow(p, 1); !errors.Is(err, ErrRateLimited) {
		t.Errorf("within the retry window: %v, want the local limiter's refusal", err)
	}
	// Then the (new, empty) Redis decides: a full burst again. A dial
	// that fails on a loaded machine is retried a window later.
	for i := 0; ; i++ {
		f.clk.Add(DefaultRateRetry)
		if _, err := a.Allow(p, 3); err == nil {
			break
		} else if i == 5 {
			t.Fatalf("Redis back: %v, want its full burst", err)
		}
	}
	if _, err := a.Allow(p, 1); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after Redis's burst: %v, want ErrRateLimited from Redis", err)
	}
	if !strings.Contains(f.logs[0].String(), "redis answers again") {
		t.Errorf("no line 'redis answers again':\n%s", f.logs[0])
	}
	rdb := redis.NewClient(&redis.Options{Addr: rc.Addr})
	defer rdb.Close()
	if n, err := rdb.Exists(context.Background(), "rate:inlet:"+f.id).Result(); err != nil || n != 1 {
		t.Errorf("key in the restarted Redis: exists %d, %v: rates are not shared again", n, err)
	}
}

// TestSharedRateTimeout: a Redis that accepts connections and never
// answers costs a request at most about RateTimeout, once per RateRetry:
// the requests in between do not wait for it nor connect to it.
func TestSharedRateTimeout(t *testing.T) {
	var conns atomic.Int64
	addr := blackHole(t, &conns)
	const timeout = 20 * time.Millisecond
	f := newSharedFixture(t, 1, RateStoreRedis, addr, Client{Rate: 100, Burst: 100}, func(c *Config) { c.RateTimeout = timeout })
	a, p := f.as[0], f.principal(t)
	if !strings.Contains(f.logs[0].String(), "redis does not answer yet") {
		t.Errorf("no line 'redis does not answer yet' at Open:\n%s", f.logs[0])
	}
	f.clk.Add(DefaultRateRetry) // past the window Open's failed warm-up opened
	start := time.Now()
	if _, err := a.Allow(p, 1); err != nil {
		t.Fatalf("with Redis silent: %v, want the local limiter's yes", err)
	}
	if took := time.Since(start); took > timeout+500*time.Millisecond {
		t.Errorf("the first request waited %v for a silent Redis, want about %v", took, timeout)
	}
	before := conns.Load()
	start = time.Now()
	for range 50 {
		if _, err := a.Allow(p, 1); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("50 requests within the retry window took %v: they waited for Redis", took)
	}
	if after := conns.Load(); after != before {
		t.Errorf("connections to Redis went from %d to %d within the retry window", before, after)
	}
	if got := testutil.ToFloat64(a.m.fallbacks); got != 51 {
		t.Errorf("inlet_auth_rate_limit_fallback_total = %v, want 51", got)
	}
	f.clk.Add(DefaultRateRetry)
	start = time.Now()
	if _, err := a.Allow(p, 1); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < timeout/2 {
		t.Errorf("after the retry window the request took %v: Redis was not asked again", took)
	}
}

func TestLimitOf(t *testing.T) {
	for _, tc := range []struct {
		rate    float64
		period  time.Duration
		limited bool
	}{
		{100, 10 * time.Millisecond, true}, {2.5, 400 * time.Millisecond, true}, {1e9, time.Nanosecond, true},
		{1e-30, maxPeriod, true}, {2e9, 0, false},
	} {
		l, limited := limitOf(tc.rate, 7)
		if limited != tc.limited || l.Period != tc.period || (limited && (l.Rate != 1 || l.Burst != 7)) {
			t.Errorf("rate %g: %+v, %v; want period %v, limited %v", tc.rate, l, limited, tc.period, tc.limited)
		}
	}
}

// blackHole is a TCP listener that accepts connections, counting them in
// conns (if not nil), and never answers.
func blackHole(t *testing.T, conns *atomic.Int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var held []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			if conns != nil {
				conns.Add(1)
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}
