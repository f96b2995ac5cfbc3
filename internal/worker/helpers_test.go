package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/reply"
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

// testRedis returns the real Redis that `make test` starts
// (INLET_TEST_REDIS), or skips the test; with INLET_TEST_REQUIRE_KAFKA=1
// (real services mandatory) it fails instead.
func testRedis(tb testing.TB) string {
	tb.Helper()
	if a := os.Getenv("INLET_TEST_REDIS"); a != "" {
		return a
	}
	if os.Getenv("INLET_TEST_REQUIRE_KAFKA") == "1" {
		tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_REDIS is empty: run `make test`")
	}
	tb.Skip("INLET_TEST_REDIS is not set: no real Redis to test against (`make test` starts one)")
	return ""
}

func testLogger(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

var seq atomic.Int64

// unique names a service no other test (or earlier run) uses.
func unique(tb testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano()%1e9, seq.Add(1))
}

// harness runs a worker on a unique service and talks to it like inlet
// would: request records in, reply records out of a reply topic of its own.
type harness struct {
	tb         testing.TB
	cfg        Config
	replyTopic string
	cl         *kgo.Client // produces requests, consumes replies
	done       chan error
	cancel     context.CancelFunc
	warm       int
}

// startWorker starts a worker with h, and returns once it answers.
func startWorker(tb testing.TB, h Handler, edit func(*Config)) *harness {
	tb.Helper()
	brokers := testBrokers(tb)
	service := unique(tb)
	cfg := Config{Brokers: brokers, Service: service, Log: testLogger(tb), Metrics: NewMetrics(nil), StopTimeout: 5 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	replyTopic := "replies-" + service
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(replyTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hs := &harness{tb: tb, cfg: cfg.withDefaults(), replyTopic: replyTopic, cl: cl, done: make(chan error, 1), cancel: cancel}
	go func() { hs.done <- Run(ctx, cfg, h) }()
	tb.Cleanup(func() {
		hs.stop()
		cl.Close()
	})
	hs.waitReady()
	return hs
}

// waitReady sends warm-up requests until one is answered: the worker's
// group takes a moment to be assigned the topic's partitions.
func (hs *harness) waitReady() {
	hs.tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		hs.warm++
		hs.send(fmt.Sprintf("warm-%d", hs.warm), time.Now().Add(5*time.Second), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := hs.cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() > 0 {
			return
		}
		select {
		case err := <-hs.done:
			hs.tb.Fatalf("worker stopped while starting: %v", err)
		default:
		}
	}
	hs.tb.Fatal("worker did not answer a warm-up request in 20 s")
}

// send produces a request to the worker's topic, replied to on the
// harness's reply topic.
func (hs *harness) send(id string, deadline time.Time, body []byte, headers ...kgo.RecordHeader) {
	hs.tb.Helper()
	hs.sendTo(id, "kafka:"+hs.replyTopic, deadline, body, headers...)
}

func (hs *harness) sendTo(id, replyTo string, deadline time.Time, body []byte, headers ...kgo.RecordHeader) {
	hs.tb.Helper()
	rec := requestRecord(hs.cfg.Topic, id, replyTo, deadline, body, headers...)
	if err := hs.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		hs.tb.Fatalf("producing request %s: %v", id, err)
	}
}

func requestRecord(topic, id, replyTo string, deadline time.Time, body []byte, headers ...kgo.RecordHeader) *kgo.Record {
	hs := []kgo.RecordHeader{
		{Key: reply.HeaderCorrelationID, Value: []byte(id)},
		{Key: reply.HeaderReplyTo, Value: []byte(replyTo)},
		{Key: reply.HeaderDeadline, Value: []byte(reply.FormatDeadline(deadline))},
	}
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: body, Headers: append(hs, headers...)}
}

// gotReply is a reply record, decoded.
type gotReply struct {
	id, status, contentType, err string
	body                         string
}

// replies reads the reply topic until n replies (not warm-ups) arrived, or
// fails the test after timeout.
func (hs *harness) replies(n int, timeout time.Duration) map[string]gotReply {
	hs.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := map[string]gotReply{}
	for len(out) < n {
		fs := hs.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			hs.tb.Fatalf("got %d replies in %v, want %d", len(out), timeout, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			g := gotReply{body: string(r.Value)}
			for _, h := range r.Headers {
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
			if g.id != string(r.Key) {
				hs.tb.Errorf("reply key %q, correlation id header %q", r.Key, g.id)
			}
			if !strings.HasPrefix(g.id, "warm-") {
				out[g.id] = g
			}
		})
	}
	return out
}

// stop stops the worker and returns what Run returned.
func (hs *harness) stop() error {
	hs.cancel()
	select {
	case err := <-hs.done:
		hs.done <- err // for a second call
		return err
	case <-time.After(hs.cfg.StopTimeout + 5*time.Second):
		hs.tb.Fatal("worker did not stop")
		return nil
	}
}
