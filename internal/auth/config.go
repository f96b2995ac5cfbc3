package auth

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultTokenTTL       = 15 * time.Minute
	DefaultReloadInterval = 2 * time.Second
	// DefaultFailBurst and DefaultFailEvery: an address may present bad
	// credentials 20 times at once, then once every 5 s.
	DefaultFailBurst = 20
	DefaultFailEvery = 5 * time.Second
	// DefaultFailSources bounds the addresses whose failures are
	// remembered: 65,536, about 3 MB.
	DefaultFailSources = 1 << 16
	// MaxTokenTTL bounds --auth-token-ttl: a session token cannot be
	// revoked before its expiry except by removing its client or changing
	// the key.
	MaxTokenTTL = 24 * time.Hour
	// DefaultRateTimeout bounds one call to Redis for a client's rate: a
	// slow Redis adds at most this to a request. Not less: the wait includes
	// the instance's own scheduling, and on a saturated core 5ms made 58% of
	// calls fall back to the local limit (20ms: 66%, 100ms: none).
	DefaultRateTimeout = 50 * time.Millisecond
	// DefaultRateRetry is how long the local limiter decides alone after
	// Redis failed to answer, before one request asks Redis again: short,
	// since a stall of this process (a busy or noisy host) fails a call as
	// a slow Redis does (at 2,000 requests/s on a heavily loaded test
	// machine, 1s let 39% of the requests fall back, 100ms 5%), and a
	// probe of a dead Redis costs a refused dial or one request's timeout.
	DefaultRateRetry = 100 * time.Millisecond
)

// Where clients' rates are kept (Config.RateStore, --rate-limit-store).
const (
	RateStoreLocal = "local" // in each process: N instances allow N times a rate
	RateStoreRedis = "redis" // in Redis (--redis): the rate holds across the instances on it
)

// Config configures client credentials.
type Config struct {
	// ClientsFile is the clients file (--clients), reloaded on change.
	ClientsFile string
	// RedactKey is set (by the gateway, not a flag) when there is a
	// redaction key (--redact-key-file): without it, a clients file with a
	// hash rule is refused.
	RedactKey bool
	// HTTP requires credentials on HTTP ingest (--auth).
	HTTP bool
	// TokenTTL is how long a session token is valid (--auth-token-ttl).
	TokenTTL time.Duration
	// TokenKeyFile holds the HMAC key of session tokens, at least 32 bytes
	// (a trailing newline is not part of it), shared by the instances so a
	// token minted by one is accepted by all (--auth-token-key-file).
	// Empty: a random key per process. Reloaded on change like ClientsFile.
	TokenKeyFile string
	// ReloadInterval is how often the files are checked for changes
	// (--clients-reload-interval).
	ReloadInterval time.Duration
	// FailBurst is how many bad credentials a source address may present
	// at once (--auth-fail-burst), FailEvery how often one more is allowed
	// after (--auth-fail-every); past them its requests are answered 429
	// with Retry-After. FailBurst -1 turns this off (0 is the default).
	FailBurst int
	FailEvery time.Duration
	// FailSources bounds the addresses remembered (DefaultFailSources
	// when 0).
	FailSources int
	// RateStore is where clients' rates are kept (--rate-limit-store):
	// RateStoreLocal or RateStoreRedis; "" is redis when RedisAddr is set,
	// else local.
	RateStore string
	// RedisAddr is Redis's host:port (--redis), set by the caller.
	RedisAddr string
	// RateTimeout bounds one call to Redis (--rate-limit-timeout); a call
	// that fails or takes longer is decided by the local limiter.
	RateTimeout time.Duration
	// RateRetry is how long, after Redis failed to answer, requests are
	// decided by the local limiter without asking it (DefaultRateRetry
	// when 0); then one request asks again.
	RateRetry time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// DefaultConfig is the configuration of the flags' defaults.
func DefaultConfig() Config {
	return Config{TokenTTL: DefaultTokenTTL, ReloadInterval: DefaultReloadInterval, FailBurst: DefaultFailBurst, FailEvery: DefaultFailEvery, RateTimeout: DefaultRateTimeout}
}

// withDefaults fills the zero durations and the clock.
func (c Config) withDefaults() Config {
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.ReloadInterval == 0 {
		c.ReloadInterval = DefaultReloadInterval
	}
	if c.FailBurst == 0 {
		c.FailBurst = DefaultFailBurst
	}
	if c.FailEvery == 0 {
		c.FailEvery = DefaultFailEvery
	}
	if c.FailSources == 0 {
		c.FailSources = DefaultFailSources
	}
	if c.RateTimeout == 0 {
		c.RateTimeout = DefaultRateTimeout
	}
	if c.RateRetry == 0 {
		c.RateRetry = DefaultRateRetry
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// RateStoreKind is where clients' rates are kept: c.RateStore, or redis
// when RedisAddr is set, else local.
func (c Config) RateStoreKind() string {
	switch {
	case c.RateStore != "":
		return c.RateStore
	case c.RedisAddr != "":
		return RateStoreRedis
	}
	return RateStoreLocal
}

// RegisterFlags binds c's fields to their flags; the defaults are c's
// values (DefaultConfig's where c's are zero).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := c.withDefaults()
	c.TokenTTL, c.ReloadInterval, c.FailBurst, c.FailEvery, c.RateTimeout = d.TokenTTL, d.ReloadInterval, d.FailBurst, d.FailEvery, d.RateTimeout
	fs.StringVar(&c.ClientsFile, "clients", c.ClientsFile, "clients `FILE` (ids, hashed secrets, groups, rates; made with `inlet clients add`), reloaded on change")
	fs.BoolVar(&c.HTTP, "auth", c.HTTP, "require client credentials on HTTP ingest and request-reply (/v1/rpc): Authorization Bearer or Basic (client id as user), or k= in the query (needs --clients)")
	fs.DurationVar(&c.TokenTTL, "auth-token-ttl", c.TokenTTL, "how long a session token (returned for a secret) is valid")
	fs.StringVar(&c.TokenKeyFile, "auth-token-key-file", c.TokenKeyFile, "`FILE` with the HMAC key of session tokens (32 bytes or more), the same on every instance so their tokens work on all; empty: a random key, tokens valid on this instance only")
	fs.DurationVar(&c.ReloadInterval, "clients-reload-interval", c.ReloadInterval, "how often --clients and --auth-token-key-file are checked for changes")
	fs.IntVar(&c.FailBurst, "auth-fail-burst", c.FailBurst, "bad credentials one source address may present at once before its requests are answered 429 (-1: never throttle)")
	fs.DurationVar(&c.FailEvery, "auth-fail-every", c.FailEvery, "after --auth-fail-burst failures, a source address may fail once more per this long")
	fs.StringVar(&c.RateStore, "rate-limit-store", c.RateStore, "where clients' rates are kept: redis (in --redis: a client's rate holds across all instances) or local (in each instance: N instances allow N times it); default redis when --redis is set, else local")
	fs.DurationVar(&c.RateTimeout, "rate-limit-timeout", c.RateTimeout, "with --rate-limit-store redis, how long a request waits for Redis before this instance's own limiter decides (Redis is then left alone for 100ms); the instance's own stalls count: if inlet_auth_rate_limit_fallback_total grows while Redis is fine (a saturated instance), raise it")
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.HTTP && c.ClientsFile == "":
		return errors.New("--auth needs --clients FILE (make one with `inlet clients add --file FILE NAME`)")
	case c.TokenKeyFile != "" && c.ClientsFile == "":
		return errors.New("--auth-token-key-file needs --clients FILE")
	case c.TokenTTL < time.Second || c.TokenTTL > MaxTokenTTL:
		return fmt.Errorf("--auth-token-ttl %v: want 1s to %v", c.TokenTTL, MaxTokenTTL)
	case c.ReloadInterval < 10*time.Millisecond:
		return fmt.Errorf("--clients-reload-interval %v: want 10ms or more", c.ReloadInterval)
	case c.FailBurst < -1:
		return fmt.Errorf("--auth-fail-burst %d: want 1 or more, or -1 to never throttle", c.FailBurst)
	case c.FailEvery < time.Millisecond:
		return fmt.Errorf("--auth-fail-every %v: want 1ms or more", c.FailEvery)
	case c.RateStore != "" && c.RateStore != RateStoreLocal && c.RateStore != RateStoreRedis:
		return fmt.Errorf("--rate-limit-store %q: want local or redis", c.RateStore)
	case c.RateStoreKind() == RateStoreRedis && c.RedisAddr == "":
		return errors.New("--rate-limit-store redis needs --redis host:port")
	case c.RateTimeout < 100*time.Microsecond || c.RateTimeout > 10*time.Second:
		return fmt.Errorf("--rate-limit-timeout %v: want 100µs to 10s", c.RateTimeout)
	case c.RateRetry < time.Millisecond:
		return fmt.Errorf("auth: rate retry %v: want 1ms or more", c.RateRetry)
	case c.FailSources < throttleShards:
		return fmt.Errorf("auth: %d failing addresses remembered: want %d or more", c.FailSources, throttleShards)
	}
	return nil
}
