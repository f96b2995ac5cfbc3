package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// These tests run against a real 3-node cluster of their own
// (testkit.Cluster, skipped with -short): one cluster for all subtests,
// those that stop nodes last.

func TestCluster(t *testing.T) {
	c := testkit.Cluster(t)
	scram := func(mech string) Security {
		return Security{CAFile: c.CAFile, SASL: mech, User: c.ScramUser, Password: c.ScramPassword}
	}
	mtls := Security{CAFile: c.CAFile, CertFile: c.ClientCert, KeyFile: c.ClientKey}

	t.Run("SASL_SSL SCRAM-SHA-512", func(t *testing.T) { roundTrip(t, c.SASLSSL, scram(SASLScramSHA512)) })
	t.Run("SASL_SSL SCRAM-SHA-256", func(t *testing.T) { roundTrip(t, c.SASLSSL, scram(SASLScramSHA256)) })
	t.Run("SASL_SSL PLAIN", func(t *testing.T) {
		roundTrip(t, c.SASLSSL, Security{CAFile: c.CAFile, SASL: SASLPlain, User: c.PlainUser, Password: c.PlainPassword})
	})
	t.Run("mTLS", func(t *testing.T) { roundTrip(t, c.SSL, mtls) })

	t.Run("wrong password", func(t *testing.T) {
		s := scram(SASLScramSHA512)
		s.Password = "wrong-" + c.ScramPassword
		connFails(t, c.SASLSSL, s, nil, `SASL authentication failed for user "inlet" with SCRAM-SHA-512: wrong user or password`)
	})
	t.Run("unknown CA", func(t *testing.T) {
		s := scram(SASLScramSHA512)
		s.CAFile = c.OtherCAFile
		connFails(t, c.SASLSSL, s, nil, "the brokers' certificate is not signed by --kafka-tls-ca "+c.OtherCAFile)
	})
	t.Run("no client certificate", func(t *testing.T) {
		connFails(t, c.SSL, Security{CAFile: c.CAFile}, nil, "the broker ended the TLS handshake: it requires a client certificate")
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		s := Security{CAFile: c.CAFile, CertFile: c.OtherClientCert, KeyFile: c.OtherClientKey}
		connFails(t, c.SSL, s, nil, "the broker ended the TLS handshake: it refused the client certificate --kafka-tls-cert "+c.OtherClientCert)
	})
	t.Run("expired client certificate", func(t *testing.T) {
		s := Security{CAFile: c.CAFile, CertFile: c.ExpiredCert, KeyFile: c.ExpiredKey}
		// Refused before any connection...
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), "--kafka-tls-cert "+c.ExpiredCert+" expired on 2020-01-02") {
			t.Fatalf("Validate: %v", err)
		}
		// ...and, sent anyway, the broker closes the handshake.
		opts, err := s.opts(nil, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		connFails(t, c.SSL, s, opts, "the broker ended the TLS handshake: it refused the client certificate --kafka-tls-cert "+c.ExpiredCert)
	})
	t.Run("TLS to the plaintext listener", func(t *testing.T) {
		connFails(t, c.Plaintext, Security{CAFile: c.CAFile}, nil, "that address is probably not a TLS listener")
	})
	t.Run("plaintext to the TLS listener", func(t *testing.T) {
		connFails(t, c.SSL, Security{}, nil, "the broker answered in TLS: that listener requires TLS (--kafka-tls)")
	})

	t.Run("leader killed with acks all", func(t *testing.T) { leaderKill(t, c) })
	t.Run("rolling restart with acks all", func(t *testing.T) { rollingRestart(t, c) })
	t.Run("two of three nodes down", func(t *testing.T) { twoDown(t, c) })
}

// roundTrip produces records over brokers with s through the producer and
// reads them back over the same listener with s.
func roundTrip(t *testing.T, brokers []string, s Security) {
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.Security = s
	p, err := NewProducer(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := p.Ping(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(s.DescribeConnError(err))
	}
	topic := testkit.Unique(t, "sec-")
	recs := records(topic, 100)
	if err := p.ProduceSync(ctxFor(t, 30*time.Second), recs); err != nil {
		t.Fatal(s.DescribeConnError(err))
	}
	opts, err := s.Opts(nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxFor(t, 30*time.Second)
	got := map[string]bool{}
	for len(got) < len(recs) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				t.Errorf("fetching: %s", s.DescribeConnError(err))
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
	}
	if len(got) != len(recs) {
		t.Fatalf("read back %d of %d records", len(got), len(recs))
	}
	// The topic inlet auto-created has the cluster's replication.
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctxFor(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range td[topic].Partitions {
		if len(pd.Replicas) != 3 {
			t.Errorf("partition %d has %d replicas, want 3", pd.Partition, len(pd.Replicas))
		}
	}
}

// connFails checks that a producer with s on brokers fails its Ping, well
// before the context would end, with an error whose description holds
// want, on one line and without the password. With extra options, the
// producer has those instead of s's (s only describes the error).
func connFails(t *testing.T, brokers []string, s Security, extra []kgo.Opt, want string) {
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	if extra == nil {
		cfg.Security = s
	}
	logs, buf := testkit.NewLogBuffer()
	p, err := newProducer(cfg, logs, nil, extra...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const bound = 20 * time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*bound)
	defer cancel()
	err = p.Ping(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Ping succeeded")
	}
	if took > bound {
		t.Errorf("Ping failed after %v, not within %v: %v", took.Round(time.Millisecond), bound, err)
	}
	desc := s.ConnErr(err).Error()
	if !strings.Contains(desc, want) {
		t.Errorf("error %q\nwant it to say %q", desc, want)
	}
	if strings.Contains(desc, "\n") {
		t.Errorf("error is not one line: %q", desc)
	}
	if s.Password != "" && (strings.Contains(desc, s.Password) || strings.Contains(buf.String(), s.Password)) {
		t.Errorf("the password appears in the error or the logs")
	}
	t.Logf("failed in %v: %s", took.Round(time.Millisecond), desc)
}

// leaderKill kills the leader of partition 0 with SIGKILL under load and
// starts it again: the producer keeps going on a new leader and every
// acknowledged record is in the topic.
func leaderKill(t *testing.T, c *testkit.KafkaCluster) {
	l := startLoad(t, c)
	leader := l.leader(t, 0)
	l.waitAcked(t, 500, "before the kill")
	killedAt := l.mark()
	c.KillNode(int(leader))
	t.Logf("killed node %d, the leader of partition 0, after %d acknowledged records", leader, l.count())
	testkit.WaitFor(t, 90*time.Second, "records of partition 0 acknowledged by a new leader", func() bool { return l.since(0) >= 50 })
	t.Logf("partition 0 had a new leader %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	c.StartNode(int(leader))
	l.waitAcked(t, 500, "after the restart")
	l.verify(t)
}

// rollingRestart stops (SIGTERM) and starts each node in turn under load,
// waiting for every partition to be fully replicated again before the
// next: every acknowledged record is in the topic.
func rollingRestart(t *testing.T, c *testkit.KafkaCluster) {
	l := startLoad(t, c)
	l.waitAcked(t, 300, "before the first restart")
	for id := 1; id <= c.Nodes; id++ {
		c.StopNode(id)
		l.waitAcked(t, 200, fmt.Sprintf("with node %d stopped", id))
		c.StartNode(id)
		l.waitISR(t, c.Nodes)
		l.waitAcked(t, 200, fmt.Sprintf("after node %d restarted", id))
	}
	l.verify(t)
}

// twoDown kills two of the three nodes under load: fewer replicas than
// min.insync.replicas (and, the nodes being controllers too, no quorum)
// remain, so Kafka acknowledges nothing until they are back; then the
// producer goes on and every acknowledged record is in the topic.
func twoDown(t *testing.T, c *testkit.KafkaCluster) {
	l := startLoad(t, c)
	l.waitAcked(t, 300, "before the outage")
	c.KillNode(2)
	c.KillNode(3)
	killed := time.Now()
	// A batch in flight at the kill may still be acknowledged; after that
	// none is.
	testkit.WaitFor(t, 60*time.Second, "acknowledgements to stop with two nodes down", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return time.Since(l.lastAck) > 3*time.Second
	})
	quiet := l.count()
	time.Sleep(15 * time.Second) // the outage itself: nothing to wait for
	if n := l.count(); n != quiet {
		t.Errorf("%d records acknowledged with one node of three up (min.insync.replicas=2)", n-quiet)
	}
	c.StartNode(2)
	c.StartNode(3)
	t.Logf("nodes 2 and 3 back %v after the kill", time.Since(killed).Round(time.Millisecond))
	l.waitAcked(t, 300, "after the outage")
	l.verify(t)
}

// load is a producer writing acks=all batches to a topic of its own (3
// partitions, the cluster's replication 3 and min.insync.replicas 2) from
// several goroutines, recording what Kafka acknowledged.
type load struct {
	c     *testkit.KafkaCluster
	topic string
	adm   *kadm.Client
	p     *Producer
	stop  chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	acked    map[string]bool
	perPart  map[int32]int // acknowledged per partition since mark
	lastAck  time.Time
	maxGap   time.Duration
	failures int
	lastErr  error
}

func startLoad(t *testing.T, c *testkit.KafkaCluster) *load {
	l := &load{c: c, topic: testkit.Unique(t, "failover-"), stop: make(chan struct{}), acked: map[string]bool{}, perPart: map[int32]int{}}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.Plaintext...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	l.adm = kadm.NewClient(admCl)
	r, err := l.adm.CreateTopic(ctxFor(t, 30*time.Second), 3, -1, nil, l.topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	l.waitISR(t, 3)

	cfg := DefaultConfig()
	cfg.Brokers = c.Plaintext
	if l.p, err = NewProducer(cfg, testkit.Logger(t), nil); err != nil {
		t.Fatal(err)
	}
	const workers, batch = 4, 10
	for w := range workers {
		l.wg.Add(1)
		go l.work(w, batch)
	}
	t.Cleanup(func() {
		l.halt()
		_ = l.p.Close(context.Background())
	})
	return l
}

func (l *load) work(w, batch int) {
	defer l.wg.Done()
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		recs := make([]event.Record, batch)
		for i := range recs {
			id := fmt.Sprintf("w%d-%d-%d", w, seq, i)
			recs[i] = event.Record{Topic: l.topic, Key: []byte(id), Value: []byte(id)}
		}
		pos := make([]Position, batch)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := l.p.ProduceSyncAt(ctx, recs, pos)
		cancel()
		now := time.Now()
		l.mu.Lock()
		if err != nil {
			l.failures++
			l.lastErr = err
		} else {
			if !l.lastAck.IsZero() && now.Sub(l.lastAck) > l.maxGap {
				l.maxGap = now.Sub(l.lastAck)
			}
			l.lastAck = now
			for i := range recs {
				l.acked[string(recs[i].Value)] = true
				l.perPart[pos[i].Partition]++
			}
		}
		l.mu.Unlock()
	}
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// mark starts counting acknowledgements per partition again (since).
func (l *load) mark() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.perPart)
	return time.Now()
}

// since is the number of records of partition acknowledged since mark.
func (l *load) since(partition int32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perPart[partition]
}

// waitAcked waits until n more records are acknowledged.
func (l *load) waitAcked(t *testing.T, n int, when string) {
	t.Helper()
	want := l.count() + n
	testkit.WaitFor(t, 120*time.Second, fmt.Sprintf("%d acknowledged records %s", n, when), func() bool { return l.count() >= want })
}

// leader returns the leader of partition.
func (l *load) leader(t *testing.T, partition int32) int32 {
	t.Helper()
	td, err := l.adm.ListTopics(ctxFor(t, 10*time.Second), l.topic)
	if err != nil {
		t.Fatal(err)
	}
	pd, ok := td[l.topic].Partitions[partition]
	if !ok || pd.Leader < 0 {
		t.Fatalf("no leader for partition %d of %s", partition, l.topic)
	}
	return pd.Leader
}

// waitISR waits until every partition has a leader and n in-sync replicas.
func (l *load) waitISR(t *testing.T, n int) {
	t.Helper()
	testkit.WaitFor(t, 120*time.Second, fmt.Sprintf("%d in-sync replicas for every partition", n), func() bool {
		td, err := l.adm.ListTopics(context.Background(), l.topic)
		if err != nil || len(td[l.topic].Partitions) == 0 {
			return false
		}
		for _, pd := range td[l.topic].Partitions {
			if pd.Leader < 0 || len(pd.ISR) != n {
				return false
			}
		}
		return true
	})
}

// verify stops the load and reads the topic back: every acknowledged
// record must be in it.
func (l *load) verify(t *testing.T) {
	t.Helper()
	l.halt()
	if err := l.p.Flush(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := len(l.acked)
	t.Logf("%d records acknowledged, %d batches failed (last: %v); longest time without an acknowledgement %v",
		want, l.failures, l.lastErr, l.maxGap.Round(time.Millisecond))

	cl, err := kgo.NewClient(kgo.SeedBrokers(l.c.Plaintext...), kgo.ConsumeTopics(l.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	missing := want
	ctx := ctxFor(t, 60*time.Second)
	for missing > 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			seen[v]++
			if seen[v] == 1 && l.acked[v] {
				missing--
			}
		})
	}
	if missing > 0 {
		var some []string
		for id := range l.acked {
			if seen[id] == 0 && len(some) < 10 {
				some = append(some, id)
			}
		}
		t.Fatalf("%d of %d acknowledged records are not in the topic (lost), e.g. %v", missing, want, some)
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("read back every acknowledged record: 0 lost, %d duplicates", dups)
}
