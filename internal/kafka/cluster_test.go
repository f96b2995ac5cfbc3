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
// the one that kills a node last.

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

// leaderKill produces with acks=all from several goroutines while the
// leader of partition 0 is killed with SIGKILL, then started again, and
// checks that the producer kept going on a new leader and that every
// acknowledged record is in the topic.
func leaderKill(t *testing.T, c *testkit.KafkaCluster) {
	topic := testkit.Unique(t, "failover-")
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.Plaintext...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	r, err := adm.CreateTopic(ctxFor(t, 30*time.Second), 3, -1, nil, topic) // the cluster's replication (3) and min.insync.replicas (2)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	var leader int32 = -1
	testkit.WaitFor(t, 30*time.Second, "a leader for partition 0", func() bool {
		td, err := adm.ListTopics(context.Background(), topic)
		if err != nil {
			return false
		}
		pd, ok := td[topic].Partitions[0]
		if !ok || pd.Leader < 0 || len(pd.ISR) != 3 {
			return false
		}
		leader = pd.Leader
		return true
	})

	cfg := DefaultConfig()
	cfg.Brokers = c.Plaintext
	p, err := NewProducer(cfg, testkit.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		lastAck  time.Time
		maxGap   time.Duration
		killedAt time.Time
		afterP0  int // records acknowledged on partition 0 after the kill
		failures int
		lastErr  error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers, batch = 4, 10
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				recs := make([]event.Record, batch)
				for i := range recs {
					id := fmt.Sprintf("w%d-%d-%d", w, seq, i)
					recs[i] = event.Record{Topic: topic, Key: []byte(id), Value: []byte(id)}
				}
				pos := make([]Position, batch)
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				err := p.ProduceSyncAt(ctx, recs, pos)
				cancel()
				now := time.Now()
				mu.Lock()
				if err != nil {
					failures++
					lastErr = err
				} else {
					if !lastAck.IsZero() && now.Sub(lastAck) > maxGap {
						maxGap = now.Sub(lastAck)
					}
					lastAck = now
					for i := range recs {
						acked[string(recs[i].Value)] = true
						if !killedAt.IsZero() && pos[i].Partition == 0 {
							afterP0++
						}
					}
				}
				mu.Unlock()
			}
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	testkit.WaitFor(t, 60*time.Second, "500 acknowledged records before the kill", func() bool { return count() >= 500 })
	mu.Lock()
	killedAt = time.Now()
	before := len(acked)
	mu.Unlock()
	c.KillNode(int(leader))
	t.Logf("killed node %d, the leader of partition 0, after %d acknowledged records", leader, before)

	testkit.WaitFor(t, 90*time.Second, "records acknowledged on partition 0 by a new leader", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return afterP0 >= 50
	})
	failover := time.Since(killedAt)
	c.StartNode(int(leader))
	restarted := count()
	testkit.WaitFor(t, 90*time.Second, "500 more acknowledged records after the restart", func() bool { return count() >= restarted+500 })
	close(stop)
	wg.Wait()
	if err := p.Flush(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	want := len(acked)
	t.Logf("%d records acknowledged (%d before the kill), %d batches failed (last: %v); partition 0 had a new leader %v after the kill; longest gap without an acknowledgement %v",
		want, before, failures, lastErr, failover.Round(time.Millisecond), maxGap.Round(time.Millisecond))
	mu.Unlock()

	// Read the topic back: every acknowledged record must be there.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Plaintext...), kgo.ConsumeTopics(topic),
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
			if seen[v] == 1 && acked[v] {
				missing--
			}
		})
	}
	if missing > 0 {
		var some []string
		for id := range acked {
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
