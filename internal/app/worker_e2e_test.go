package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/internal/worker"
)

// testWorker is an `inlet worker` run in process on a service of its own,
// with a client that sends it requests by hand, as inlet serve would.
type testWorker struct {
	t       *testing.T
	brokers []string
	topic   string // the request topic
	m       *worker.Metrics
	cl      *kgo.Client
	stop    func() error
}

// runTestWorker parses `inlet worker` args (the service, topic and brokers
// are added), runs the worker until the test ends, and returns once it
// answers requests.
func runTestWorker(t *testing.T, args ...string) *testWorker {
	t.Helper()
	brokers := testkit.Brokers(t)
	service := testkit.Unique(t, "t-")
	topic := "rpc." + service
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	cfg, hc, _, err := ParseWorker(append([]string{"--service", service, "--brokers", strings.Join(brokers, ",")}, args...), env)
	if err != nil {
		t.Fatalf("parsing worker flags %q: %v", args, err)
	}
	if cfg.Topic != "" {
		topic = cfg.Topic
	}
	h, err := hc.New()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWorker{t: t, brokers: brokers, topic: topic, m: worker.NewMetrics(nil), cl: cl}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg.Log, cfg.Metrics = testkit.Logger(t), tw.m
	go func() { done <- worker.Run(ctx, cfg, h) }()
	var stopped bool
	var stopErr error
	tw.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(cfg.StopTimeout + 10*time.Second):
				t.Fatal("worker did not stop")
			}
		}
		return stopErr
	}
	t.Cleanup(func() {
		if err := tw.stop(); err != nil {
			t.Errorf("worker: %v", err)
		}
		cl.Close()
	})

	// A new group starts at the end of the topic: requests sent before the
	// worker has its partitions are not seen. Send until one is answered.
	warm := readerOf(t, brokers, testkit.Unique(t, "t-")+"-warm")
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		tw.send(tw.request(fmt.Sprintf("warm-%d", i), "kafka:"+warm.topic, 5*time.Second, nil))
		if len(warm.read(t, 1, 300*time.Millisecond, false)) > 0 {
			return tw
		}
		select {
		case err := <-done:
			t.Fatalf("worker stopped while starting: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("worker answered no warm-up request in 30 s")
		}
	}
}

// request builds a request record for the worker, due in timeout.
func (tw *testWorker) request(id, replyTo string, timeout time.Duration, body []byte, headers ...string) *kgo.Record {
	hs := []kgo.RecordHeader{
		{Key: reply.HeaderCorrelationID, Value: []byte(id)},
		{Key: reply.HeaderReplyTo, Value: []byte(replyTo)},
		{Key: reply.HeaderDeadline, Value: []byte(reply.FormatDeadline(time.Now().Add(timeout)))},
	}
	for i := 0; i+1 < len(headers); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return &kgo.Record{Topic: tw.topic, Key: []byte(id), Value: body, Headers: hs}
}

func (tw *testWorker) send(recs ...*kgo.Record) {
	tw.t.Helper()
	if err := tw.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		tw.t.Fatalf("producing requests: %v", err)
	}
}

// replyReader reads a reply topic from its start.
type replyReader struct {
	topic string
	cl    *kgo.Client
}

// readerOf starts reading topic (creating it) before anything is sent to it.
func readerOf(t *testing.T, brokers []string, topic string) *replyReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &replyReader{topic: topic, cl: cl}
}

// kafkaReply is a reply record on a reply topic, decoded.
type kafkaReply struct {
	key, id, status, contentType, err, body string
}

// read returns the replies that arrive until there are n, or timeout passes;
// then it fails the test if must is set.
func (r *replyReader) read(t *testing.T, n int, timeout time.Duration, must bool) []kafkaReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []kafkaReply
	for len(out) < n {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if must {
				t.Fatalf("reply topic %s: %d replies in %v, want %d", r.topic, len(out), timeout, n)
			}
			return out
		}
		fs.EachRecord(func(rec *kgo.Record) {
			g := kafkaReply{key: string(rec.Key), body: string(rec.Value)}
			for _, h := range rec.Headers {
				switch h.Key {
				case reply.HeaderCorrelationID:
					g.id = string(h.Value)
				case reply.HeaderStatus:
					g.status = string(h.Value)
				case reply.HeaderContentType:
					g.contentType = string(h.Value)
				case reply.HeaderError:
					g.err = string(h.Value)
				}
			}
			out = append(out, g)
		})
	}
	return out
}

// TestWorkerEcho: `inlet worker --echo` with 50–100 ms of synthetic work
// answers 200 requests sent at once within 2 s — they are handled
// concurrently (one at a time would take 15 s) — each with its own body,
// under its own correlation id; an expired request is skipped and counted.
func TestWorkerEcho(t *testing.T) {
	tw := runTestWorker(t, "--echo", "--min-delay", "50ms", "--max-delay", "100ms")
	replies := readerOf(t, tw.brokers, testkit.Unique(t, "t-")+"-replies")

	const n = 200
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = tw.request(fmt.Sprintf("c-%03d", i), "kafka:"+replies.topic, 10*time.Second,
			[]byte(fmt.Sprintf(`{"n":%d}`, i)), reply.HeaderContentType, "application/json")
	}
	start := time.Now()
	tw.send(recs...)
	got := replies.read(t, n, 10*time.Second, true)
	d := time.Since(start)
	t.Logf("%d requests answered in %v", n, d)
	// One at a time they take about 15 s (200 × 75 ms); concurrently well
	// under 1 s on a quiet machine. 7.5 s is half the serial time, wide
	// enough for a machine loaded many times over (5.2 s seen at load 47).
	if d > 7500*time.Millisecond {
		t.Errorf("%d requests of 50–100 ms took %v: want under 7.5 s, half the time of one at a time (handled concurrently)", n, d)
	}
	seen := map[string]bool{}
	for _, r := range got {
		var i int
		if _, err := fmt.Sscanf(r.id, "c-%03d", &i); err != nil || seen[r.id] {
			t.Errorf("reply with correlation id %q (duplicate: %v)", r.id, seen[r.id])
			continue
		}
		seen[r.id] = true
		want := kafkaReply{key: r.id, id: r.id, status: "200", contentType: "application/json", body: fmt.Sprintf(`{"n":%d}`, i)}
		if r != want {
			t.Errorf("reply %+v, want %+v", r, want)
		}
	}

	// Expired: already past its deadline when the worker reads it.
	handled := testutil.ToFloat64(tw.m.Handled)
	tw.send(tw.request("expired", "kafka:"+replies.topic, -time.Second, []byte("late")))
	testkit.WaitFor(t, 10*time.Second, "the expired request counted", func() bool { return testutil.ToFloat64(tw.m.SkippedExpired) == 1 })
	if extra := replies.read(t, 1, 500*time.Millisecond, false); len(extra) > 0 {
		t.Errorf("replies to an expired request: %+v", extra)
	}
	if h := testutil.ToFloat64(tw.m.Handled); h != handled {
		t.Errorf("handled went from %v to %v for an expired request", handled, h)
	}
	if err := tw.stop(); err != nil {
		t.Fatal(err)
	}
	if f, e, inFlight := testutil.ToFloat64(tw.m.ReplyFailures), testutil.ToFloat64(tw.m.Errors), testutil.ToFloat64(tw.m.InFlight); f != 0 || e != 0 || inFlight != 0 {
		t.Errorf("reply failures %v, errors %v, in flight %v after stop; want 0", f, e, inFlight)
	}
}

// TestWorkerExecAndHTTP: the --exec and --http handlers behind a real
// worker, errors included (502 with the reason).
func TestWorkerExecAndHTTP(t *testing.T) {
	t.Run("exec", func(t *testing.T) {
		tw := runTestWorker(t, "--exec", `if [ "$(cat)" = fail ]; then echo "cannot do that" >&2; exit 4; fi; echo "$RPC_ID ok"`)
		replies := readerOf(t, tw.brokers, testkit.Unique(t, "t-")+"-replies")
		tw.send(tw.request("e1", "kafka:"+replies.topic, 10*time.Second, []byte("work")),
			tw.request("e2", "kafka:"+replies.topic, 10*time.Second, []byte("fail")))
		got := byID(replies.read(t, 2, 10*time.Second, true))
		if r := got["e1"]; r.status != "200" || r.body != "e1 ok\n" || r.err != "" {
			t.Errorf("e1: %+v", r)
		}
		if r := got["e2"]; r.status != "502" || r.err != "exec: exit status 4: cannot do that" || r.body != "" {
			t.Errorf("e2: %+v", r)
		}
	})
	t.Run("http", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if string(body) == "missing" {
				http.Error(w, "no such thing", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/x-upper")
			w.Write(bytes.ToUpper(body))
		}))
		defer srv.Close()
		tw := runTestWorker(t, "--http", srv.URL)
		replies := readerOf(t, tw.brokers, testkit.Unique(t, "t-")+"-replies")
		tw.send(tw.request("h1", "kafka:"+replies.topic, 10*time.Second, []byte("shout")),
			tw.request("h2", "kafka:"+replies.topic, 10*time.Second, []byte("missing")))
		got := byID(replies.read(t, 2, 10*time.Second, true))
		if r := got["h1"]; r.status != "200" || r.contentType != "text/x-upper" || r.body != "SHOUT" {
			t.Errorf("h1: %+v", r)
		}
		if r := got["h2"]; r.status != "404" || r.body != "no such thing\n" || r.err != "" {
			t.Errorf("h2: %+v", r)
		}
	})
}

func byID(rs []kafkaReply) map[string]kafkaReply {
	m := map[string]kafkaReply{}
	for _, r := range rs {
		m[r.id] = r
	}
	return m
}

// TestWorkerRedisReply: replies addressed redis:<channel> are published to
// a real Redis, encoded by reply.Marshal.
func TestWorkerRedisReply(t *testing.T) {
	addr := testkit.Redis(t)
	tw := runTestWorker(t, "--echo", "--redis", addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	channel := "inlet-test." + testkit.Unique(t, "t-")
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	tw.send(tw.request("r1", "redis:"+channel, 10*time.Second, []byte("hello redis"), reply.HeaderContentType, "text/plain"))
	select {
	case msg := <-sub.Channel():
		r, err := reply.Unmarshal([]byte(msg.Payload))
		if err != nil {
			t.Fatalf("payload %q: %v", msg.Payload, err)
		}
		if r.ID != "r1" || r.Status != 200 || r.ContentType != "text/plain" || r.Err != "" || string(r.Body) != "hello redis" {
			t.Errorf("reply %+v (body %q)", r, r.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply on Redis in 10 s")
	}
}

// TestWorkerUsage: the handler flags are checked before anything starts.
func TestWorkerUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no handler", []string{"--service", "s"}, "exactly one of --echo, --http URL and --exec CMD"},
		{"two handlers", []string{"--service", "s", "--echo", "--exec", "cat"}, "exactly one of"},
		{"delay without echo", []string{"--service", "s", "--exec", "cat", "--max-delay", "1s"}, "go with --echo"},
		{"delays reversed", []string{"--service", "s", "--echo", "--min-delay", "2s", "--max-delay", "1s"}, "--min-delay <= --max-delay"},
		{"no service", []string{"--echo"}, "no service"},
		{"bad url", []string{"--service", "s", "--http", "localhost:80"}, "HTTP target"},
		{"zero concurrency", []string{"--service", "s", "--echo", "--concurrency", "0"}, "--concurrency must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			env := Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
			if code := Main(context.Background(), append([]string{"worker"}, tt.args...), env); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.want)
			}
		})
	}
	// The environment sets flags too.
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string {
		return map[string]string{"INLET_SERVICE": "billing", "INLET_ECHO": "true", "INLET_MIN_DELAY": "10ms"}[k]
	}}
	cfg, hc, _, err := ParseWorker(nil, env)
	if err != nil || cfg.Service != "billing" || !hc.Echo || hc.MinDelay != 10*time.Millisecond {
		t.Errorf("from the environment: %+v %+v, %v", cfg, hc, err)
	}
}
