package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestAckNone(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckNone
	g := gatewaytest.Start(t, cfg)
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"event":"a"},{"event":"b"}]`), "Content-Type", "application/json")
	if r.Status != http.StatusAccepted {
		t.Fatalf("ack=none answer %s, want 202", r)
	}
	testkit.ConsumeN(t, brokers, topic, 2, time.Second)
}

// TestBrokerUnreachable: with no Kafka, /readyz says not ready, ack=kafka
// answers 503 with Retry-After at the produce timeout, and a full buffer
// answers 503 at once.
func TestBrokerUnreachable(t *testing.T) {
	t.Parallel()
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events")
	cfg.Ack = gateway.AckKafka
	cfg.Ingest.WriteTimeout = 2 * time.Second
	cfg.Ingest.RetryAfter = 3 * time.Second
	cfg.Kafka.MaxBufferedBytes = 4 << 10
	cfg.ShutdownTimeout = time.Second // nothing can be flushed anyway
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()

	if r := testkit.Do(t, "GET", base+"/readyz", nil); r.Status != 503 || !strings.Contains(string(r.Body), `"ready":false`) {
		t.Fatalf("readyz without kafka: %s", r)
	}
	if r := testkit.Do(t, "GET", base+"/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz: %s", r)
	}
	start := time.Now()
	r := testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"a"}]`), "Content-Type", "application/json")
	if r.Status != 503 || r.Header.Get("Retry-After") != "3" || !strings.Contains(string(r.Body), "not acknowledged within 2s") {
		t.Fatalf("answer %s (Retry-After %q), want 503 with Retry-After 3", r, r.Header.Get("Retry-After"))
	}
	if d := time.Since(start); d < 2*time.Second || d > 8*time.Second {
		t.Errorf("503 after %v, want about the produce timeout", d)
	}
	// The first record stays buffered (it may still be delivered); fill the
	// rest of the 4 KiB buffer, then inlet must push back at once.
	big := `[{"event":"b","props":{"s":"` + strings.Repeat("x", 5000) + `"}}]`
	start = time.Now()
	r = testkit.Do(t, "POST", base+"/v1/batch", []byte(big), "Content-Type", "application/json")
	// At once: well before the 2 s produce timeout.
	if r.Status != 503 || !strings.Contains(string(r.Body), "capacity") || time.Since(start) > time.Second {
		t.Fatalf("full buffer: %s after %v, want a 503 at once, not at the produce timeout", r, time.Since(start))
	}
	m := testkit.Do(t, "GET", base+"/metrics", nil)
	for _, want := range []string{`inlet_sink_errors_total{kind="timeout"} 1`, `inlet_sink_errors_total{kind="full"} 1`,
		`inlet_http_requests_total{code="503",handler="batch"} 2`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestSlowClients(t *testing.T) {
	brokers := testkit.Brokers(t)
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	cfg.ReadTimeout = 600 * time.Millisecond
	g := gatewaytest.Start(t, cfg)

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
	brokers := testkit.Brokers(t)
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, testkit.Unique(t, "t-")))
	base := "http://" + g.Addr()
	gatewaytest.Ready(t, g, 10*time.Second)
	if m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body); !strings.Contains(m, "inlet_events_accepted_total 0") {
		t.Fatalf("before any request the accepted counter is not 0:\n%s", m)
	}
	testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"a"},{"event":"b"},{"event":7}]`), "Content-Type", "application/json")
	// The forwarder sends the three records (two events, one dead letter).
	var rd gateway.Readiness
	testkit.WaitFor(t, 20*time.Second, "the spool drained", func() bool {
		rd = gateway.Readiness{}
		r := testkit.Do(t, "GET", base+"/readyz", nil)
		return json.Unmarshal(r.Body, &rd) == nil && rd.Spool != nil && rd.Spool.Unforwarded == 0 && rd.Spool.Forwarder == "idle"
	})
	if !rd.Ready || rd.Ack != "spool" || rd.Kafka != "ok" || rd.Error != "" || rd.Spool.OldestUnforwardedSeconds != 0 ||
		rd.Spool.Bytes == 0 || rd.Spool.Segments == 0 || rd.Spool.Failed != "" || rd.RPC != nil {
		t.Errorf("readyz after delivery: %+v %+v", rd, *rd.Spool)
	}
	m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body)
	for _, want := range []string{
		"inlet_events_accepted_total 2",
		`inlet_events_rejected_total{reason="bad_field"} 1`,
		`inlet_http_requests_total{code="200",handler="batch"} 1`,
		"inlet_spool_append_latency_seconds_count 1",
		"inlet_spool_unforwarded_records 0",
		"inlet_forwarder_records_total 3",
		`inlet_forwarder_state{state="idle"} 1`,
		`inlet_forwarder_state{state="forwarding"} 0`,
		"inlet_spool_oldest_unforwarded_seconds 0",
		// One produce per topic: the events topic's and the dead-letter
		// topic's records are forwarded apart (each topic on its own).
		`inlet_produce_latency_seconds_count{producer="events"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestSIGTERMUnderLoad runs the real binary, loads it from several
// clients, sends SIGTERM, and checks that it exits 0 and that every event
// it acknowledged is in Kafka.
func TestSIGTERMUnderLoad(t *testing.T) {
	for _, ack := range []string{gateway.AckSpool, gateway.AckKafka} {
		t.Run(ack, func(t *testing.T) { testSIGTERMUnderLoad(t, ack) })
	}
}

func testSIGTERMUnderLoad(t *testing.T, ack string) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	addr := testkit.FreeAddr(t)
	p := testkit.Start(t, nil, "serve", "--listen", addr, "--topic", topic, "--shutdown-timeout", "20s",
		"--ack", ack, "--data-dir", t.TempDir(), "--brokers", strings.Join(brokers, ","), "--linger", "20ms")
	testkit.WaitListening(t, addr, 30*time.Second)
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
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 25*time.Second); code != 0 {
		t.Fatalf("inlet exited %d after SIGTERM, want 0", code)
	}
	stopped.Store(true)
	wg.Wait()
	if !strings.Contains(p.Logs.String(), "msg=stopped") {
		t.Errorf("no clean stop in the logs:\n%s", p.Logs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 50 {
		t.Fatalf("only %d events acknowledged before SIGTERM: the load did not run", len(acked))
	}
	t.Logf("sent %d events, %d acknowledged before exit", sent.Load(), len(acked))
	recs := testkit.Consume(t, brokers, topic, 60*time.Second, func(r []testkit.Record) bool { return len(r) >= len(acked) })
	got := map[string]bool{}
	for _, r := range recs {
		got[r.Headers["inlet-event-id"]] = true
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

func waitReady(t *testing.T, base string) { testkit.WaitReady(t, base, 30*time.Second) }
