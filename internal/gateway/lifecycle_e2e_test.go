package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fillSpool starts a gateway on dir with Kafka down and sends single-event
// requests until the spool answers 503 (full), then stops it. It returns
// how many events were acknowledged.
func fillSpool(t *testing.T, dir, topic string) int {
	t.Helper()
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, topic)
	cfg.DataDir = dir
	cfg.Spool.SegmentBytes = 16 << 10
	cfg.Spool.MaxBytes = 64 << 10
	cfg.ShutdownTimeout = 2 * time.Second
	g, err := gateway.Start(cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for i := 0; ; i++ {
		r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/track", []byte(fmt.Sprintf(`{"event":"spooled","id":"s%04d"}`, i)), "Content-Type", "application/json")
		if r.Status == 503 {
			break
		}
		if r.Status != 200 || i > 5000 {
			t.Fatalf("filling the spool, request %d: %s", i, r)
		}
		acked++
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with records in the spool: %v", err)
	}
	return acked
}

// TestStartFailureTearsDownInTime: with Kafka down and a full spool, a
// start step that fails after the forwarder started (here the listen
// address is in use) returns its error within the shutdown timeout,
// instead of waiting for a window that cannot be delivered.
func TestStartFailureTearsDownInTime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	topic := testkit.Unique(t, "t-")
	if n := fillSpool(t, dir, topic); n == 0 {
		t.Fatal("the spool took nothing")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, topic)
	cfg.DataDir = dir
	cfg.Spool.SegmentBytes = 16 << 10
	cfg.Spool.MaxBytes = 64 << 10
	cfg.Listen = busy.Addr().String()
	cfg.ShutdownTimeout = 2 * time.Second
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		g, err := gateway.Start(cfg, testkit.Logger(t))
		if g != nil {
			err = errors.Join(err, errors.New("Start returned a gateway"))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "listening on "+cfg.Listen) {
			t.Fatalf("Start: %v, want the listen error alone", err)
		}
		if took := time.Since(start); took > cfg.ShutdownTimeout+3*time.Second {
			t.Fatalf("Start failed after %v, want within the shutdown timeout (%v)", took, cfg.ShutdownTimeout)
		}
	case <-time.After(cfg.ShutdownTimeout + 15*time.Second):
		t.Fatalf("Start has not returned %v after it began (shutdown timeout %v): it hangs", time.Since(start), cfg.ShutdownTimeout)
	}
}

// TestSIGTERMInOutageKeepsTheSpool: with --ack spool and Kafka down, SIGTERM
// ends inlet with exit status 0 (every acknowledged event is durable in
// the spool), logging how many records wait; the next start from the same
// data directory delivers exactly those.
func TestSIGTERMInOutageKeepsTheSpool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	t.Parallel()
	dir, topic, addr := t.TempDir(), testkit.Unique(t, "t-"), testkit.FreeAddr(t)
	p := testkit.Start(t, nil, "serve", "--listen", addr, "--brokers", testkit.FreeAddr(t), "--topic", topic,
		"--data-dir", dir, "--shutdown-timeout", "3s", "--compression", "none")
	testkit.WaitListening(t, addr, 20*time.Second)
	if r := testkit.Do(t, "GET", "http://"+addr+"/readyz", nil); r.Status != 200 {
		t.Fatalf("readyz with Kafka down and ack=spool: %s, want 200 (the spool takes events)", r)
	}
	const batches = 10
	for i := range batches {
		r := testkit.Do(t, "POST", "http://"+addr+"/v1/batch", testkit.Batch(5, fmt.Sprintf("b%d-", i), testkit.JSONArray), "Content-Type", "application/json")
		if r.Status != 200 {
			t.Fatalf("batch %d with Kafka down: %s", i, r)
		}
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("inlet exited %d after SIGTERM in an outage with everything in the spool, want 0", code)
	}
	if logs := p.Logs.String(); !strings.Contains(logs, "still in the spool") || !strings.Contains(logs, fmt.Sprintf("records=%d", batches*5)) {
		t.Errorf("the log does not say %d records wait in the spool:\n%s", batches*5, logs)
	}

	brokers := testkit.Brokers(t)
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.DataDir = dir
	gatewaytest.Start(t, cfg)
	recs := testkit.ConsumeN(t, brokers, topic, batches*5, 2*time.Second)
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.Headers["inlet-event-id"]] = true
	}
	if len(ids) != batches*5 {
		t.Fatalf("%d distinct events delivered, want %d", len(ids), batches*5)
	}
}

// TestHTTP2Tuning: the x/net HTTP/2 server settings take effect (inlet
// sets them for its write scheduler, which no setting reveals; the
// advertised stream limit does). It fails when net/http stops honouring
// x/net's ConfigureServer, as it will from Go 1.27: then recheck the
// scheduler (BENCHMARKS.md, request-reply).
func TestHTTP2Tuning(t *testing.T) {
	t.Parallel()
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events")
	cfg.Ack = gateway.AckNone
	cfg.HTTP2MaxStreams = 137 // neither net/http's default (250) nor x/net's (1000)
	cfg.ShutdownTimeout = time.Second
	g := gatewaytest.Start(t, cfg)
	c, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	fr = http2.NewFramer(c, c)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		v, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok || v != 137 {
			t.Fatalf("server advertises MAX_CONCURRENT_STREAMS %d (set: %v), want 137: x/net's HTTP/2 server settings no longer take effect", v, ok)
		}
		return
	}
}
