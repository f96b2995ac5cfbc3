package catalog

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestConfigFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--catalog", "--catalog-mode", "block", "--catalog-store", "embedded",
		"--catalog-cache-size", "7", "--catalog-cache-ttl", "3s", "--catalog-absent-ttl", "1s", "--catalog-timeout", "200ms",
		"--catalog-lock-ttl", "4s", "--catalog-lock-wait", "6s", "--catalog-default-group", "web", "--catalog-redis-prefix", "x:"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Enabled || cfg.Mode != ModeBlock || cfg.Store != StoreEmbedded || cfg.CacheSize != 7 || cfg.CacheTTL != 3*time.Second ||
		cfg.AbsentTTL != time.Second || cfg.Timeout != 200*time.Millisecond || cfg.LockTTL != 4*time.Second ||
		cfg.LockWait != 6*time.Second || cfg.DefaultGroup != "web" || cfg.RedisPrefix != "x:" {
		t.Fatalf("parsed %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--catalog-mode", "strict"}); err == nil {
		t.Fatal("--catalog-mode strict was accepted")
	}
	for _, tc := range []struct {
		mod func(*Config)
		msg string
	}{
		{func(c *Config) { c.Mode = "x" }, "--catalog-mode"},
		{func(c *Config) { c.Store = "pebble" }, "--catalog-store"},
		{func(c *Config) { c.CacheSize = 0 }, "--catalog-cache-size"},
		{func(c *Config) { c.CacheTTL = 0 }, "--catalog-cache-ttl"},
		{func(c *Config) { c.Timeout = 0 }, "--catalog-timeout"},
		{func(c *Config) { c.LockTTL = time.Millisecond }, "--catalog-lock-ttl"},
		{func(c *Config) { c.LockWait = -1 }, "--catalog-lock-wait"},
		{func(c *Config) { c.DefaultGroup = "" }, "--catalog-default-group"},
		{func(c *Config) { c.RedisPrefix = "" }, "--catalog-redis-prefix"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Validate: %v, want an error naming %s", err, tc.msg)
		}
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Path = filepath.Join(t.TempDir(), "catalog.db")
	if cfg.StoreKind() != StoreEmbedded {
		t.Fatalf("no --redis: store %s, want embedded", cfg.StoreKind())
	}
	c, err := Open(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Store().(*BoltStore); !ok {
		t.Fatalf("store %T, want *BoltStore", c.Store())
	}
	must(c.Lookup(ctx, Key{"o", "a"}))

	// A second process (here: a second open) gets a clear error, not a hang.
	start := time.Now()
	_, err = Open(cfg, testkit.Logger(t), nil)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "in use by another inlet process: "+cfg.Path) {
		t.Fatalf("second open: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("second open took %v", took)
	}
	c.Close()
	// Reopened, the data is there.
	c = must(Open(cfg, testkit.Logger(t), nil))
	if e := must(c.Get(ctx, Key{"o", "a"})); e.Code != 1 {
		t.Fatalf("after reopening: %+v", e)
	}
	c.Close()

	cfg.Store = StoreRedis
	if _, err := Open(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("redis store without an address: %v", err)
	}
	cfg.Store = ""
	cfg.Path = ""
	if _, err := Open(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("embedded store without a path: %v", err)
	}
	cfg.RedisAddr = testkit.Redis(t)
	cfg.RedisPrefix = testkit.Unique(t, "inlet-test:catalog:") + ":"
	t.Cleanup(func() { cleanRedis(t, cfg.RedisAddr, cfg.RedisPrefix) })
	if cfg.StoreKind() != StoreRedis {
		t.Fatalf("with --redis: store %s, want redis", cfg.StoreKind())
	}
	c = must(Open(cfg, testkit.Logger(t), nil))
	defer c.Close()
	if _, ok := c.Store().(*RedisStore); !ok {
		t.Fatalf("store %T, want *RedisStore", c.Store())
	}
	must(c.Lookup(ctx, Key{"o", "a"}))
}

// TestOpenBoltMakesItsDirectory: `inlet catalog serve --data-dir new/dir`
// works on a fresh machine.
func TestOpenBoltMakesItsDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not", "yet", "catalog.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
