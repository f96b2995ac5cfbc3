package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// classGateway starts a gateway with request-reply for service, serving
// every request on net/http.
func classGateway(t *testing.T, brokers []string, prefix, service string, edit func(*gateway.Config)) *gateway.Gateway {
	t.Helper()
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.RPC.Services = []string{service}
	cfg.RPC.TopicPrefix = prefix
	if edit != nil {
		edit(&cfg)
	}
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	return g
}

// ingestOK posts n events of about size bytes each to base's /v1/batch
// and fails the test unless it is answered 200.
func ingestOK(t *testing.T, base string, n, size int, what string) {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"event":"e","props":{"p":"%s"}}`, strings.Repeat("x", size))
	}
	b.WriteByte(']')
	if r := testkit.Do(t, "POST", base+"/v1/batch", b.Bytes(), "Content-Type", "application/json"); r.Status != 200 {
		t.Errorf("ingest %s: %s, want 200", what, r)
	}
}

// stall opens n connections to addr, each sending head (a request line and
// headers, Content-Length announcing more than is sent) and then sent
// bytes of its body, and no more. It returns the count of connections
// answered so far (a refusal), read in the background. The connections are
// closed at the end of the test.
func stall(t *testing.T, addr, head string, n, sent int) *atomic.Int64 {
	t.Helper()
	var answered atomic.Int64
	body := bytes.Repeat([]byte("x"), sent)
	var wg sync.WaitGroup
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			if _, err := io.WriteString(c, head+"\r\n\r\n"); err != nil {
				return
			}
			_, _ = c.Write(body) // the server may refuse it on its way
			go func() {
				if _, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					answered.Add(1)
				}
			}()
		})
	}
	wg.Wait()
	return &answered
}

// TestStalledRPCUploadsLeaveIngest: 400 request-reply uploads that stall
// mid-body hold request-reply's share of the body budget, not ingest's:
// the calls past it get 503, ingest still answers 200. So do 1,000 stalled
// bodies on a path that does not exist. Before, the calls' bodies counted
// against ingest's budget, and ingest answered 503 ("inlet holds too many
// request bodies in memory").
func TestStalledRPCUploadsLeaveIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 1,400 connections; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	g := classGateway(t, brokers, "rpc."+testkit.Unique(t, "t-")+".", "stall", nil)
	base := "http://" + g.Addr()
	ingestOK(t, base, 1, 10, "before the uploads")

	// Each upload has sent 130 KiB, held in a buffer of 256 KiB: 400 of
	// them would hold 100 MiB; the budget is 64 MiB, request-reply's share
	// 16 MiB.
	const uploads = 400
	answered := stall(t, g.Addr(), "POST /v1/rpc/stall HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\nContent-Length: 1048576", uploads, 130<<10)
	notFound := stall(t, g.Addr(), "POST /nowhere HTTP/1.1\r\nHost: gw\r\nContent-Length: 1048576", 1000, 8<<10)
	// Request-reply's share holds at most 64 of them (16 MiB / 256 KiB),
	// the budget 256: once it is full, the calls past it are refused at
	// once, and ingest still answers.
	testkit.WaitFor(t, 20*time.Second, "uploads refused", func() bool { return answered.Load() >= 100 })
	for i := range 10 {
		// 900 KiB: buffers of 64 KiB to 1 MiB
		ingestOK(t, base, 100, 9<<10, fmt.Sprintf("while %d uploads stall (%d refused), try %d", uploads, answered.Load(), i))
	}
	t.Logf("%d of %d uploads refused after the ingest requests; %d stalled bodies on /nowhere answered", answered.Load(), uploads, notFound.Load())
	testkit.WaitFor(t, 20*time.Second, "the uploads past request-reply's share refused", func() bool { return answered.Load() >= uploads-100 })
	m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body)
	if !strings.Contains(m, `inlet_http_requests_refused_total{class="ingest"} 0`) {
		t.Errorf("ingest requests refused for its share of --max-requests:\n%s", grepLines(m, "inlet_http_requests"))
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRPCWaitingCallsBeyondMaxRequests: calls waiting for their replies
// hold no body and do not count against --max-requests, only against
// --rpc-max-in-flight: with --max-requests 400, 1,000 calls on 1,000
// HTTP/1.1 connections wait for a 3 s worker at once, every one is
// answered by it, and ingest answers meanwhile. Before, past 400 calls
// were answered 503 (at the default 4,096, 26-30% of the calls at 1,500
// calls/s with a 3-5 s worker).
func TestRPCWaitingCallsBeyondMaxRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker; skipped with -short")
	}
	const calls = 1000
	brokers := testkit.Brokers(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	g := classGateway(t, brokers, prefix, "slow", func(c *gateway.Config) { c.MaxRequests = 400 })
	base := "http://" + g.Addr()
	url := base + "/v1/rpc/slow"
	startWorker(t, brokers, prefix+"slow", "slow", "--echo", "--min-delay", "3s", "--max-delay", "3s", "--concurrency", "2000")
	deadline := time.Now().Add(45 * time.Second) // the worker's group takes a moment
	for {
		code, body, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "5s")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker answered %s: last %d %s", url, code, body)
		}
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a connection per call
	var wg sync.WaitGroup
	var peak atomic.Int64
	errs := make(chan string, calls)
	for i := range calls {
		time.Sleep(time.Millisecond) // 1,000 calls/s
		wg.Go(func() {
			body := fmt.Appendf(nil, "call-%d", i)
			code, got, err := call(t, client, url, body, "Inlet-Timeout", "20s")
			if err != nil || code != 200 || !bytes.Equal(got, body) {
				errs <- fmt.Sprintf("call %d: %d %q %v", i, code, got, err)
			}
		})
	}
	testkit.WaitFor(t, 10*time.Second, "more calls waiting than --max-requests", func() bool {
		n := int64(inFlight(t, g))
		peak.Store(max(peak.Load(), n))
		return n > 600
	})
	ingestOK(t, base, 1, 10, "while the calls wait")
	wg.Wait()
	close(errs)
	failed := 0
	for e := range errs {
		if failed++; failed <= 5 {
			t.Error(e)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d calls not answered by the worker", failed, calls)
	}
	t.Logf("%d calls waiting at the peak seen", peak.Load())
}

// TestRPCNoContinueBeforeChecks: a request-reply call that asks for
// "100 Continue" gets it only once its header passed every check: a 100 MB
// Content-Length is answered 413, missing or wrong credentials (with
// --auth) 401, a service not enabled 404, each as the first answer, so the
// client never sends its body. Before, on the default listener, the body
// was asked for (and read) first.
func TestRPCNoContinueBeforeChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway on Kafka; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	var secret string
	g := classGateway(t, brokers, "rpc."+testkit.Unique(t, "t-")+".", "svc", func(c *gateway.Config) {
		c.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
		c.Auth.HTTP = true
		secret = addClient(t, c.Auth.ClientsFile, auth.Client{ID: "app"})
	})
	for _, tt := range []struct {
		name, path, authz string
		length            int
		want              string
	}{
		{"100 MB", "/v1/rpc/svc", "Bearer " + secret, 100 << 20, "413"},
		{"no credentials", "/v1/rpc/svc", "", 10, "401"},
		{"wrong secret", "/v1/rpc/svc", "Bearer " + strings.Repeat("0", len(secret)), 10, "401"},
		{"no credentials, 100 MB", "/v1/rpc/svc", "", 100 << 20, "401"},
		{"service not enabled", "/v1/rpc/other", "Bearer " + secret, 10, "404"},
		{"admitted", "/v1/rpc/svc", "Bearer " + secret, 10, "100"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", g.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nExpect: 100-continue\r\nInlet-Timeout: 1s\r\n", tt.path, tt.length)
			if tt.authz != "" {
				head += "Authorization: " + tt.authz + "\r\n"
			}
			if _, err := io.WriteString(c, head+"\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("reading the first answer: %v (%q)", err, line)
			}
			if got := strings.Fields(line); len(got) < 2 || got[1] != tt.want {
				t.Errorf("first answer %q, want %s", strings.TrimSpace(line), tt.want)
			}
		})
	}
}
