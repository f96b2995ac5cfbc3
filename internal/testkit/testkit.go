// Package testkit holds the helpers inlet's tests share: the real services
// `make test` starts (Kafka, Redis) found from the environment, an
// in-process development broker otherwise, loopback addresses, polling,
// consuming a topic, and event batches. It is imported only by tests.
//
// Environment (set by scripts/test.sh):
//
//	INLET_TEST_BROKERS        the real Kafka's bootstrap address(es)
//	INLET_TEST_REDIS          the real Redis host:port
//	INLET_TEST_REQUIRE_KAFKA  1: a missing real service fails the test instead of falling back or skipping
//	INLET_TEST_KAFKA_SCRIPT   scripts/kafka.sh, which starts private brokers for tests that stop them
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/devbroker"
)

// Logger is a logger for code under test: to stderr with -v, else discarded.
func Logger(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// LogBuffer is a logger whose lines are kept, for tests that assert what
// was logged or dump the logs when they fail. It is safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// NewLogBuffer returns a debug-level text logger writing to a LogBuffer.
func NewLogBuffer() (*slog.Logger, *LogBuffer) {
	b := &LogBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count is the number of logged lines that contain s.
func (b *LogBuffer) Count(s string) int {
	n := 0
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

func requireReal() bool { return os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" }

// Brokers returns the Kafka to test against: the real broker that `make
// test` starts (INLET_TEST_BROKERS), else a development broker in process,
// stopped at the end of the test. With INLET_TEST_REQUIRE_KAFKA=1 the real
// broker is mandatory.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	if b := os.Getenv("INLET_TEST_BROKERS"); b != "" {
		return strings.Split(b, ",")
	}
	if requireReal() {
		tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_BROKERS is empty: run `make test`")
	}
	return DevBroker(tb, "")
}

// DevBroker starts a development broker in process on a free loopback port
// (data under dir, or in memory when dir is empty) and stops it at the end
// of the test.
func DevBroker(tb testing.TB, dir string) []string {
	tb.Helper()
	cfg := devbroker.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.SyncWrites = false
	b, err := devbroker.Start(cfg, Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	return []string{b.Addr()}
}

// Redis returns the real Redis that `make test` starts (INLET_TEST_REDIS),
// or skips the test; with INLET_TEST_REQUIRE_KAFKA=1 (real services
// mandatory) it fails instead.
func Redis(tb testing.TB) string {
	tb.Helper()
	if a := os.Getenv("INLET_TEST_REDIS"); a != "" {
		return a
	}
	if requireReal() {
		tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_REDIS is empty: run `make test`")
	}
	tb.Skip("INLET_TEST_REDIS is not set: no real Redis to test against (`make test` starts one)")
	return ""
}

// KafkaCtl is a Kafka broker a test may halt and resume.
type KafkaCtl struct {
	Brokers []string
	Halt    func()
	Resume  func()
	// Wipe deletes the broker's data and starts it again, re-formatted (a
	// new cluster), at the same address. Only PrivateKafka has it.
	Wipe func()
}

// PrivateKafka starts a real Kafka broker of the test's own through
// scripts/kafka.sh (INLET_TEST_KAFKA_SCRIPT), in a temporary directory on
// free ports, for tests that halt or wipe a broker: never the broker other
// tests share. It is stopped, and its data deleted, at the end of the
// test. Without INLET_TEST_KAFKA_SCRIPT the test is skipped (failed with
// INLET_TEST_REQUIRE_KAFKA=1). Starting takes about ten seconds.
func PrivateKafka(tb testing.TB) KafkaCtl {
	tb.Helper()
	return PrivateKafkaWith(tb, "")
}

// PrivateKafkaWith is PrivateKafka with props, lines of server.properties
// that replace the script's (KAFKA_EXTRA_PROPS), e.g.
// "auto.create.topics.enable=false".
func PrivateKafkaWith(tb testing.TB, props string) KafkaCtl {
	tb.Helper()
	script := os.Getenv("INLET_TEST_KAFKA_SCRIPT")
	if script == "" {
		if requireReal() {
			tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_KAFKA_SCRIPT is empty: run `make test`")
		}
		tb.Skip("INLET_TEST_KAFKA_SCRIPT is not set: no scripts/kafka.sh to start a private broker with")
	}
	dir, err := os.MkdirTemp("", "inlet-kafka-")
	if err != nil {
		tb.Fatal(err)
	}
	run := func(verb string) string {
		tb.Helper()
		cmd := exec.Command(script, verb)
		cmd.Env = append(os.Environ(), "KAFKA_DIR="+dir)
		if props != "" {
			cmd.Env = append(cmd.Env, "KAFKA_EXTRA_PROPS="+props)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tb.Fatalf("KAFKA_DIR=%s %s %s: %v\n%s", dir, script, verb, err, stderr.Bytes())
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	tb.Cleanup(func() {
		cmd := exec.Command(script, "stop")
		cmd.Env = append(os.Environ(), "KAFKA_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Errorf("stopping the private kafka: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	})
	addr := run("start")
	same := func(verb string) func() {
		return func() {
			if got := run(verb); got != addr {
				tb.Fatalf("kafka came back at %q after %s, not %s", got, verb, addr)
			}
		}
	}
	return KafkaCtl{
		Brokers: []string{addr},
		Halt:    func() { run("halt") },
		Resume:  same("resume"),
		Wipe:    same("wipe"),
	}
}

// HaltableKafka returns a Kafka broker of the test's own that it may halt
// and resume: with scripts/kafka.sh (INLET_TEST_KAFKA_SCRIPT, as `make
// test` sets) a real one (PrivateKafka), else a development broker in
// process (HaltableDevBroker). It never touches the broker other tests
// share, so tests that stop Kafka can run beside them.
func HaltableKafka(tb testing.TB) KafkaCtl {
	tb.Helper()
	if os.Getenv("INLET_TEST_KAFKA_SCRIPT") != "" {
		return PrivateKafka(tb)
	}
	if requireReal() {
		tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_KAFKA_SCRIPT is empty: run `make test`")
	}
	return HaltableDevBroker(tb)
}

// HaltableDevBroker is a development broker in process, of the test's own
// whatever the environment says, that the test may halt and resume (closed
// and started again on the same port, its data in a temporary directory).
// It is for tests whose outage must not touch a broker others share.
func HaltableDevBroker(tb testing.TB) KafkaCtl {
	tb.Helper()
	dir := tb.TempDir()
	cfg := devbroker.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.SyncWrites = false
	b, err := devbroker.Start(cfg, Logger(tb))
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	cfg.Listen = b.Addr()
	ctl := KafkaCtl{Brokers: []string{b.Addr()}}
	ctl.Halt = func() {
		mu.Lock()
		defer mu.Unlock()
		if b != nil {
			b.Close()
			b = nil
		}
	}
	ctl.Resume = func() {
		mu.Lock()
		defer mu.Unlock()
		if b != nil {
			return
		}
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for b, err = devbroker.Start(cfg, Logger(tb)); err != nil; b, err = devbroker.Start(cfg, Logger(tb)) {
			if time.Now().After(deadline) {
				tb.Fatalf("restarting the development broker on %s: %v", cfg.Listen, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	tb.Cleanup(ctl.Halt)
	return ctl
}

var seq atomic.Int64

// Unique names a topic, service or directory that no other test, nor an
// earlier run against the same broker, uses: prefix, the test's name, the
// time and a counter.
func Unique(tb testing.TB, prefix string) string {
	name := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(tb.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("%s%s-%d-%d", prefix, name, time.Now().UnixNano()%1e9, seq.Add(1))
}

// FreeAddr returns a loopback host:port that nothing listens on: a
// connection to it is refused. It never returns the same address twice in
// one test binary: the kernel hands a port that was just closed out again,
// and two addresses of one test (--grpc-listen and --thrift-listen) came
// out equal.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		freeAddrsMu.Lock()
		seen := freeAddrs[addr]
		freeAddrs[addr] = true
		freeAddrsMu.Unlock()
		if !seen {
			return addr
		}
	}
	tb.Fatal("no loopback port that was not handed out already")
	return ""
}

// ServeTwo serves a server that listens on two ports (the catalog's gRPC
// and Thrift) on two loopback addresses until the test ends. Then shutdown
// runs, and both serves must return nil within 5 s.
func ServeTwo(tb testing.TB, serveA, serveB func(net.Listener) error, shutdown func(context.Context) error) (addrA, addrB string) {
	tb.Helper()
	done := make(chan error, 2)
	var addrs [2]string
	for i, serve := range []func(net.Listener) error{serveA, serveB} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		go func() { done <- serve(ln) }()
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				tb.Error("a serve did not return 5 s after shutdown")
			}
		}
	})
	return addrs[0], addrs[1]
}

// freeAddrs are the addresses FreeAddr handed out.
var (
	freeAddrsMu sync.Mutex
	freeAddrs   = map[string]bool{}
)

// WaitFor polls cond every 10 ms until it holds, failing the test with what
// after timeout.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Layouts of Batch.
const (
	JSONArray = "array"  // [{...},{...}]
	NDJSON    = "ndjson" // {...}\n{...}\n
	Wrapped   = "batch"  // {"batch":[{...},{...}]}
)

// Batch returns n events {"event":"<name><i>","id":"<name><i>"} laid out
// as layout says.
func Batch(n int, name, layout string) []byte {
	var b bytes.Buffer
	switch layout {
	case JSONArray:
		b.WriteByte('[')
	case Wrapped:
		b.WriteString(`{"batch":[`)
	}
	for i := range n {
		if i > 0 && layout != NDJSON {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"event":"%s%d","id":"%s%d"}`, name, i, name, i)
		if layout == NDJSON {
			b.WriteByte('\n')
		}
	}
	switch layout {
	case JSONArray:
		b.WriteByte(']')
	case Wrapped:
		b.WriteString(`]}`)
	}
	return b.Bytes()
}

// Record is a consumed record with its value decoded.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
	Headers   map[string]string
	Value     []byte
	Fields    map[string]any // Value as JSON; nil if it is not an object
}

// Consume reads topic from its start until stop returns true for what was
// read so far, or fails the test after timeout.
func Consume(tb testing.TB, brokers []string, topic string, timeout time.Duration, stop func([]Record) bool) []Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Record
	for !stop(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("consuming %s: gave up after %v with %d records", topic, timeout, len(out))
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Headers: map[string]string{}, Value: r.Value}
			for _, h := range r.Headers {
				rec.Headers[h.Key] = string(h.Value)
			}
			_ = json.Unmarshal(r.Value, &rec.Fields)
			out = append(out, rec)
		})
	}
	return out
}

// ConsumeN reads n records of topic, failing after 30 s or if more than n
// arrive; then, if settle is positive, it reads the topic again from its
// start for settle and fails if it holds more than n: it proves "exactly n".
func ConsumeN(tb testing.TB, brokers []string, topic string, n int, settle time.Duration) []Record {
	tb.Helper()
	recs := Consume(tb, brokers, topic, 30*time.Second, func(r []Record) bool { return len(r) >= n })
	if len(recs) != n {
		tb.Fatalf("topic %s: got %d records, want %d", topic, len(recs), n)
	}
	if settle <= 0 {
		return recs
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	total := 0
	for ctx.Err() == nil {
		total += cl.PollFetches(ctx).NumRecords()
	}
	if total > n {
		tb.Fatalf("topic %s: %d records after %v, want exactly %d", topic, total, settle, n)
	}
	return recs
}

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r Response) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// Do sends one request with headers given as name, value pairs, and reads
// the whole answer; a transport error fails the test.
func Do(tb testing.TB, method, url string, body []byte, headers ...string) Response {
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
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Answer decodes a batch answer {"accepted": N, "rejected": [{"index", "error"}]}
// strictly, failing the test if r is not one; rejected maps index to error.
func Answer(tb testing.TB, r Response) (accepted int, rejected map[int]string) {
	tb.Helper()
	var a struct {
		Accepted *int `json:"accepted"`
		Rejected []struct {
			Index int    `json:"index"`
			Error string `json:"error"`
		} `json:"rejected"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || a.Accepted == nil || a.Rejected == nil {
		tb.Fatalf("answer %s is not a batch answer: %v", r, err)
	}
	rejected = map[int]string{}
	for _, x := range a.Rejected {
		rejected[x.Index] = x.Error
	}
	return *a.Accepted, rejected
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Binary builds the inlet command once per test binary and returns its path.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "inlet-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "inlet")
		cmd := exec.Command("go", "build", "-o", builtBin, "github.com/inlet-dev/inlet/cmd/inlet")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building inlet: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return builtBin
}

// CreateTopic creates topic on brokers with partitions partitions and the
// topic configs given (e.g. "max.message.bytes"), failing the test if Kafka
// refuses. The development broker ignores configs.
func CreateTopic(tb testing.TB, brokers []string, topic string, partitions int32, configs map[string]string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	cfgs := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfgs[k] = &v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, cfgs, topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		tb.Fatalf("creating topic %s: %v", topic, err)
	}
}

// DeleteTopic deletes topic, failing the test if Kafka refuses. On a broker
// that does not create topics on demand, Kafka then refuses every write to
// it (UNKNOWN_TOPIC_OR_PARTITION) while the broker and every other topic
// are fine: a topic Kafka will not take.
func DeleteTopic(tb testing.TB, brokers []string, topic string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := kadm.NewClient(cl).DeleteTopic(ctx, topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		tb.Fatalf("deleting topic %s: %v", topic, err)
	}
}

// RecreateTopic deletes topic and waits until it exists again with a new
// ID (a topic of one partition), creating it if need be: a client's
// metadata request may have created it first (auto-creation), which is a
// recreation too. The development broker has no topic IDs: do not call it
// there.
func RecreateTopic(tb testing.TB, brokers []string, topic string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	id := func() kadm.TopicID {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := adm.ListTopics(ctx, topic)
		if err != nil {
			tb.Fatalf("listing topic %s: %v", topic, err)
		}
		if td, ok := d[topic]; ok && td.Err == nil {
			return td.ID
		}
		return kadm.TopicID{}
	}
	old := id()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		tb.Fatalf("deleting topic %s: %v", topic, err)
	}
	WaitFor(tb, 20*time.Second, "topic "+topic+" recreated with a new ID", func() bool {
		now := id()
		if now == (kadm.TopicID{}) {
			r, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
			if err == nil && r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				tb.Logf("creating topic %s again: %v", topic, r.Err)
			}
			return false
		}
		return now != old
	})
}
