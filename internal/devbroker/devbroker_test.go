package devbroker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a broker on a free loopback port with its data under dir
// (in memory if empty) and closes it at the end of the test.
func start(tb testing.TB, dir string) (*devbroker.Broker, devbroker.Config) {
	tb.Helper()
	cfg := devbroker.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.SyncWrites = "127.0.0.1:0", dir, false
	b, err := devbroker.Start(cfg, testkit.Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	return b, cfg
}

// produce writes n records v<from>..v<from+n-1> to topic.
func produce(tb testing.TB, addr, topic string, from, n int) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", from+i), Value: fmt.Appendf(nil, "v%d", from+i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
}

// values is the set of values of recs, failing on a duplicate.
func values(tb testing.TB, recs []testkit.Record) map[string]bool {
	tb.Helper()
	m := map[string]bool{}
	for _, r := range recs {
		if m[string(r.Value)] {
			tb.Fatalf("%s twice", r.Value)
		}
		m[string(r.Value)] = true
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	b, _ := start(t, "")
	host, port, err := net.SplitHostPort(b.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr %q: want 127.0.0.1 and the port picked", b.Addr())
	}
	topic := testkit.Unique(t, "dev-")
	produce(t, b.Addr(), topic, 0, 30)
	got := values(t, testkit.ConsumeN(t, []string{b.Addr()}, topic, 30, 200*time.Millisecond))
	for i := range 30 {
		if !got[fmt.Sprintf("v%d", i)] {
			t.Errorf("v%d not consumed", i)
		}
	}
}

// TestPersisted: topics and records survive Close and Start on the same
// port, and the offsets go on from where they were.
func TestPersisted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, cfg := start(t, dir)
	topic := testkit.Unique(t, "persist-")
	produce(t, b.Addr(), topic, 0, 20)
	b.Close()
	if _, err := os.Stat(filepath.Join(dir, "broker")); err != nil {
		t.Fatalf("no data under the data dir: %v", err)
	}

	cfg.Listen = b.Addr()
	var err error
	testkit.WaitFor(t, 10*time.Second, "the broker starting again on "+cfg.Listen, func() bool {
		b, err = devbroker.Start(cfg, testkit.Logger(t))
		return err == nil
	})
	t.Cleanup(b.Close)
	if b.Addr() != cfg.Listen {
		t.Fatalf("started again on %s, want %s", b.Addr(), cfg.Listen)
	}
	produce(t, b.Addr(), topic, 20, 10)
	recs := testkit.ConsumeN(t, []string{b.Addr()}, topic, 30, 200*time.Millisecond)
	got := values(t, recs)
	for i := range 30 {
		if !got[fmt.Sprintf("v%d", i)] {
			t.Errorf("v%d not consumed after the restart", i)
		}
	}
	next := map[int32]int64{} // offsets run on per partition, no gaps, no reuse
	for _, r := range recs {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*devbroker.Config)
		want string
	}{
		{"default", func(*devbroker.Config) {}, ""},
		{"any port", func(c *devbroker.Config) { c.Listen = "127.0.0.1:0" }, ""},
		{"no port", func(c *devbroker.Config) { c.Listen = "127.0.0.1" }, `listen address "127.0.0.1"`},
		{"empty listen", func(c *devbroker.Config) { c.Listen = "" }, `listen address ""`},
		{"no partitions", func(c *devbroker.Config) { c.Partitions = 0 }, "partitions must be at least 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := devbroker.DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
			if tc.want != "" {
				if b, err := devbroker.Start(c, testkit.Logger(t)); err == nil {
					b.Close()
					t.Fatal("Start took an invalid config")
				}
			}
		})
	}
}

// TestStartFails: a failed Start reports why and leaves nothing behind,
// neither the listener nor a goroutine (TestMain's goleak).
func TestStartFails(t *testing.T) {
	t.Parallel()
	b, _ := start(t, "")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name          string
		listen, dir   string
		want          string
		listenerFreed bool
	}{
		{"port in use", b.Addr(), "", "listening on " + b.Addr(), false},
		{"data dir is a file", "127.0.0.1:0", file, "devbroker: starting", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := devbroker.DefaultConfig()
			cfg.Listen, cfg.DataDir = tc.listen, tc.dir
			if tc.listenerFreed { // a fixed free port, to check it is free again
				cfg.Listen = testkit.FreeAddr(t)
			}
			nb, err := devbroker.Start(cfg, testkit.Logger(t))
			if err == nil {
				nb.Close()
				t.Fatal("Start: no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want %q", err, tc.want)
			}
			if tc.listenerFreed {
				ln, err := net.Listen("tcp", cfg.Listen)
				if err != nil {
					t.Fatalf("the failed Start kept %s: %v", cfg.Listen, err)
				}
				ln.Close()
			}
		})
	}
}

// TestClose: Close may be called again, refuses connections after, and
// stops every goroutine the broker started.
func TestClose(t *testing.T) {
	// Not parallel: goleak looks at every goroutine of the process.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := devbroker.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.SyncWrites = "127.0.0.1:0", t.TempDir(), true
	b, err := devbroker.Start(cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, b.Addr(), testkit.Unique(t, "close-"), 0, 5)
	b.Close()
	b.Close()
	if c, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still takes connections after Close", b.Addr())
	}
}
