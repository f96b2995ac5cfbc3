package catalogrpc

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// benchServer starts the front ends on the real catalog (embedded store)
// and real credentials, with metrics registered as in inlet, and returns a
// loadclient.Catalog target of proto that has looked its keys up once (so the
// benchmark measures cached hits with session tokens, as `inlet bench
// grpc|thrift` does).
func benchServer(b *testing.B, proto string) *loadclient.Catalog {
	b.Helper()
	dir := b.TempDir()
	clients := filepath.Join(dir, "clients.json")
	secret, err := auth.AddClient(clients, auth.Client{ID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	acfg := auth.DefaultConfig()
	acfg.ClientsFile = clients
	au, err := auth.Open(acfg, log, reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { au.Close() })
	ccfg := catalog.DefaultConfig()
	ccfg.Store, ccfg.Path = catalog.StoreEmbedded, filepath.Join(dir, "catalog.db")
	cat, err := catalog.Open(ccfg, log, reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cat.Close() })
	s, err := New(cat, au, DefaultConfig(), log, reg)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if proto == loadclient.ProtoGRPC {
		go s.ServeGRPC(l)
	} else {
		go s.ServeThrift(l)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	cfg := loadclient.DefaultCatalogConfig()
	cfg.Proto, cfg.Addr, cfg.Connections = proto, l.Addr().String(), 4
	cfg.ClientID, cfg.Secret, cfg.Keys = "bench", secret, 100
	c, err := loadclient.NewCatalog(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Prefill(ctx, 4); err != nil {
		b.Fatal(err)
	}
	return c
}

// benchDataType runs cached-hit DataType calls, several at a time, client
// and server in this process: ns/op is the wall time per call of both
// sides together, cpu-ns/op their CPU time, allocs/op both sides'
// allocations.
func benchDataType(b *testing.B, proto string) {
	c := benchServer(b, proto)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	cpu0 := testkit.CPUTime(b)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if r := c.Do(ctx); !r.OK {
				b.Errorf("lookup: %s %v", r.Status, r.Err)
				return
			}
		}
	})
	// CPU time rather than wall time per call is what a shared, busy
	// machine measures steadily.
	b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkGRPCDataType is inf.Data/DataType over gRPC on loopback.
func BenchmarkGRPCDataType(b *testing.B) { benchDataType(b, loadclient.ProtoGRPC) }

// BenchmarkThriftDataType is inf.Data.DataType over Thrift (binary,
// framed) on loopback.
func BenchmarkThriftDataType(b *testing.B) { benchDataType(b, loadclient.ProtoThrift) }
