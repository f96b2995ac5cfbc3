package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// startWorker runs `inlet worker` for service on topic with the given
// handler flags, until the test ends.
func startWorker(t *testing.T, brokers []string, topic, service string, args ...string) *exec.Cmd {
	t.Helper()
	all := append([]string{"worker", "--service", service, "--topic", topic, "--brokers", strings.Join(brokers, ",")}, args...)
	cmd := exec.Command(testkit.Binary(t), all...)
	var logs testkit.LogBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("worker %s logs:\n%s", service, logs.String())
		}
	})
	return cmd
}

// startRedis runs a redis-server of the test's own on a free port.
func startRedis(t *testing.T) (addr string, stop func(), restart func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" {
			t.Fatal("redis-server is not installed; scripts/redis.sh installs it")
		}
		t.Skip("redis-server not installed (make test installs it)")
	}
	addr = testkit.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("redis-server did not start")
	}
	stop = func() {
		if cmd != nil && cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
			cmd = nil
		}
	}
	start()
	t.Cleanup(stop)
	return addr, stop, start
}

// rpcGateway starts a gateway with request-reply for service, replies by mode.
func rpcGateway(t *testing.T, brokers []string, prefix, service, mode, redisAddr string) *gateway.Gateway {
	t.Helper()
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.DataDir = t.TempDir()
	cfg.RPC.Services = []string{service}
	cfg.RPC.TopicPrefix = prefix
	cfg.Reply = mode
	cfg.RedisAddr = redisAddr
	return gatewaytest.Start(t, cfg)
}

// call makes one RPC call.
func call(t *testing.T, client *http.Client, url string, body []byte, headers ...string) (int, []byte, error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "text/plain")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitRPC calls url until a worker answers: the worker's consumer group
// takes a moment to be assigned the request topic.
func waitRPC(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "1s")
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker answered %s: last %d %s", url, code, body)
		}
	}
}

// hammer makes n concurrent calls with distinct bodies spread over urls and
// fails the test unless each gets its own body back.
func hammer(t *testing.T, client *http.Client, urls []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf("request-%d-%d", i, time.Now().UnixNano()))
			code, got, err := call(t, client, urls[i%len(urls)], body)
			if err != nil || code != 200 || !bytes.Equal(got, body) {
				errs <- fmt.Sprintf("call %d: %d %q %v (sent %q)", i, code, got, err, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for e := range errs {
		if failed++; failed <= 5 {
			t.Error(e)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d calls got a wrong or no reply", failed, n)
	}
}

func inFlight(t *testing.T, g *gateway.Gateway) int {
	_, rd := getReady(t, "http://"+g.Addr())
	if rd.RPC == nil {
		t.Fatal("readyz has no rpc section")
	}
	return rd.RPC.InFlight
}

// TestRPC: both reply modes; two inlet instances and two workers; every
// reply reaches its own caller under concurrency; over HTTP/1.1 and h2c.
func TestRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	for _, mode := range []string{"kafka", "redis"} {
		t.Run(mode, func(t *testing.T) {
			redisAddr := ""
			var wargs []string
			if mode == "redis" {
				redisAddr, _, _ = startRedis(t)
				wargs = []string{"--redis", redisAddr}
			}
			prefix := "rpc." + testkit.Unique(t, "t-") + "."
			g1 := rpcGateway(t, brokers, prefix, "echo", mode, redisAddr)
			g2 := rpcGateway(t, brokers, prefix, "echo", mode, redisAddr)
			startWorker(t, brokers, prefix+"echo", "echo", append(wargs, "--echo", "--min-delay", "1ms", "--max-delay", "30ms")...)
			startWorker(t, brokers, prefix+"echo", "echo", append(wargs, "--echo", "--min-delay", "1ms", "--max-delay", "30ms")...)
			urls := []string{"http://" + g1.Addr() + "/v1/rpc/echo", "http://" + g2.Addr() + "/v1/rpc/echo"}
			waitRPC(t, urls[0])
			waitRPC(t, urls[1])
			hammer(t, http.DefaultClient, urls, 400)

			// h2c: many calls over one HTTP/2 connection without TLS.
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			h2 := &http.Client{Transport: tr}
			req, _ := http.NewRequest("POST", urls[0], strings.NewReader("over h2c"))
			resp, err := h2.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "over h2c" {
				t.Fatalf("h2c call: %s %d %q", resp.Proto, resp.StatusCode, b)
			}
			hammer(t, h2, urls, 300)
			testkit.WaitFor(t, 5*time.Second, "no call in flight", func() bool { return inFlight(t, g1) == 0 && inFlight(t, g2) == 0 })
		})
	}
}

// TestRPCWorkerKilled: a worker killed mid-request leaves its callers
// waiting only until their deadline: 504, no hang, and nothing stays in
// flight.
func TestRPCWorkerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	g := rpcGateway(t, brokers, prefix, "slow", "kafka", "")
	url := "http://" + g.Addr() + "/v1/rpc/slow"
	w := startWorker(t, brokers, prefix+"slow", "slow", "--echo", "--min-delay", "1500ms", "--max-delay", "1500ms")
	waitRPC2 := func() { // the slow worker answers a 3 s call
		deadline := time.Now().Add(45 * time.Second)
		for {
			code, _, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "3s")
			if code == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the slow worker never answered")
			}
		}
	}
	waitRPC2()
	const n = 20
	type result struct {
		code int
		took time.Duration
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		go func() {
			start := time.Now()
			code, _, _ := call(t, http.DefaultClient, url, []byte(fmt.Sprint("r", i)), "Inlet-Timeout", "4s")
			results <- result{code, time.Since(start)}
		}()
	}
	testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("%d calls in flight", n), func() bool { return inFlight(t, g) == n })
	w.Process.Signal(syscall.SIGKILL)
	for i := 0; i < n; i++ {
		r := <-results
		if r.code != http.StatusGatewayTimeout || r.took < 3900*time.Millisecond || r.took > 6*time.Second {
			t.Errorf("call after the worker died: %d after %v, want 504 at the 4 s deadline", r.code, r.took)
		}
	}
	if got := inFlight(t, g); got != 0 {
		t.Fatalf("%d calls still in flight after their deadlines", got)
	}
}

// TestRPCRedisDown: with Redis gone, request-reply answers 503 at once and
// ingest is unaffected; when Redis is back, calls work again.
func TestRPCRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	redisAddr, stopRedis, startRedisAgain := startRedis(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	g := rpcGateway(t, brokers, prefix, "echo", "redis", redisAddr)
	startWorker(t, brokers, prefix+"echo", "echo", "--redis", redisAddr, "--echo")
	url := "http://" + g.Addr() + "/v1/rpc/echo"
	waitRPC(t, url)

	stopRedis()
	testkit.WaitFor(t, 5*time.Second, "503 from request-reply", func() bool {
		code, _, _ := call(t, http.DefaultClient, url, []byte("x"), "Inlet-Timeout", "1s")
		return code == http.StatusServiceUnavailable
	})
	start := time.Now()
	code, body, _ := call(t, http.DefaultClient, url, []byte("x"))
	if code != 503 || !strings.Contains(string(body), "redis") || time.Since(start) > time.Second {
		t.Fatalf("with redis down: %d %s after %v, want an immediate 503", code, body, time.Since(start))
	}
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"event":"still_ingesting"}]`), "Content-Type", "application/json")
	if r.Status != 200 {
		t.Fatalf("ingest with redis down: %s", r)
	}
	if status, rd := getReady(t, "http://"+g.Addr()); status != 200 || rd.RPC.Healthy == "ok" {
		t.Fatalf("readyz with redis down: %d %+v", status, rd.RPC)
	}
	startRedisAgain()
	waitRPC(t, url)
}

// TestRPCErrors: each failure of a call has its status and message.
func TestRPCErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.DataDir = t.TempDir()
	cfg.RPC.Services = []string{"fail", "slow"}
	cfg.RPC.TopicPrefix = prefix
	cfg.RPC.MaxInFlight = 3
	cfg.RPC.MaxBodyBytes = 1 << 10
	// A request of 700 bytes or more is over the batch limit: Kafka's
	// client refuses it after the call began to wait (503).
	cfg.Kafka.BatchMaxBytes = 700
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr() + "/v1/rpc/"
	startWorker(t, brokers, prefix+"fail", "fail", "--exec", "echo 'no such order' >&2; exit 3")
	startWorker(t, brokers, prefix+"slow", "slow", "--echo", "--min-delay", "2s", "--max-delay", "2s")

	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body, _ := call(t, http.DefaultClient, base+"fail", []byte("order 7"), "Inlet-Timeout", "1s")
		if code == http.StatusBadGateway {
			if !strings.Contains(string(body), "no such order") {
				t.Errorf("502 without the worker's error: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing worker never answered: %d %s", code, body)
		}
	}
	cases := []struct {
		name    string
		method  string
		service string
		body    []byte
		headers []string
		code    int
		msg     string
	}{
		{"unknown service", "POST", "other", nil, nil, 404, "not enabled"},
		{"bad service name", "POST", "a%20b", nil, nil, 400, "letters, digits"},
		{"bad timeout", "POST", "slow", nil, []string{"Inlet-Timeout", "soon"}, 400, "Inlet-Timeout"},
		{"negative timeout", "POST", "slow", nil, []string{"Inlet-Timeout", "-1s"}, 400, "positive"},
		{"too large", "POST", "slow", bytes.Repeat([]byte("x"), 2<<10), nil, 413, "exceeds 1024 bytes"},
		{"wrong method", "GET", "slow", nil, nil, 405, "use POST"},
		{"timeout", "POST", "slow", []byte("x"), []string{"Inlet-Timeout", "300ms"}, 504, "within 300ms"},
		{"refused by kafka", "POST", "slow", bytes.Repeat([]byte("x"), 900), nil, 503, "not sent to kafka"},
	}
	for _, tc := range cases {
		r := testkit.Do(t, tc.method, base+tc.service, tc.body, tc.headers...)
		if r.Status != tc.code || !strings.Contains(string(r.Body), tc.msg) {
			t.Errorf("%s: %s, want %d with %q", tc.name, r, tc.code, tc.msg)
		}
	}
	// Admission control: three calls wait; the fourth is turned away.
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(t, http.DefaultClient, base+"slow", []byte("x"), "Inlet-Timeout", "5s")
		}()
	}
	testkit.WaitFor(t, 5*time.Second, "three calls in flight", func() bool { return inFlight(t, g) == 3 })
	r := testkit.Do(t, "POST", base+"slow", []byte("x"))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "the limit") {
		t.Errorf("past the in-flight cap: %s", r)
	}
	wg.Wait()
	if got := inFlight(t, g); got != 0 {
		t.Fatalf("%d calls in flight after all ended", got)
	}
	m := string(testkit.Do(t, "GET", "http://"+g.Addr()+"/metrics", nil).Body)
	for _, want := range []string{`inlet_rpc_requests_total{code="502"}`, `inlet_rpc_requests_total{code="504"}`, "inlet_rpc_in_flight 0", "inlet_rpc_in_flight_peak 3"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestRPCStackPerWaitingCall: a call waiting for its reply holds a goroutine
// of the HTTP/2 server, and that goroutine's stack is most of the call's
// memory. It stays at 4 KiB: the deep work before the wait (producing)
// runs elsewhere. When the producer ran on the handler's goroutine, each
// waiting call held 8 KiB. The binary is built without -race, so stack
// sizes are the real ones. Calls whose caller goes away end at once.
func TestRPCStackPerWaitingCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	const calls = 2000
	brokers := testkit.Brokers(t)
	bin := testkit.Binary(t)
	addr := testkit.FreeAddr(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--ack", "kafka", "--data-dir", t.TempDir(),
		"--rpc-services", "hold", "--rpc-topic-prefix", "rpc."+testkit.Unique(t, "t-")+".", "--http2-max-streams", "5000")
	cmd.Env = append(os.Environ(), "INLET_BROKERS="+strings.Join(brokers, ","))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("inlet serve's log:\n%s", logs.String())
		}
	}()
	base := "http://" + addr
	waitReady(t, base)
	metric := func(name string) float64 {
		t.Helper()
		for _, line := range strings.Split(string(testkit.Do(t, "GET", base+"/metrics", nil).Body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("metric %s: %v", line, err)
				}
				return f
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	// First calls, answered 504 after a second: by then the topic exists
	// and the producer knows its partitions, so the calls below take the
	// producer's full path (the first ones only queue for metadata).
	for range 2 {
		if r := testkit.Do(t, "POST", base+"/v1/rpc/hold", []byte("warm"), "Inlet-Timeout", "1s"); r.Status != http.StatusGatewayTimeout {
			t.Fatalf("a call nobody serves: %s, want 504", r)
		}
	}
	idle := metric("go_memstats_stack_inuse_bytes")

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/rpc/hold", strings.NewReader("wait"))
			req.Header.Set("Inlet-Timeout", "60s")
			if resp, err := tr.RoundTrip(req); err == nil { // nobody answers: only the cancel ends it
				resp.Body.Close()
				t.Errorf("a call was answered %d; nobody serves it", resp.StatusCode)
			}
		})
	}
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d calls waiting", calls), func() bool { return metric("inlet_rpc_in_flight") == calls })
	per := (metric("go_memstats_stack_inuse_bytes") - idle) / calls
	t.Logf("%.0f bytes of stack per waiting call", per)
	if per > 6<<10 {
		t.Errorf("%.0f bytes of stack per waiting call, want about 4 KiB", per)
	}
	cancel()
	wg.Wait()
	testkit.WaitFor(t, 30*time.Second, "no call in flight after the callers left", func() bool { return metric("inlet_rpc_in_flight") == 0 })
}

// TestRPCReplyTopicRecreated: the reply topic is deleted and recreated with
// three partitions while the gateway and a worker run. Calls succeed again
// within seconds, without a restart, and then none times out although the
// worker replied: the request names the partition its reply goes to, and
// the gateway reads every partition. Before, calls were answered 503 until
// both restarted, and then 18 of 30 timed out (the replies went by key to
// partitions the gateway did not read).
func TestRPCReplyTopicRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	prefix := "rpc." + testkit.Unique(t, "t-") + "."
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "t-"))
	cfg.DataDir = t.TempDir()
	cfg.RPC.Services = []string{"echo"}
	cfg.RPC.TopicPrefix = prefix
	cfg.Reply = "kafka"
	cfg.ReplyTopic = testkit.Unique(t, "inlet.replies.")
	g := gatewaytest.Start(t, cfg)
	startWorker(t, brokers, prefix+"echo", "echo", "--echo")
	url := "http://" + g.Addr() + "/v1/rpc/echo"
	waitRPC(t, url)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, cfg.ReplyTopic); err != nil {
		t.Fatal(err)
	}
	// Recreated by hand before the gateway makes it again (with one).
	for {
		resp, err := adm.CreateTopic(ctx, 3, -1, nil, cfg.ReplyTopic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("recreating the reply topic: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the deletion takes a moment
	}
	recreated := time.Now()
	testkit.WaitFor(t, 30*time.Second, "a call to succeed after the reply topic was recreated", func() bool {
		code, _, _ := call(t, http.DefaultClient, url, []byte("ping"), "Inlet-Timeout", "2s")
		return code == 200
	})
	t.Logf("calls succeed again %v after the reply topic was recreated", time.Since(recreated).Round(time.Millisecond))
	hammer(t, http.DefaultClient, []string{url}, 30)
}
