package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// isoLoad is a closed loop of ProduceSync requests to one topic, each of
// n records keyed by caller, their values "caller/seq" in order per key.
type isoLoad struct {
	topic   string
	callers int
	n       int
	timeout time.Duration

	mu    sync.Mutex
	acked map[string]time.Time // values Kafka acknowledged, when sent
	reqs  []isoReq
}

type isoReq struct {
	at      time.Time // when it was sent
	latency time.Duration
	err     error
}

func (l *isoLoad) run(p *Producer, stop <-chan struct{}, wg *sync.WaitGroup) {
	l.acked = map[string]time.Time{}
	for c := range l.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				recs := make([]event.Record, l.n)
				for i := range recs {
					recs[i] = event.Record{Topic: l.topic, Key: fmt.Appendf(nil, "c%d", c), Value: fmt.Appendf(nil, "c%d/%d", c, seq)}
					seq++
				}
				ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
				start := time.Now()
				err := p.ProduceSync(ctx, recs)
				cancel()
				lat := time.Since(start)
				l.mu.Lock()
				l.reqs = append(l.reqs, isoReq{at: start, latency: lat, err: err})
				if err == nil {
					for _, r := range recs {
						l.acked[string(r.Value)] = start
					}
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond) // a client's back-off after a 503
				}
			}
		}()
	}
}

// window returns the p99 latency of the requests sent in [from, to), their
// number and how many failed, by error.
func (l *isoLoad) window(from, to time.Time) (p99 time.Duration, n int, failed map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	failed = map[string]int{}
	var lats []time.Duration
	for _, r := range l.reqs {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		lats = append(lats, r.latency)
		if r.err != nil {
			switch {
			case errors.Is(r.err, ErrFull):
				failed["full"]++
			case errors.Is(r.err, context.DeadlineExceeded):
				failed["timeout"]++
			default:
				failed[r.err.Error()]++
			}
		}
	}
	if len(lats) == 0 {
		return 0, 0, failed
	}
	slices.Sort(lats)
	return lats[len(lats)*99/100], len(lats), failed
}

// check reads the topic back: every value acknowledged for a request sent
// since since is there, and each key's values are in the order they were
// sent.
func (l *isoLoad) check(t *testing.T, brokers []string, since time.Time) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	want := 0
	for _, at := range l.acked {
		if !at.Before(since) {
			want++
		}
	}
	got := testkit.Consume(t, brokers, l.topic, 60*time.Second, func(rs []testkit.Record) bool {
		seen := 0
		for _, r := range rs {
			if at, ok := l.acked[string(r.Value)]; ok && !at.Before(since) {
				seen++
			}
		}
		return seen >= want
	})
	last := map[string]int{}
	for _, r := range got {
		_, s, _ := strings.Cut(string(r.Value), "/")
		seq, _ := strconv.Atoi(s)
		if prev, ok := last[r.Key]; ok && seq <= prev {
			t.Errorf("topic %s key %s: %d after %d", l.topic, r.Key, seq, prev)
		}
		last[r.Key] = seq
	}
	t.Logf("topic %s: %d acknowledged since %v, all read back among %d", l.topic, want, since.Format(time.TimeOnly), len(got))
}

// TestTopicIsolation: while Kafka refuses every write to topic B (deleted,
// on a private broker that does not create topics), requests to topic A, through
// the same producer, keep their latency and are never refused; B's
// requests are refused (a timeout or ErrFull, which the gateway answers
// 503); no acknowledged record is lost and each key's records are in
// order, in both topics.
func TestTopicIsolation(t *testing.T) {
	t.Parallel()
	kc := testkit.PrivateKafkaWith(t, "auto.create.topics.enable=false")
	brokers := kc.Brokers
	a, b := testkit.Unique(t, "iso-a-"), testkit.Unique(t, "iso-b-")
	testkit.CreateTopic(t, brokers, a, 3, nil)
	testkit.CreateTopic(t, brokers, b, 3, nil)
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.MaxBufferedRecords = 4000
	p, err := newProducer(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	la := &isoLoad{topic: a, callers: 4, n: 5, timeout: 2 * time.Second}
	lb := &isoLoad{topic: b, callers: 40, n: 20, timeout: time.Second}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(halt) // also when the test fails early
	t0 := time.Now()
	la.run(p, stop, &wg)
	lb.run(p, stop, &wg)
	// 15 s shows it with a wide margin; INLET_TEST_ISOLATION_OUTAGE=60s
	// runs the proof.
	const before = 6 * time.Second
	outage := 15 * time.Second
	if v := os.Getenv("INLET_TEST_ISOLATION_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("INLET_TEST_ISOLATION_OUTAGE: %v", err)
		}
		outage = d
	}
	time.Sleep(before)
	t1 := time.Now()
	testkit.DeleteTopic(t, brokers, b)
	time.Sleep(outage)
	// B holds about its share, and refuses; A holds few records and does
	// not fail. B's callers check the share at the same moment and may
	// each pass it once (topicFits): at most one request each over it.
	loads := p.TopicLoads()
	la1, lb1 := loads[a], loads[b]
	t.Logf("loads at the end of the outage: A %+v, B %+v", la1, lb1)
	if over := int64(lb.callers * lb.n); lb1.Refused == 0 || lb1.Records > lb1.ShareRecords+over || lb1.Records < lb1.ShareRecords/2 {
		t.Errorf("B's load in its outage: %+v, want about its share, and refusals", lb1)
	}
	if la1.Refused != 0 || la1.Failing.Failing != 0 || la1.Records > lb1.ShareRecords/10 {
		t.Errorf("A's load in B's outage: %+v, want few records, no refusal, no failure", la1)
	}
	t2 := time.Now()
	testkit.CreateTopic(t, brokers, b, 3, nil)
	// B is taken again once the producer learned the new topic (its
	// records of the old one fail with UNKNOWN_TOPIC_ID, or at the
	// delivery timeout).
	testkit.WaitFor(t, 90*time.Second, "B's records acknowledged again", func() bool {
		_, n, failed := lb.window(t2, time.Now())
		for _, c := range failed {
			n -= c
		}
		return n > 0
	})
	t.Logf("B taken again %v after it was created again", time.Since(t2).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	halt()

	p99a0, na0, fa0 := la.window(t0.Add(3*time.Second), t1) // past the start
	p99a1, na1, fa1 := la.window(t1, t2)
	_, nb1, fb1 := lb.window(t1.Add(2*time.Second), t2)
	t.Logf("A before: %d requests, p99 %v, failed %v", na0, p99a0, fa0)
	t.Logf("A during B's outage: %d requests, p99 %v, failed %v", na1, p99a1, fa1)
	t.Logf("B during its outage: %d requests, failed %v", nb1, fb1)
	if len(fa1) > 0 || len(fa0) > 0 {
		t.Errorf("requests to A failed while B was refused: %v before, %v during", fa0, fa1)
	}
	if p99a1 > 2*p99a0+100*time.Millisecond {
		t.Errorf("A's p99 went from %v to %v while B was refused", p99a0, p99a1)
	}
	okB := 0
	for _, c := range fb1 {
		okB += c
	}
	if nb1 == 0 || okB != nb1 {
		t.Errorf("B during its outage: %d requests, %d refused; want all refused", nb1, okB)
	}
	la.check(t, brokers, t0)
	lb.check(t, brokers, t2) // B's records before the outage went with it
}

// TestTopicShare fills topic A's share of the buffer with records that
// linger until Flush: A's next records are refused at once with
// ErrTopicFull (an ErrFull) on every produce path, counted for A, while
// topic B still takes its own; once A's are delivered A takes records
// again, and the per-topic counts are back to zero.
func TestTopicShare(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	a, b := testkit.Unique(t, "share-a-"), testkit.Unique(t, "share-b-")
	p := testProducer(t, brokers, func(c *Config) { held(c); c.MaxBufferedRecords = 100 }) // 90 usable, 45 per topic
	d, err := p.Produce(records(a, 45))
	if err != nil {
		t.Fatal(err)
	}
	one := records(a, 1)
	if _, err := p.Produce(one); !errors.Is(err, ErrTopicFull) || !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), a) {
		t.Fatalf("Produce past A's share: %v, want ErrTopicFull naming A", err)
	}
	if err := p.TryProduce(one); !errors.Is(err, ErrTopicFull) {
		t.Fatalf("TryProduce past A's share: %v, want ErrTopicFull", err)
	}
	if err := p.ProduceFunc(&one[0], func(error) { t.Error("done called for a refused record") }); !errors.Is(err, ErrTopicFull) {
		t.Fatalf("ProduceFunc past A's share: %v, want ErrTopicFull", err)
	}
	// A request with records for both topics is refused whole: A has no room.
	mixed := append(records(b, 2), records(a, 1)...)
	if err := p.TryProduce(mixed); !errors.Is(err, ErrTopicFull) || !strings.Contains(err.Error(), a) {
		t.Fatalf("TryProduce of A and B past A's share: %v, want ErrTopicFull", err)
	}
	db, err := p.Produce(records(b, 40))
	if err != nil {
		t.Fatalf("B while A holds its share: %v", err)
	}
	loads := p.TopicLoads()
	if la, lb := loads[a], loads[b]; la.Records != 45 || la.Refused != 4 || lb.Records != 40 || lb.Refused != 0 || la.Bytes <= 0 {
		t.Fatalf("loads A %+v, B %+v; want 45 buffered and 4 refused, 40 and 0", la, lb)
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Delivery{d, db} {
		if err := d.Wait(ctxFor(t, time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if l := p.TopicLoads()[a]; l.Records != 0 || l.Bytes != 0 {
		t.Fatalf("A's load after delivery: %+v, want none", l)
	}
	if err := p.TryProduce(records(a, 45)); err != nil {
		t.Fatalf("A once delivered: %v", err)
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A batch larger than the share goes in when its topic holds nothing
	// (the buffer still bounds it): else a spool window of more records
	// than the share would be refused for ever, stalling the forwarder.
	if err := p.TryProduce(records(a, 60)); err != nil {
		t.Fatalf("60 records of an empty topic, share 45: %v, want them taken", err)
	}
	if err := p.TryProduce(records(a, 1)); !errors.Is(err, ErrTopicFull) {
		t.Fatalf("A past its share after the large batch: %v, want ErrTopicFull", err)
	}
}
