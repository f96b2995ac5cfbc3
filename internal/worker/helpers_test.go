package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestMain fails the package's tests if a goroutine outlives them: every
// goroutine a worker starts is stopped by Run before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	brokers := testkit.Brokers(tb)
	service := testkit.Unique(tb, "")
	cfg := Config{Brokers: brokers, Service: service, Log: testkit.Logger(tb), Metrics: NewMetrics(nil), StopTimeout: 5 * time.Second}
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
func (hs *harness) send(id string, deadline time.Time, body []byte) {
	hs.tb.Helper()
	hs.produce(Request{ID: id, Deadline: deadline, Body: body})
}

// produce produces req to the worker's topic; a zero req.ReplyTo is the
// harness's reply topic.
func (hs *harness) produce(req Request) {
	hs.tb.Helper()
	if err := hs.cl.ProduceSync(context.Background(), hs.request(req)).FirstErr(); err != nil {
		hs.tb.Fatalf("producing request %s: %v", req.ID, err)
	}
}

// request is req's record as the gateway produces it (reply.RequestRecord);
// a zero req.ReplyTo is the harness's reply topic.
func (hs *harness) request(req Request) *kgo.Record {
	if req.ReplyTo == (reply.Address{}) {
		req.ReplyTo = reply.Address{Kind: "kafka", Name: hs.replyTopic}
	}
	rec := reply.RequestRecord(hs.cfg.Topic, &req)
	kr := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: make([]kgo.RecordHeader, len(rec.Headers))}
	for i, h := range rec.Headers {
		kr.Headers[i] = kgo.RecordHeader(h)
	}
	return kr
}

// replies reads the reply topic until n replies (not warm-ups) arrived, or
// fails the test after timeout. Reply bodies are never nil.
func (hs *harness) replies(n int, timeout time.Duration) map[string]reply.Reply {
	hs.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := map[string]reply.Reply{}
	for len(out) < n {
		fs := hs.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			hs.tb.Fatalf("got %d replies in %v, want %d", len(out), timeout, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			rep, err := reply.ParseReply(r.Key, r.Value, r.Headers)
			if err != nil {
				hs.tb.Errorf("reply %q: %v", r.Key, err)
				return
			}
			if rep.ID != string(r.Key) {
				hs.tb.Errorf("reply key %q, correlation id header %q", r.Key, rep.ID)
			}
			if rep.Body == nil {
				rep.Body = []byte{}
			}
			if !strings.HasPrefix(rep.ID, "warm-") {
				out[rep.ID] = rep
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
