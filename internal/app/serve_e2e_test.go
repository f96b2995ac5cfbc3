package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestAckNone(t *testing.T) {
	brokers := testBrokers(t)
	topic := uniqueTopic(t)
	cfg := testConfig(brokers, topic)
	cfg.Ack = AckNone
	g := startGateway(t, cfg)
	r := do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"event":"a"},{"event":"b"}]`), "Content-Type", "application/json")
	if r.status != http.StatusAccepted {
		t.Fatalf("ack=none answer %s, want 202", r)
	}
	consumeN(t, brokers, topic, 2)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestBrokerUnreachable: with no Kafka, /readyz says not ready, ack=kafka
// answers 503 with Retry-After at the produce timeout, and a full buffer
// answers 503 at once.
func TestBrokerUnreachable(t *testing.T) {
	t.Parallel()
	cfg := testConfig([]string{freeAddr(t)}, "events")
	cfg.Ack = AckKafka
	cfg.Ingest.WriteTimeout = 2 * time.Second
	cfg.Ingest.RetryAfter = 3 * time.Second
	cfg.Kafka.MaxBufferedBytes = 4 << 10
	cfg.ShutdownTimeout = time.Second // nothing can be flushed anyway
	g := startGateway(t, cfg)
	base := "http://" + g.Addr()

	if r := do(t, "GET", base+"/readyz", nil); r.status != 503 || !strings.Contains(string(r.body), `"ready":false`) {
		t.Fatalf("readyz without kafka: %s", r)
	}
	if r := do(t, "GET", base+"/healthz", nil); r.status != 200 {
		t.Fatalf("healthz: %s", r)
	}
	start := time.Now()
	r := do(t, "POST", base+"/v1/batch", []byte(`[{"event":"a"}]`), "Content-Type", "application/json")
	if r.status != 503 || r.header.Get("Retry-After") != "3" || !strings.Contains(string(r.body), "not acknowledged within 2s") {
		t.Fatalf("answer %s (Retry-After %q), want 503 with Retry-After 3", r, r.header.Get("Retry-After"))
	}
	if d := time.Since(start); d < 2*time.Second || d > 8*time.Second {
		t.Errorf("503 after %v, want about the produce timeout", d)
	}
	// The first record stays buffered (it may still be delivered); fill the
	// rest of the 4 KiB buffer, then inlet must push back at once.
	big := `[{"event":"b","props":{"s":"` + strings.Repeat("x", 5000) + `"}}]`
	start = time.Now()
	r = do(t, "POST", base+"/v1/batch", []byte(big), "Content-Type", "application/json")
	// At once: well before the 2 s produce timeout.
	if r.status != 503 || !strings.Contains(string(r.body), "capacity") || time.Since(start) > time.Second {
		t.Fatalf("full buffer: %s after %v, want a 503 at once, not at the produce timeout", r, time.Since(start))
	}
	m := do(t, "GET", base+"/metrics", nil)
	for _, want := range []string{`inlet_sink_errors_total{kind="timeout"} 1`, `inlet_sink_errors_total{kind="full"} 1`,
		`inlet_http_requests_total{code="503",handler="batch"} 2`} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestClientIP(t *testing.T) {
	brokers := testBrokers(t)
	topic := uniqueTopic(t)
	trusting := testConfig(brokers, topic)
	trusting.Ingest.TrustedProxies, _ = parseProxiesT("127.0.0.0/8, 10.0.0.1")
	g1 := startGateway(t, trusting)
	untrusting := testConfig(brokers, topic) // trusts nobody
	untrusting.DataDir = t.TempDir()
	g2 := startGateway(t, untrusting)

	xff := []string{"Content-Type", "application/json", "X-Forwarded-For", "198.51.100.9, 203.0.113.7, 10.0.0.1"}
	do(t, "POST", "http://"+g1.Addr()+"/v1/track", []byte(`{"event":"trusted"}`), xff...)
	do(t, "POST", "http://"+g2.Addr()+"/v1/track", []byte(`{"event":"untrusted"}`), xff...)
	recs := byName(consumeN(t, brokers, topic, 2))
	if ip := recs["trusted"].fields["ip"]; ip != "203.0.113.7" {
		t.Errorf("behind a trusted proxy: ip %v, want the rightmost untrusted hop 203.0.113.7", ip)
	}
	if ip := recs["untrusted"].fields["ip"]; ip != "127.0.0.1" {
		t.Errorf("X-Forwarded-For from an untrusted peer was believed: ip %v", ip)
	}
}

func TestSlowClients(t *testing.T) {
	brokers := testBrokers(t)
	cfg := testConfig(brokers, uniqueTopic(t))
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	cfg.ReadTimeout = 600 * time.Millisecond
	g := startGateway(t, cfg)

	t.Run("headers", func(t *testing.T) {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\n") // and never the end of the headers
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(c)
		if err != nil || time.Since(start) > 3*time.Second {
			t.Fatalf("connection not closed after the read-header timeout: %v after %v", err, time.Since(start))
		}
	})
	t.Run("body", func(t *testing.T) {
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"event\":")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "read timeout") {
			t.Fatalf("stalled body: %d %s, want 408", resp.StatusCode, b)
		}
	})
}

func TestMetricsAndReady(t *testing.T) {
	brokers := testBrokers(t)
	g := startGateway(t, testConfig(brokers, uniqueTopic(t)))
	base := "http://" + g.Addr()
	waitFor(t, 10*time.Second, "ready", func() bool { return do(t, "GET", base+"/readyz", nil).status == 200 })
	do(t, "POST", base+"/v1/batch", []byte(`[{"event":"a"},{"event":"b"},{"event":7}]`), "Content-Type", "application/json")
	// The forwarder sends the three records (two events, one dead letter).
	waitFor(t, 20*time.Second, "the spool drained", func() bool {
		return strings.Contains(string(do(t, "GET", base+"/readyz", nil).body), `"unforwarded_records":0`)
	})
	rd := string(do(t, "GET", base+"/readyz", nil).body)
	for _, want := range []string{`"ready":true`, `"ack":"spool"`, `"kafka":"ok"`, `"forwarder":"idle"`, `"oldest_unforwarded_seconds":0`} {
		if !strings.Contains(rd, want) {
			t.Errorf("readyz %s lacks %s", rd, want)
		}
	}
	m := string(do(t, "GET", base+"/metrics", nil).body)
	for _, want := range []string{
		"inlet_events_accepted_total 2",
		`inlet_events_rejected_total{reason="bad_field"} 1`,
		`inlet_http_requests_total{code="200",handler="batch"} 1`,
		"inlet_spool_append_latency_seconds_count 1",
		"inlet_spool_unforwarded_records 0",
		"inlet_forwarder_records_total 3",
		`inlet_forwarder_state{state="idle"} 1`,
		"inlet_spool_oldest_unforwarded_seconds 0",
		`inlet_produce_latency_seconds_count{producer="events"} 1`,
		`inlet_producer_buffered_bytes{producer="events"} 0`,
		"inlet_kafka_broker_errors_total",
		"go_goroutines",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting after %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSIGTERMUnderLoad runs the real binary, loads it from several
// clients, sends SIGTERM, and checks that it exits 0 and that every event
// it acknowledged is in Kafka.
func TestSIGTERMUnderLoad(t *testing.T) {
	for _, ack := range []string{AckSpool, AckKafka} {
		t.Run(ack, func(t *testing.T) { testSIGTERMUnderLoad(t, ack) })
	}
}

func testSIGTERMUnderLoad(t *testing.T, ack string) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	brokers := testBrokers(t)
	topic := uniqueTopic(t)
	bin := buildInlet(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--topic", topic, "--shutdown-timeout", "20s",
		"--ack", ack, "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "INLET_BROKERS="+strings.Join(brokers, ","), "INLET_LINGER=20ms")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitReady(t, "http://"+addr)

	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		sent    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 30 * time.Second}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stopped.Load() && i < 100000; i++ {
				ids := make([]string, 5)
				var b strings.Builder
				b.WriteString("[")
				for j := range ids {
					ids[j] = fmt.Sprintf("w%d-%d-%d", w, i, j)
					if j > 0 {
						b.WriteString(",")
					}
					fmt.Fprintf(&b, `{"event":"load","id":%q}`, ids[j])
				}
				b.WriteString("]")
				sent.Add(5)
				resp, err := client.Post("http://"+addr+"/v1/batch", "application/json", strings.NewReader(b.String()))
				if err != nil {
					return // the server is gone
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mu.Lock()
					for _, id := range ids {
						acked[id] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("inlet exited with %v after SIGTERM; logs:\n%s", err, logs.String())
		}
	case <-time.After(25 * time.Second):
		t.Fatalf("inlet did not exit within the shutdown timeout; logs:\n%s", logs.String())
	}
	stopped.Store(true)
	wg.Wait()
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Errorf("no clean stop in the logs:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 50 {
		t.Fatalf("only %d events acknowledged before SIGTERM: the load did not run", len(acked))
	}
	t.Logf("sent %d events, %d acknowledged before exit", sent.Load(), len(acked))
	recs := consume(t, brokers, topic, 60*time.Second, func(r []record) bool { return len(r) >= len(acked) })
	got := map[string]bool{}
	for _, r := range recs {
		got[r.headers["inlet-event-id"]] = true
	}
	lost := 0
	for id := range acked {
		if !got[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged events are not in Kafka", lost, len(acked))
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready", base)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestInflightBudget: request bodies held at once are bounded; past the
// budget inlet answers 503 with Retry-After instead of growing.
func TestInflightBudget(t *testing.T) {
	brokers := testBrokers(t)
	topic := uniqueTopic(t)
	cfg := testConfig(brokers, topic)
	cfg.Ingest.MaxBodyBytes = 64 << 10
	cfg.Ingest.MaxDecompressedBytes = 64 << 10
	cfg.Ingest.MaxInflightBytes = 100 << 10 // room for one 64 KiB body, not two
	g := startGateway(t, cfg)

	// A client that sends 60 KiB of its body and stalls holds 60 KiB.
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 62<<10)
	c.Write(append([]byte(`[{"event":"slow","props":{"s":"`), bytes.Repeat([]byte("a"), 60<<10)...))
	time.Sleep(300 * time.Millisecond)

	ev := `{"event":"second","props":{"s":"` + strings.Repeat("b", 10<<10) + `"}}`
	body := []byte("[" + strings.Repeat(ev+",", 4) + ev + "]") // 50 KiB in five events
	r := do(t, "POST", "http://"+g.Addr()+"/v1/batch", body, "Content-Type", "application/json")
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "too many request bodies") {
		t.Fatalf("second large body while the first is held: %s, want 503 with Retry-After", r)
	}
	// Small requests still pass, and once the slow client goes, so do large ones.
	if r := do(t, "POST", "http://"+g.Addr()+"/v1/track", []byte(`{"event":"small"}`), "Content-Type", "application/json"); r.status != 200 {
		t.Fatalf("small request under pressure: %s", r)
	}
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if r := do(t, "POST", "http://"+g.Addr()+"/v1/batch", body, "Content-Type", "application/json"); r.status != 200 {
		t.Fatalf("large body after the budget was released: %s", r)
	}
}

// TestTailAndKcat: the five events of a batch are shown by `inlet tail` and
// by kcat, a librdkafka client, enriched.
func TestTailAndKcat(t *testing.T) {
	brokers := testBrokers(t)
	topic := uniqueTopic(t)
	g := startGateway(t, testConfig(brokers, topic))
	r := do(t, "POST", "http://"+g.Addr()+"/v1/batch",
		[]byte(`[{"event":"e1","uid":"u1"},{"event":"e2"},{"event":"e3"},{"event":"e4"},{"event":"e5","props":{"k":"v"}}]`),
		"Content-Type", "application/json")
	if r.status != 200 || !strings.Contains(string(r.body), `"accepted":5`) {
		t.Fatalf("batch: %s", r)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Tail(ctx, TailConfig{Brokers: brokers, Topic: topic, From: "beginning", N: 5, Format: "json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("tail printed %d lines, want 5:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"received_at":`) || !strings.Contains(l, `"ip":"127.0.0.1"`) || !strings.Contains(l, `"inlet-event-id":`) {
			t.Errorf("tail line lacks enrichment or headers: %s", l)
		}
	}

	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" {
			t.Fatal("kcat is not installed; scripts/kafka.sh installs it")
		}
		t.Skip("kcat not installed (make test installs it)")
	}
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", "%k|%h|%s\n")
	kout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, kout)
	}
	klines := strings.Split(strings.TrimSpace(string(kout)), "\n")
	if len(klines) != 5 {
		t.Fatalf("kcat printed %d records, want 5:\n%s", len(klines), kout)
	}
	names := map[string]bool{}
	for _, l := range klines {
		parts := strings.SplitN(l, "|", 3)
		if len(parts) != 3 || !strings.Contains(parts[1], "inlet-event-name=") || !strings.Contains(parts[2], `"received_at":`) {
			t.Errorf("kcat record without headers or enrichment: %s", l)
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(parts[2]), &v); err != nil {
			t.Errorf("kcat value is not JSON: %s", parts[2])
		}
		names[fmt.Sprint(v["event"])] = true
	}
	if len(names) != 5 {
		t.Errorf("kcat saw events %v, want e1..e5", names)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildInlet builds the inlet binary once per test run.
func buildInlet(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "inlet-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "inlet")
		if out, err := exec.Command("go", "build", "-o", builtBin, "../../cmd/inlet").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}
