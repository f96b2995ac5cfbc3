package auth

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/inlet-dev/inlet/internal/ratelog"
)

// sharedLogInterval is how often at most the fallback to the local
// limiters is logged.
const sharedLogInterval = 10 * time.Second

// rateKey is a client's key under redis_rate's own "rate:" prefix:
// rate:inlet:<client id>, a string (the client's next free time, GCRA's
// TAT) that expires once the client's bucket is full again.
func rateKey(id string) string { return "inlet:" + id }

// sharedRates keeps clients' rates in Redis, so that a client's rate
// holds across every instance on that Redis: GCRA in one Lua script
// (go-redis's redis_rate), on Redis's clock. A call that fails or takes
// longer than timeout leaves the request to the local limiter, and Redis
// alone for retry; then one request asks it again. It is safe for
// concurrent use.
type sharedRates struct {
	rdb     *redis.Client
	lim     *redis_rate.Limiter
	timeout time.Duration
	retry   time.Duration
	now     func() time.Time

	// askAt is when to ask Redis again, in Unix nanoseconds of now; 0
	// while it answers. The request that moves it forward asks.
	askAt atomic.Int64

	fallbacks prometheus.Counter
	down      *ratelog.Limiter // Redis did not answer
	up        *ratelog.Limiter // it answers again
}

func newSharedRates(cfg Config, log *slog.Logger) *sharedRates {
	// A call's own context bounds it (RateTimeout); these bound warm.
	t := max(warmTimeout, cfg.RateTimeout)
	rdb := redis.NewClient(&redis.Options{
		Addr:         cfg.RedisAddr,
		DialTimeout:  t,
		ReadTimeout:  t,
		WriteTimeout: t,
		PoolTimeout:  t,
		// One try: the local limiter is the retry.
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	})
	return &sharedRates{
		rdb:     rdb,
		lim:     redis_rate.NewLimiter(rdb),
		timeout: cfg.RateTimeout,
		retry:   cfg.RateRetry,
		now:     cfg.Now,
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_auth_rate_limit_fallback_total",
			Help: "Requests of rate-limited clients decided by this instance's own limiter because Redis (--rate-limit-store redis) did not answer within --rate-limit-timeout, or was being left alone after it did not: the client's rate held per instance for them.",
		}),
		down: ratelog.New(log, slog.LevelWarn, "auth: redis does not answer: clients' rates are kept by each instance (N instances allow N times a rate) until it does", sharedLogInterval),
		up:   ratelog.New(log, slog.LevelInfo, "auth: redis answers again: clients' rates are shared across instances again", sharedLogInterval),
	}
}

// warmTimeout bounds warm, at least the timeout of a call.
const warmTimeout = 250 * time.Millisecond

// warm connects to Redis and loads the script (a call that takes nothing
// and writes nothing), so that the first requests do not pay for the dial,
// the handshake and the script's load within their timeout. If Redis does
// not answer, it is left alone for retry, as after a failed call.
func (s *sharedRates) warm(log *slog.Logger, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), max(warmTimeout, s.timeout))
	defer cancel()
	if _, err := s.lim.AllowN(ctx, rateKey(""), redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Second}, 0); err != nil {
		s.askAt.Store(s.now().UnixNano() + s.retry.Nanoseconds())
		log.Warn("auth: redis does not answer yet: clients' rates are kept by each instance until it does", "redis", addr, "err", err)
	}
}

// maxPeriod caps the time between two events of a rate in Redis (about
// 31 years): slower rates are as good as none there.
const maxPeriod = 1e18

// limitOf is a rate of events per second and a burst as redis_rate's
// Limit, whose rate is a whole number per period: one event per
// 1s/rate, to the nanosecond. limited is false for a rate faster than an
// event a nanosecond: no limit.
func limitOf(r float64, burst int) (l redis_rate.Limit, limited bool) {
	p := float64(time.Second) / r
	if !(p >= 1) {
		return redis_rate.Limit{}, false
	}
	return redis_rate.Limit{Rate: 1, Burst: burst, Period: time.Duration(min(p, maxPeriod))}, true
}

// allow takes n tokens of client id's rate r and burst from Redis: wait
// is 0 if it may go, else how long until it may. ok is false when Redis
// was not asked or did not answer: the caller decides locally.
func (s *sharedRates) allow(id string, r float64, burst, n int) (wait time.Duration, ok bool) {
	l, limited := limitOf(r, burst)
	if !limited {
		return 0, true
	}
	if at := s.askAt.Load(); at != 0 {
		now := s.now().UnixNano()
		if now < at || !s.askAt.CompareAndSwap(at, now+s.retry.Nanoseconds()) {
			s.fallbacks.Inc()
			return 0, false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	res, err := s.lim.AllowN(ctx, rateKey(id), l, n)
	cancel()
	if err != nil {
		s.askAt.Store(s.now().UnixNano() + s.retry.Nanoseconds())
		s.fallbacks.Inc()
		s.down.Log("err", err, "retry_in", s.retry)
		return 0, false
	}
	if s.askAt.Load() != 0 {
		s.askAt.Store(0)
		s.up.Log()
	}
	if res.Allowed == 0 {
		return max(res.RetryAfter, time.Nanosecond), true
	}
	return 0, true
}

// close closes the Redis client.
func (s *sharedRates) close() error {
	if err := s.rdb.Close(); err != nil {
		return fmt.Errorf("auth: closing the redis client: %w", err)
	}
	return nil
}
