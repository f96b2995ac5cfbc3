package kafka

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testProducer returns a producer of the default config on brokers, changed
// by mod, closed at the end of the test.
func testProducer(tb testing.TB, brokers []string, mod func(*Config), opts ...kgo.Opt) *Producer {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	if mod != nil {
		mod(&cfg)
	}
	p, err := newProducer(cfg, testkit.Logger(tb), nil, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// held keeps records in the producer's buffer until Flush: the longest
// linger, longer than any test.
func held(c *Config) { c.Linger = time.Minute }

func records(topic string, n int) []event.Record {
	recs := make([]event.Record, n)
	for i := range recs {
		recs[i] = event.Record{
			Topic:   topic,
			Key:     fmt.Appendf(nil, "k%d", i),
			Value:   fmt.Appendf(nil, "v%d", i),
			Headers: []event.Header{{Key: "h", Value: fmt.Appendf(nil, "h%d", i)}},
		}
	}
	return recs
}

func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func TestProduceSync(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	p := testProducer(t, brokers, nil)
	topic := testkit.Unique(t, "produce-")
	recs := records(topic, 200)
	recs[7].Key = []byte{} // sent without a key
	recs[8].Headers = nil
	if err := p.ProduceSync(ctxFor(t, 10*time.Second), recs); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctxFor(t, time.Second), nil); err != nil {
		t.Fatalf("ProduceSync of no records: %v", err)
	}
	got := testkit.ConsumeN(t, brokers, topic, len(recs), 300*time.Millisecond)
	seen := map[string]bool{}
	for _, r := range got {
		v := string(r.Value)
		if seen[v] {
			t.Fatalf("%s consumed twice", v)
		}
		seen[v] = true
		var i int
		if _, err := fmt.Sscanf(v, "v%d", &i); err != nil {
			t.Fatalf("value %q", v)
		}
		wantKey, wantHeaders := fmt.Sprintf("k%d", i), map[string]string{"h": fmt.Sprintf("h%d", i)}
		switch i {
		case 7:
			wantKey = ""
		case 8:
			wantHeaders = map[string]string{}
		}
		if r.Key != wantKey || fmt.Sprint(r.Headers) != fmt.Sprint(wantHeaders) {
			t.Errorf("%s: key %q, headers %v; want %q, %v", v, r.Key, r.Headers, wantKey, wantHeaders)
		}
	}
}

// TestProduceSyncReusesDeliveries: successful ProduceSync calls give their
// Delivery, with the room of its kgo records, to the next; concurrent calls
// of different sizes each deliver exactly their records, with their keys,
// headers and no field left from an earlier call (a partition, an offset).
func TestProduceSyncReusesDeliveries(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	p := testProducer(t, brokers, nil)
	topic := testkit.Unique(t, "reuse-")
	const workers, calls = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range calls {
				n := 1 + (w+c)%7
				recs := make([]event.Record, n)
				for i := range recs {
					recs[i] = event.Record{Topic: topic, Value: fmt.Appendf(nil, "w%d-c%d-%d", w, c, i)}
					if (i+c)%2 == 0 { // every other one keyed and with a header, not the same each call
						recs[i].Key = fmt.Appendf(nil, "k-w%d-c%d-%d", w, c, i)
						recs[i].Headers = []event.Header{{Key: "h", Value: recs[i].Key}}
					}
				}
				if err := p.ProduceSync(ctxFor(t, 10*time.Second), recs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := 0
	for w := range workers {
		for c := range calls {
			want += 1 + (w+c)%7
		}
	}
	got := testkit.ConsumeN(t, brokers, topic, want, 300*time.Millisecond)
	seen := map[string]bool{}
	for _, r := range got {
		v := string(r.Value)
		if seen[v] {
			t.Fatalf("%s consumed twice", v)
		}
		seen[v] = true
		var w, c, i int
		if _, err := fmt.Sscanf(v, "w%d-c%d-%d", &w, &c, &i); err != nil {
			t.Fatalf("value %q", v)
		}
		wantKey, wantHeaders := "", map[string]string{}
		if (i+c)%2 == 0 {
			wantKey = "k-" + v
			wantHeaders = map[string]string{"h": wantKey}
		}
		if r.Key != wantKey || fmt.Sprint(r.Headers) != fmt.Sprint(wantHeaders) {
			t.Errorf("%s: key %q, headers %v; want %q, %v", v, r.Key, r.Headers, wantKey, wantHeaders)
		}
	}
	if len(seen) != want {
		t.Fatalf("consumed %d distinct records, want %d", len(seen), want)
	}
}

// TestSoftLimit fills the buffer with records that linger until Flush: past
// nine tenths of either limit Produce and TryProduce refuse at once with
// ErrFull, enqueuing nothing, and take records again once they are delivered.
func TestSoftLimit(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	topic := testkit.Unique(t, "full-")
	one := records(topic, 1)
	one[0].Value = make([]byte, 1000)
	// kgo counts a record without its topic; room adds the topic of the new one.
	kgoSize, size := one[0].Size()-len(topic), one[0].Size()
	cases := []struct {
		name string
		mod  func(*Config)
	}{
		{"records", func(c *Config) { c.MaxBufferedRecords = 10 }}, // room for 9
		{"bytes", func(c *Config) { c.MaxBufferedBytes = (8*kgoSize + size + 9) * 10 / 9 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One topic: the whole buffer (TestTopicShare tests the shares).
			p := testProducer(t, brokers, func(c *Config) { held(c); c.TopicShare = 1; tc.mod(c) })
			var ds []*Delivery
			for i := range 9 {
				d, err := p.Produce(one)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				ds = append(ds, d)
			}
			if _, err := p.Produce(one); !errors.Is(err, ErrFull) {
				t.Fatalf("Produce of a 10th record: %v, want ErrFull", err)
			}
			if err := p.TryProduce(one); !errors.Is(err, ErrFull) {
				t.Fatalf("TryProduce of a 10th record: %v, want ErrFull", err)
			}
			if err := p.ProduceFunc(&one[0], func(error) { t.Error("done called for a refused record") }); !errors.Is(err, ErrFull) {
				t.Fatalf("ProduceFunc of a 10th record: %v, want ErrFull", err)
			}
			if err := p.ProduceSync(ctxFor(t, time.Second), one); !errors.Is(err, ErrFull) {
				t.Fatalf("ProduceSync of a 10th record: %v, want ErrFull", err)
			}
			if n := p.Client().BufferedProduceRecords(); n != 9 {
				t.Fatalf("%d records buffered after the refusals, want 9", n)
			}

			if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if err := d.Wait(ctxFor(t, time.Second)); err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
			}
			if err := p.TryProduce(records(topic, 9)); err != nil {
				t.Fatalf("TryProduce once delivered: %v", err)
			}
			if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			d, err := p.Produce(one)
			if err != nil {
				t.Fatalf("Produce once delivered: %v", err)
			}
			if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := d.Wait(ctxFor(t, time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRecordRefused: a record that Kafka refuses, among valid ones, fails
// ProduceSync with Kafka's error. The request is not atomic: the other
// records are delivered, except (when BatchMaxBytes exceeds what the broker
// takes) those in the refused record's partition batch, which fail with it.
// Either way each record's outcome is true: every record acknowledged is in
// Kafka once, and no failed one is.
func TestRecordRefused(t *testing.T) {
	t.Parallel()
	big := make([]byte, 2<<20) // random, so that compression does not shrink it
	rand.Read(big)
	cases := []struct {
		name     string
		real     bool // only a real Kafka refuses it
		batchMax int32
		bad      event.Record
		want     error
		others   bool // all the other records are delivered
	}{
		// kgo refuses it before sending: larger than a batch.
		{"larger than a batch", false, 0, event.Record{Value: big}, kerr.MessageTooLarge, true},
		// The broker refuses its batch: larger than max.message.bytes.
		{"larger than the broker takes", false, 4 << 20, event.Record{Value: big}, kerr.MessageTooLarge, false},
		// The development broker takes any topic name.
		{"invalid topic", true, 0, event.Record{Topic: "not a topic!", Value: []byte("x")}, kerr.InvalidTopicException, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var brokers []string
			if tc.real {
				if os.Getenv("INLET_TEST_BROKERS") == "" {
					t.Skip("needs a real Kafka (INLET_TEST_BROKERS)")
				}
				brokers = testkit.Brokers(t)
			} else {
				brokers = testkit.DevBroker(t, "")
			}
			p := testProducer(t, brokers, func(c *Config) {
				if tc.batchMax > 0 {
					c.BatchMaxBytes = tc.batchMax
				}
			})
			request := func(topic string) []event.Record {
				recs := records(topic, 12)
				bad := tc.bad
				if bad.Topic == "" {
					bad.Topic = topic
				}
				recs[2] = bad
				return recs
			}
			wantErr := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, tc.want) || errors.Is(err, ErrFull) || !strings.HasPrefix(err.Error(), "producing to kafka: ") {
					t.Fatalf("%s: %v, want %v", what, err, tc.want)
				}
			}
			wantErr("ProduceSync", p.ProduceSync(ctxFor(t, 20*time.Second), request(testkit.Unique(t, "refused-"))))

			// The same request record by record, to learn each one's outcome.
			topic := testkit.Unique(t, "refused-")
			recs := request(topic)
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make([]error, len(recs))
			for i := range recs {
				wg.Add(1)
				if err := p.ProduceFunc(&recs[i], func(err error) {
					mu.Lock()
					errs[i] = err
					mu.Unlock()
					wg.Done()
				}); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			wantErr("the refused record", errs[2])
			acked := map[string]bool{}
			for i, err := range errs {
				if err == nil {
					acked[string(recs[i].Value)] = true
				} else if i != 2 && tc.others {
					t.Errorf("record %d: %v", i, err)
				}
			}
			got := testkit.ConsumeN(t, brokers, topic, len(acked), 300*time.Millisecond)
			for _, r := range got {
				if !acked[string(r.Value)] {
					t.Errorf("consumed %.10q, not acknowledged (or twice)", r.Value)
				}
				delete(acked, string(r.Value))
			}
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		full bool
	}{
		{"kgo buffer full", kgo.ErrMaxBuffered, true},
		{"kgo buffer full, wrapped", fmt.Errorf("x: %w", kgo.ErrMaxBuffered), true},
		{"message too large", kerr.MessageTooLarge, false},
		{"invalid topic", kerr.InvalidTopicException, false},
		{"delivery timeout", kgo.ErrRecordTimeout, false},
		{"retries", kgo.ErrRecordRetries, false},
		{"client closed", kgo.ErrClientClosed, false},
		{"context", context.DeadlineExceeded, false},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify(tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("classify(%v) = %v: lost the cause", tc.err, got)
			}
			if errors.Is(got, ErrFull) != tc.full {
				t.Errorf("classify(%v) = %v: ErrFull %v, want %v", tc.err, got, !tc.full, tc.full)
			}
			if !tc.full && !strings.HasPrefix(got.Error(), "producing to kafka: ") {
				t.Errorf("classify(%v) = %q, want it to say producing to kafka", tc.err, got)
			}
		})
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		broker func(testing.TB) string
		ok     bool
	}{
		{"live", func(tb testing.TB) string { return testkit.DevBroker(tb, "")[0] }, true},
		{"refused", testkit.FreeAddr, false},
		{"silent", func(tb testing.TB) string { return newGate(tb, testkit.FreeAddr(tb), true).Addr() }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := testProducer(t, []string{tc.broker(t)}, nil)
			const deadline = 500 * time.Millisecond
			start := time.Now()
			err := p.Ping(ctxFor(t, deadline))
			if took := time.Since(start); took > deadline+250*time.Millisecond {
				t.Errorf("Ping took %v with a %v deadline", took, deadline)
			}
			if (err == nil) != tc.ok || err != nil && !strings.HasPrefix(err.Error(), "pinging kafka: ") {
				t.Fatalf("Ping: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestDeliveryWait(t *testing.T) {
	t.Parallel()
	p := testProducer(t, testkit.DevBroker(t, ""), held)
	d, err := p.Produce(records(testkit.Unique(t, "wait-"), 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(ctxFor(t, 50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait of lingering records: %v, want the deadline", err)
	}
	select {
	case <-d.Done():
		t.Fatal("Done closed before delivery")
	default:
	}
	if d.Err() != nil {
		t.Fatalf("Err before delivery: %v", d.Err())
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(ctxFor(t, time.Second)); err != nil {
		t.Fatalf("Wait again after delivery: %v", err)
	}
	<-d.Done()
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
}

// TestDeliveryWaitsForEveryRecord: a request is answered only once every
// one of its records is settled, not at the first: one record fails at
// once (larger than a batch) while the others linger, and the delivery
// stays open until they are delivered too, then reports the failure.
func TestDeliveryWaitsForEveryRecord(t *testing.T) {
	t.Parallel()
	p := testProducer(t, testkit.DevBroker(t, ""), held)
	recs := records(testkit.Unique(t, "every-"), 5)
	recs[1].Value = make([]byte, 2<<20)
	d, err := p.Produce(recs)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the record larger than a batch to fail", func() bool { return d.Err() != nil })
	select {
	case <-d.Done():
		t.Fatal("Done closed at the first failure, with four records still lingering")
	default:
	}
	if err := p.Flush(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(ctxFor(t, time.Second)); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("Wait: %v, want the record too large", err)
	}
}

// TestCloseFlushes: records lingering when Close is called are delivered.
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	brokers := testkit.DevBroker(t, "")
	topic := testkit.Unique(t, "close-")
	p := testProducer(t, brokers, held)
	d, err := p.Produce(records(topic, 50))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(ctxFor(t, time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctxFor(t, time.Second)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	testkit.ConsumeN(t, brokers, topic, 50, 300*time.Millisecond)
}

// TestCloseUnreachable: Close returns ctx's error by ctx's deadline when
// Kafka does not take the records, and the records fail.
func TestCloseUnreachable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// start returns the broker's address and, if the producer should
		// reach it first, a gate that then stops it answering.
		start func(testing.TB) (string, *gate)
	}{
		{"refused", func(tb testing.TB) (string, *gate) { return testkit.FreeAddr(tb), nil }},
		{"silent", func(tb testing.TB) (string, *gate) { return newGate(tb, testkit.FreeAddr(tb), true).Addr(), nil }},
		{"halted", func(tb testing.TB) (string, *gate) {
			return testkit.DevBroker(tb, "")[0], newGate(tb, "", false)
		}},
		{"real halted", func(tb testing.TB) (string, *gate) { // halts the connections, not the broker
			if os.Getenv("INLET_TEST_BROKERS") == "" {
				tb.Skip("needs a real Kafka (INLET_TEST_BROKERS)")
			}
			return testkit.Brokers(tb)[0], newGate(tb, "", false)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, g := tc.start(t)
			var opts []kgo.Opt
			if g != nil { // every connection through the gate, whatever the metadata says
				opts = append(opts, kgo.Dialer(g.DialContext))
			}
			p := testProducer(t, []string{addr}, nil, opts...)
			topic := testkit.Unique(t, "unreachable-")
			if g != nil {
				if err := p.ProduceSync(ctxFor(t, 10*time.Second), records(topic, 1)); err != nil {
					t.Fatal(err)
				}
				g.Halt()
			}
			d, err := p.Produce(records(topic, 10))
			if err != nil {
				t.Fatal(err)
			}
			const deadline = 300 * time.Millisecond
			start := time.Now()
			err = p.Close(ctxFor(t, deadline))
			if took := time.Since(start); took > deadline+500*time.Millisecond {
				t.Errorf("Close took %v with a %v deadline", took, deadline)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close: %v, want the deadline", err)
			}
			if err := d.Wait(ctxFor(t, 5*time.Second)); !errors.Is(err, kgo.ErrClientClosed) {
				t.Fatalf("records after Close: %v, want them failed", err)
			}
		})
	}
}

// TestUndeliveredLog: records lost with TryProduce are counted each, and
// logged once per interval, not once per record.
func TestUndeliveredLog(t *testing.T) {
	t.Parallel()
	log, buf := testkit.NewLogBuffer()
	cfg := DefaultConfig()
	cfg.Brokers = []string{testkit.FreeAddr(t)}
	p, err := NewProducer(cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for range n / 5 {
		if err := p.TryProduce(records("lost", 5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctxFor(t, 100*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, "every record counted undelivered", func() bool {
		return testutil.ToFloat64(p.metrics.Undelivered) == n
	})
	if c := buf.Count("not delivered"); c != 1 {
		t.Fatalf("%d lines for %d undelivered records, want 1:\n%s", c, n, buf)
	}
	if c := buf.Count("level=ERROR"); c > 2 { // the line above and Close's
		t.Fatalf("%d error lines:\n%s", c, buf)
	}
}

// gate stands between the producer and a broker and can halt: it then
// holds its connections open and forwards nothing, like a stopped process.
// A gate made with a backend listens and forwards to it; kgo.Dialer with
// DialContext sends every connection of a client through the gate,
// including those to the brokers the metadata names.
type gate struct {
	ln      net.Listener // nil without a backend
	backend string
	wg      sync.WaitGroup

	mu     sync.Mutex
	halted bool
	conns  []net.Conn
}

// newGate starts a gate to backend, halted from the start if halted, and
// stops it at the end of the test.
func newGate(tb testing.TB, backend string, halted bool) *gate {
	tb.Helper()
	g := &gate{backend: backend, halted: halted}
	tb.Cleanup(g.close)
	if backend == "" {
		return g
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g.ln = ln
	g.wg.Add(1)
	go g.accept()
	return g
}

func (g *gate) Addr() string { return g.ln.Addr().String() }

// Halt stops forwarding; the connections stay open.
func (g *gate) Halt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.halted = true
}

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.forward(c, g.backend)
	}
}

// DialContext connects to addr through the gate.
func (g *gate) DialContext(_ context.Context, _, addr string) (net.Conn, error) {
	c, s := net.Pipe()
	g.forward(s, addr)
	return c, nil
}

// forward pipes c to addr, or holds it if the gate is halted.
func (g *gate) forward(c net.Conn, addr string) {
	g.mu.Lock()
	g.conns = append(g.conns, c)
	halted := g.halted
	g.mu.Unlock()
	if halted {
		return // held open, never answered
	}
	b, err := net.Dial("tcp", addr)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns = append(g.conns, b)
	g.mu.Unlock()
	g.wg.Add(2)
	go g.pipe(b, c)
	go g.pipe(c, b)
}

// pipe copies from src to dst until either closes or the gate halts.
func (g *gate) pipe(dst, src net.Conn) {
	defer g.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		g.mu.Lock()
		halted := g.halted
		g.mu.Unlock()
		if halted {
			_, _ = io.Copy(io.Discard, src) // until close
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *gate) close() {
	if g.ln != nil {
		g.ln.Close()
	}
	g.mu.Lock()
	for _, c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "no brokers"},
		{"compression", func(c *Config) { c.Compression = "brotli" }, `unknown compression "brotli"`},
		{"compression case", func(c *Config) { c.Compression = "ZSTD" }, ""},
		{"no bytes", func(c *Config) { c.MaxBufferedBytes = 0 }, "must be positive"},
		{"no records", func(c *Config) { c.MaxBufferedRecords = -1 }, "must be positive"},
		{"no topic share", func(c *Config) { c.TopicShare = 0 }, "not in (0, 1]"},
		{"topic share above 1", func(c *Config) { c.TopicShare = 1.5 }, "not in (0, 1]"},
		{"whole buffer per topic", func(c *Config) { c.TopicShare = 1 }, ""},
		{"negative linger", func(c *Config) { c.Linger = -time.Millisecond }, "must not be negative"},
		{"long linger", func(c *Config) { c.Linger = 2 * time.Minute }, "longer than a minute"},
		{"negative delivery timeout", func(c *Config) { c.DeliveryTimeout = -time.Second }, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			c.Brokers = []string{"127.0.0.1:9092"}
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
			if tc.want != "" {
				if _, err := NewProducer(c, testkit.Logger(t), nil); err == nil {
					t.Fatal("NewProducer took an invalid config")
				}
			}
		})
	}
}

// TestWaitTimeoutIsUnhealthy: a ProduceSync whose deadline passes before
// Kafka acknowledges counts in Health until a record is acknowledged. With
// too few in-sync replicas Kafka answers metadata and keeps the records
// (no record fails before --delivery-timeout), and readiness must see it.
func TestWaitTimeoutIsUnhealthy(t *testing.T) {
	p := testProducer(t, testkit.DevBroker(t, ""), held) // records wait in the buffer: no ack in time
	topic := testkit.Unique(t, "wait")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.ProduceSync(ctx, records(topic, 2)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ProduceSync = %v, want a deadline", err)
	}
	if h := p.Health(); h.Failing != 1 || h.Err == nil || !strings.Contains(h.Err.Error(), "acknowledgement") {
		t.Fatalf("Health after a timed-out wait = %+v, want 1 failing with the wait's error", h)
	}
	// A caller that went away is not Kafka's fault.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	_ = p.ProduceSync(cctx, records(topic, 1))
	if h := p.Health(); h.Failing != 1 {
		t.Fatalf("Health after a cancelled wait = %+v, want still 1", h)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "health reset by an acknowledgement", func() bool { return p.Health().Failing == 0 })
}
