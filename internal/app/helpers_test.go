package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/devbroker"
)

// testBrokers returns the Kafka to test against: the real broker that
// `make test` starts (INLET_TEST_BROKERS), else a development broker in
// process. With INLET_TEST_REQUIRE_KAFKA=1 the real broker is mandatory.
func testBrokers(tb testing.TB) []string {
	tb.Helper()
	if b := os.Getenv("INLET_TEST_BROKERS"); b != "" {
		return strings.Split(b, ",")
	}
	if os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" {
		tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_BROKERS is empty: run `make test`")
	}
	cfg := devbroker.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.SyncWrites = false
	b, err := devbroker.Start(cfg, testLogger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	return []string{b.Addr()}
}

var topicSeq atomic.Int64

// uniqueTopic names a topic no other test (or earlier run) uses.
func uniqueTopic(tb testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	if len(name) > 80 {
		name = name[:80]
	}
	return fmt.Sprintf("t-%s-%d-%d", name, time.Now().UnixNano()%1e9, topicSeq.Add(1))
}

func testLogger(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testConfig is a serve config on a free port, producing to brokers and topic.
func testConfig(brokers []string, topic string) ServeConfig {
	cfg := DefaultServeConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Brokers = brokers
	cfg.DataDir = filepath.Join(os.TempDir(), "inlet-test-"+topic)
	cfg.Ingest.Topic = topic
	cfg.Ingest.WriteTimeout = 20 * time.Second
	cfg.ReadyInterval = 200 * time.Millisecond
	cfg.ShutdownTimeout = 20 * time.Second
	return cfg
}

// startGateway starts a gateway and stops it at the end of the test.
func startGateway(tb testing.TB, cfg ServeConfig) *Gateway {
	tb.Helper()
	g, err := StartGateway(cfg, testLogger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = g.Shutdown(ctx)
		if strings.HasPrefix(cfg.DataDir, filepath.Join(os.TempDir(), "inlet-test-")) {
			os.RemoveAll(cfg.DataDir)
		}
	})
	return g
}

// response is an HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends one request and reads the answer.
func do(tb testing.TB, method, url string, body []byte, headers ...string) response {
	tb.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// record is a consumed record with its value decoded.
type record struct {
	key     string
	headers map[string]string
	value   []byte
	fields  map[string]any
}

// consume reads topic from the start until stop returns true for what was
// read so far, or fails the test after timeout.
func consume(tb testing.TB, brokers []string, topic string, timeout time.Duration, stop func([]record) bool) []record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []record
	for !stop(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("consuming %s: gave up after %v with %d records", topic, timeout, len(out))
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := record{key: string(r.Key), headers: map[string]string{}, value: r.Value}
			for _, h := range r.Headers {
				rec.headers[h.Key] = string(h.Value)
			}
			_ = json.Unmarshal(r.Value, &rec.fields)
			out = append(out, rec)
		})
	}
	return out
}

// consumeN reads exactly n records of topic (failing on timeout) and then
// makes sure no more arrive for a short while.
func consumeN(tb testing.TB, brokers []string, topic string, n int) []record {
	tb.Helper()
	recs := consume(tb, brokers, topic, 30*time.Second, func(r []record) bool { return len(r) >= n })
	if len(recs) != n {
		tb.Fatalf("topic %s: got %d records, want %d", topic, len(recs), n)
	}
	return recs
}

// byName indexes records by event name.
func byName(recs []record) map[string]record {
	m := map[string]record{}
	for _, r := range recs {
		m[r.headers["inlet-event-name"]] = r
	}
	return m
}

func decodeAnswer(tb testing.TB, r response) (accepted int, rejected map[int]string) {
	tb.Helper()
	var a struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			Index int    `json:"index"`
			Error string `json:"error"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal(r.body, &a); err != nil {
		tb.Fatalf("answer %s is not a batch answer: %v", r, err)
	}
	rejected = map[int]string{}
	for _, x := range a.Rejected {
		rejected[x.Index] = x.Error
	}
	return a.Accepted, rejected
}
