package gateway

import (
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/catalog"
)

// TestCatalogFlags: the catalog's, credentials' and RPC servers' flags are
// flags of inlet serve; the catalog's store is at --redis, or
// <data-dir>/catalog.db.
func TestCatalogFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--catalog", "--catalog-mode", "block", "--catalog-default-group", "web", "--clients", "c.json", "--auth",
		"--grpc-listen", "127.0.0.1:7001", "--thrift-listen", "127.0.0.1:7002", "--data-dir", "/var/lib/inlet"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Catalog.Enabled || cfg.Catalog.Mode != catalog.ModeBlock || cfg.Catalog.DefaultGroup != "web" ||
		cfg.Auth.ClientsFile != "c.json" || !cfg.Auth.HTTP || cfg.CatalogRPC.GRPCListen != "127.0.0.1:7001" || cfg.CatalogRPC.ThriftListen != "127.0.0.1:7002" {
		t.Fatalf("flags not bound: %+v %+v %+v", cfg.Catalog, cfg.Auth, cfg.CatalogRPC)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	cc := cfg.catalogConfig()
	if cc.Path != filepath.Join("/var/lib/inlet", "catalog.db") || cc.StoreKind() != catalog.StoreEmbedded {
		t.Errorf("store %s at %q, want embedded at <data-dir>/catalog.db", cc.StoreKind(), cc.Path)
	}
	cfg.RedisAddr = "127.0.0.1:6379"
	if cc := cfg.catalogConfig(); cc.RedisAddr != "127.0.0.1:6379" || cc.StoreKind() != catalog.StoreRedis {
		t.Errorf("with --redis: store %s at %q, want redis", cc.StoreKind(), cc.RedisAddr)
	}
}

// TestCatalogValidate: the RPC listeners and --auth need --clients; a bad
// catalog setting is refused only when the catalog is used.
func TestCatalogValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"grpc without clients", func(c *Config) { c.CatalogRPC.GRPCListen = "127.0.0.1:0" }, "--grpc-listen and --thrift-listen need --clients"},
		{"thrift without clients", func(c *Config) { c.CatalogRPC.ThriftListen = "127.0.0.1:0" }, "--grpc-listen and --thrift-listen need --clients"},
		{"auth without clients", func(c *Config) { c.Auth.HTTP = true }, "--auth needs --clients"},
		{"bad mode", func(c *Config) { c.Catalog.Enabled, c.Catalog.Mode = true, "strict" }, `--catalog-mode "strict"`},
		{"redis store without redis", func(c *Config) { c.Catalog.Enabled, c.Catalog.Store = true, catalog.StoreRedis }, "--catalog-store redis needs --redis"},
		{"bad thrift transport", func(c *Config) { c.CatalogRPC.ThriftTransport = "http" }, "--thrift-transport"},
		{"catalog off: its settings unused", func(c *Config) { c.Catalog.Mode = "strict" }, ""},
	} {
		cfg := DefaultConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want none", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
