package catalog

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Store kinds of Config.Store.
const (
	StoreRedis    = "redis"
	StoreEmbedded = "embedded"
)

// Config configures the catalog. RedisAddr and Path are set by the caller
// (from --redis and --data-dir); the rest are flags (RegisterFlags).
type Config struct {
	// Enabled (--catalog): ingest looks events up in the catalog.
	Enabled bool
	// Mode (--catalog-mode): open, warn or block.
	Mode Mode
	// Store (--catalog-store): redis or embedded; "" chooses redis when
	// RedisAddr is set, else embedded.
	Store string
	// RedisAddr is the Redis host:port of the redis store.
	RedisAddr string
	// RedisPrefix (--catalog-redis-prefix) starts every Redis key the
	// catalog uses, so several catalogs may share one Redis.
	RedisPrefix string
	// Path is the embedded store's file (<data-dir>/catalog.db).
	Path string
	// CacheSize (--catalog-cache-size) bounds the entries cached in memory.
	CacheSize int
	// CacheTTL (--catalog-cache-ttl) is how long a cached entry is used
	// without asking the store again (changes seen through the store's
	// watch drop it sooner).
	CacheTTL time.Duration
	// AbsentTTL (--catalog-absent-ttl) is how long a key the store does not
	// have is remembered as absent (modes warn and block), so a flood of
	// unplanned events does not reach the store.
	AbsentTTL time.Duration
	// Timeout (--catalog-timeout) bounds one store round trip of a lookup:
	// past it the lookup fails with ErrUnavailable.
	Timeout time.Duration
	// LockTTL (--catalog-lock-ttl) is how long the first-sight fill lock
	// lives (redis store): a holder that dies holds it this long at most.
	LockTTL time.Duration
	// LockWait (--catalog-lock-wait) is how long a fill waits for another
	// holder's lock before it fails with ErrUnavailable.
	LockWait time.Duration
	// FillConcurrency bounds the fills one Resolve runs at once.
	FillConcurrency int
	// DefaultGroup (--catalog-default-group) is the group of events that
	// name none and whose client has none.
	DefaultGroup string
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		Mode:            ModeOpen,
		RedisPrefix:     "inlet:catalog:",
		CacheSize:       100_000,
		CacheTTL:        time.Minute,
		AbsentTTL:       2 * time.Second,
		Timeout:         500 * time.Millisecond,
		LockTTL:         5 * time.Second,
		LockWait:        10 * time.Second,
		FillConcurrency: 8,
		DefaultGroup:    "default",
	}
}

// RegisterFlags binds c's settings (all but RedisAddr and Path) to flags of
// fs; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "catalog", c.Enabled, "look every event up in the event catalog: its code, and the tracking plan's checks (--catalog-mode)")
	fs.Func("catalog-mode", "what to do with event types the catalog does not plan: open (assign a code on first sight), warn (pass with an inlet-violations header), block (reject and dead-letter) (default "+string(c.Mode)+")", func(s string) error {
		m := Mode(s)
		if m != ModeOpen && m != ModeWarn && m != ModeBlock {
			return fmt.Errorf("want open, warn or block")
		}
		c.Mode = m
		return nil
	})
	fs.StringVar(&c.Store, "catalog-store", c.Store, "where the catalog lives: redis (shared by instances, at --redis) or embedded (<data-dir>/catalog.db); default redis when --redis is set, else embedded")
	fs.StringVar(&c.RedisPrefix, "catalog-redis-prefix", c.RedisPrefix, "prefix of every Redis key of the catalog")
	fs.IntVar(&c.CacheSize, "catalog-cache-size", c.CacheSize, "most catalog entries cached in memory")
	fs.DurationVar(&c.CacheTTL, "catalog-cache-ttl", c.CacheTTL, "how long a cached catalog entry is used before the store is asked again")
	fs.DurationVar(&c.AbsentTTL, "catalog-absent-ttl", c.AbsentTTL, "how long an event type the catalog lacks is remembered as absent (modes warn and block)")
	fs.DurationVar(&c.Timeout, "catalog-timeout", c.Timeout, "how long a catalog lookup waits for the store before it fails as unavailable")
	fs.DurationVar(&c.LockTTL, "catalog-lock-ttl", c.LockTTL, "lifetime of the lock under which a new event type gets its code (redis store)")
	fs.DurationVar(&c.LockWait, "catalog-lock-wait", c.LockWait, "how long a first-sight lookup waits for another instance's fill lock")
	fs.StringVar(&c.DefaultGroup, "catalog-default-group", c.DefaultGroup, "catalog group of events that name none and whose client has none")
}

// Validate reports the first invalid setting. Where the store lives
// (RedisAddr, Path) is checked by Open.
func (c Config) Validate() error {
	switch {
	case c.Mode != ModeOpen && c.Mode != ModeWarn && c.Mode != ModeBlock:
		return fmt.Errorf("catalog: --catalog-mode %q: want open, warn or block", c.Mode)
	case c.Store != "" && c.Store != StoreRedis && c.Store != StoreEmbedded:
		return fmt.Errorf("catalog: --catalog-store %q: want redis or embedded", c.Store)
	case c.RedisPrefix == "":
		return errors.New("catalog: --catalog-redis-prefix must not be empty")
	case c.CacheSize <= 0:
		return fmt.Errorf("catalog: --catalog-cache-size %d: must be positive", c.CacheSize)
	case c.CacheTTL <= 0 || c.AbsentTTL <= 0:
		return errors.New("catalog: --catalog-cache-ttl and --catalog-absent-ttl must be positive")
	case c.Timeout <= 0:
		return errors.New("catalog: --catalog-timeout must be positive")
	case c.LockTTL < 10*time.Millisecond:
		return fmt.Errorf("catalog: --catalog-lock-ttl %v: want at least 10ms", c.LockTTL)
	case c.LockWait < 0:
		return errors.New("catalog: --catalog-lock-wait must not be negative")
	case c.FillConcurrency <= 0:
		return errors.New("catalog: fill concurrency must be positive")
	}
	if err := validateName("--catalog-default-group", c.DefaultGroup); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	return nil
}

// StoreKind is the store Open uses: c.Store, or redis when RedisAddr is set,
// else embedded.
func (c Config) StoreKind() string {
	if c.Store != "" {
		return c.Store
	}
	if c.RedisAddr != "" {
		return StoreRedis
	}
	return StoreEmbedded
}

// Open validates cfg, opens the store it names (StoreKind) and returns a
// Catalog on it. reg may be nil (metrics not registered).
func Open(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Catalog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var (
		st  Store
		err error
	)
	switch cfg.StoreKind() {
	case StoreRedis:
		if cfg.RedisAddr == "" {
			return nil, errors.New("catalog: --catalog-store redis needs --redis host:port")
		}
		st, err = NewRedisStore(RedisOptions{
			Addr:     cfg.RedisAddr,
			Prefix:   cfg.RedisPrefix,
			Timeout:  cfg.Timeout,
			LockTTL:  cfg.LockTTL,
			LockWait: cfg.LockWait,
		})
	default:
		if cfg.Path == "" {
			return nil, errors.New("catalog: the embedded store needs a path (--data-dir)")
		}
		st, err = OpenBolt(cfg.Path)
	}
	if err != nil {
		return nil, err
	}
	if rs, ok := st.(*RedisStore); ok {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		err := rs.rdb.Ping(ctx).Err()
		cancel()
		if err != nil && log != nil {
			log.Warn("catalog: redis does not answer yet; lookups of new event types fail as unavailable until it does",
				"redis", cfg.RedisAddr, "err", err)
		}
	}
	return New(st, cfg, log, reg), nil
}
