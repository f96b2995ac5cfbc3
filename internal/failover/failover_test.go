package failover

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// suite is the cluster the scenarios share.
type suite struct {
	c      *testkit.KafkaCluster
	adm    *kadm.Client
	topics []string // created so far: restore waits for their ISRs
}

// TestFailover runs the scenarios one after the other on one 3-node
// cluster (see the package doc), every node restored between them.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no 3-node cluster")
	}
	s := &suite{c: testkit.Cluster(t)}
	s.adm = admin(t, s.c)
	testkit.Binary(t) // built once, before the first scenario's clock starts
	t.Logf("cluster of %d nodes in %s, PLAINTEXT %v", s.c.Nodes, s.c.Dir, s.c.Plaintext)

	t.Run("leader kill", s.leaderKill)
	t.Run("two down", s.twoDown)
	t.Run("rolling restart", s.rollingRestart)
}

// begin restores every node (a scenario that failed may have left some
// down) and returns a new events topic for the scenario.
func (s *suite) begin(t *testing.T) string {
	t.Helper()
	for id := 1; id <= s.c.Nodes; id++ {
		s.c.StartNode(id) // waits until it is in the cluster; nothing to do if it runs
	}
	if len(s.topics) > 0 {
		waitISR(t, s.adm, s.c.Nodes, s.topics...)
	}
	topic := testkit.Unique(t, "events-")
	s.topics = append(s.topics, topic)
	return topic
}

// leaderKill: the leader of the busiest partition of the events topic is
// killed with SIGKILL under a steady load through --ack kafka and --ack
// spool, three times, each time started again after 10 s. No acknowledged
// event is lost; --ack spool answers every request 2xx; duplicates and the
// gaps in acknowledgements are reported.
func (s *suite) leaderKill(t *testing.T) {
	topic := s.begin(t)
	gk := startGateway(t, s.c, "kafka", topic, 10*time.Second)
	gs := startGateway(t, s.c, "spool", topic, 10*time.Second)
	lk, ls := startLoad(t, gk), startLoad(t, gs)
	waitAcked(t, 400, "before the first kill", lk, ls)
	waitISR(t, s.adm, s.c.Nodes, topic)
	checkReplication(t, s.adm, topic, s.c.Nodes)

	_, _, offs := busiestLeader(t, s.adm, topic, nil)
	waitAcked(t, 400, "before the first kill", lk, ls)
	var kills []gap
	for i := 1; i <= 3; i++ {
		p, leader, _ := busiestLeader(t, s.adm, topic, offs)
		kills = append(kills, gap{from: time.Now()})
		s.c.KillNode(int(leader))
		t.Logf("kill %d: node %d, the leader of the busiest partition %s/%d, killed with SIGKILL; %d and %d events acknowledged so far",
			i, leader, topic, p, lk.acked(), ls.acked())
		time.Sleep(10 * time.Second) // the outage the scenario is about: nothing to wait for
		s.c.StartNode(int(leader))
		t.Logf("kill %d: node %d back in the cluster %v after the kill", i, leader, time.Since(kills[i-1].from).Round(time.Millisecond))
		waitISR(t, s.adm, s.c.Nodes, topic)
		kills[i-1].to = time.Now()
		t.Logf("kill %d: every partition fully in sync %v after the kill", i, time.Since(kills[i-1].from).Round(time.Millisecond))
		_, _, offs = busiestLeader(t, s.adm, topic, nil)
		waitAcked(t, 400, fmt.Sprintf("after kill %d", i), lk, ls)
	}
	out := finish(t, s.c, "leader kill", kills, lk, ls)
	sOut := out[1]
	if n := sOut.answers.non2xx(); n > 0 {
		t.Errorf("ack=spool answered %d requests other than 2xx while leaders were killed (%s): the spool takes events without Kafka",
			n, sOut.answers.statusString())
	}
}

// twoDown: two of the three nodes are killed for 20 s, leaving fewer
// replicas than min.insync.replicas=2 (and no controller quorum). --ack
// kafka answers 503 with Retry-After, each request within its produce
// timeout (+ margin), never 200; --ack spool answers 200 and delivers
// everything once the nodes are back; /readyz says which. Nothing
// acknowledged is lost.
func (s *suite) twoDown(t *testing.T) {
	topic := s.begin(t)
	const produceTimeout = 5 * time.Second
	gk := startGateway(t, s.c, "kafka", topic, produceTimeout)
	gs := startGateway(t, s.c, "spool", topic, produceTimeout)
	lk, ls := startLoad(t, gk), startLoad(t, gs)
	waitAcked(t, 400, "before the outage", lk, ls)
	waitISR(t, s.adm, s.c.Nodes, topic)

	down := []int{2, 3}
	start := time.Now()
	for _, id := range down {
		s.c.KillNode(id)
	}
	killed := time.Now()
	t.Logf("nodes %v killed with SIGKILL in %v", down, killed.Sub(start).Round(time.Millisecond))
	// A request whose records Kafka had replicated when the nodes died may
	// still be answered 200 just after; none after this.
	settled := killed.Add(3 * time.Second)
	end := start.Add(20 * time.Second)
	var (
		kBefore, sBefore answers
		kSaid, sSaid     []readiness // what /readyz said during the outage
		sOldest          float64
	)
	for now := time.Now(); now.Before(end); now = time.Now() {
		if kBefore.status == nil && now.After(settled) {
			kBefore, sBefore = gk.rec.snapshot(), gs.rec.snapshot()
		}
		for _, x := range []struct {
			g    *gateway
			said *[]readiness
		}{{gk, &kSaid}, {gs, &sSaid}} {
			rd, err := x.g.ready()
			if err != nil {
				t.Errorf("ack=%s: /readyz during the outage: %v", x.g.ack, err)
				continue
			}
			if len(*x.said) == 0 || (*x.said)[len(*x.said)-1].key() != rd.key() {
				if len(*x.said) < 50 {
					*x.said = append(*x.said, rd)
				}
			}
			if rd.Spool != nil {
				sOldest = max(sOldest, rd.Spool.Oldest)
			}
		}
		time.Sleep(250 * time.Millisecond) // /readyz sampled 4 times a second during a fixed outage
	}
	kDuring, sDuring := gk.rec.snapshot(), gs.rec.snapshot()
	for _, id := range down {
		s.c.StartNode(id)
	}
	t.Logf("nodes %v back in the cluster %v after the kill", down, time.Since(killed).Round(time.Millisecond))
	waitISR(t, s.adm, s.c.Nodes, topic)
	outage := gap{from: start, to: time.Now()}
	waitAcked(t, 400, "after the outage", lk, ls)
	out := finish(t, s.c, "two down", []gap{outage}, lk, ls)
	kOut, sOut := out[0], out[1]

	// ack=kafka: 503 with Retry-After (finish checked Retry-After and the
	// answer times), never 200.
	ok200 := kDuring.status["200"] - kBefore.status["200"]
	n503 := kDuring.status["503"] - kBefore.status["503"]
	t.Logf("ack=kafka from %v after the kill to the end of the outage: %d answered 200, %d answered 503; over the run: %s",
		settled.Sub(killed), ok200, n503, kOut.answers.statusString())
	if ok200 != 0 {
		t.Errorf("ack=kafka answered 200 to %d requests with one node of three up (min.insync.replicas=2)", ok200)
	}
	if n503 == 0 {
		t.Errorf("ack=kafka answered no request 503 during the outage: %s", kDuring.statusString())
	}
	if n := kOut.answers.status["client gave up"]; n > 0 {
		t.Errorf("ack=kafka: %d requests were not answered within the client's timeout", n)
	}
	logSaid("ack=kafka", t, kSaid)
	kafkaSaid := anyOf(kSaid, func(rd readiness) bool {
		return rd.Status == 503 && !rd.Ready && strings.Contains(rd.Error, "kafka")
	})

	// ack=spool: 200 throughout, ready throughout, and /readyz shows the
	// events it holds for Kafka.
	s200 := sDuring.status["200"] - sBefore.status["200"]
	t.Logf("ack=spool during the outage: %d answered 200; over the run: %s", s200, sOut.answers.statusString())
	if s200 == 0 {
		t.Errorf("ack=spool answered no request 200 during the outage")
	}
	if n := sOut.answers.non2xx(); n > 0 {
		t.Errorf("ack=spool answered %d requests other than 2xx (%s): the spool takes events without Kafka", n, sOut.answers.statusString())
	}
	logSaid("ack=spool", t, sSaid)
	if anyOf(sSaid, func(rd readiness) bool { return rd.Status != 200 || !rd.Ready }) {
		t.Errorf("ack=spool: /readyz said not ready during the outage: %v", sSaid)
	}
	t.Logf("ack=spool: the oldest event not yet in Kafka was %.1f s old at most during the outage", sOldest)
	if sOldest < 5 {
		t.Errorf("ack=spool: /readyz never showed an event waiting for Kafka 5 s or more (at most %.1f s) during a 20 s outage", sOldest)
	}

	// Last, as it may skip: ack=kafka's /readyz must say that Kafka takes
	// no events while every request is answered 503.
	switch {
	case !kafkaSaid && readyzKafkaKnownBroken:
		t.Skipf("known bug (readyzKafkaKnownBroken): with --ack kafka and two of three nodes down, every request was answered 503 "+
			"but /readyz said all along: %v", kSaid)
	case !kafkaSaid:
		t.Errorf("ack=kafka: /readyz never said during the outage that Kafka takes no events (503, ready false, an error naming kafka); it said: %v", kSaid)
	case readyzKafkaKnownBroken:
		t.Errorf("ack=kafka: /readyz now says Kafka takes no events during the outage: set readyzKafkaKnownBroken to false")
	}
}

// readyzKafkaKnownBroken was true while /readyz of --ack kafka stayed 200
// ready with fewer replicas than min.insync.replicas: its check is a
// metadata request, which the surviving broker answers, and the producer's
// health counted only records that failed, while Kafka keeps such records,
// retrying until --delivery-timeout. Since the fix, a wait for
// acknowledgements that runs past its deadline (--produce-timeout) counts
// as a failure too (internal/kafka/health.go waitTimedOut). Set it back to
// true only to skip the check while such a bug is open.
const readyzKafkaKnownBroken = false

// rollingRestart: every node is stopped (SIGTERM) and started again in
// turn under load, each back in the ISR of every partition before the
// next. Nothing acknowledged is lost; --ack spool answers no request 5xx.
func (s *suite) rollingRestart(t *testing.T) {
	topic := s.begin(t)
	gk := startGateway(t, s.c, "kafka", topic, 10*time.Second)
	gs := startGateway(t, s.c, "spool", topic, 10*time.Second)
	lk, ls := startLoad(t, gk), startLoad(t, gs)
	waitAcked(t, 400, "before the first restart", lk, ls)
	waitISR(t, s.adm, s.c.Nodes, topic)
	var stops []gap
	for id := 1; id <= s.c.Nodes; id++ {
		stops = append(stops, gap{from: time.Now()})
		s.c.StopNode(id)
		t.Logf("node %d stopped (SIGTERM) in %v", id, time.Since(stops[id-1].from).Round(time.Millisecond))
		waitAcked(t, 200, fmt.Sprintf("with node %d stopped", id), lk, ls)
		s.c.StartNode(id)
		waitISR(t, s.adm, s.c.Nodes, topic)
		stops[id-1].to = time.Now()
		t.Logf("node %d back in every ISR %v after its stop", id, time.Since(stops[id-1].from).Round(time.Millisecond))
		waitAcked(t, 200, fmt.Sprintf("after node %d restarted", id), lk, ls)
	}
	out := finish(t, s.c, "rolling restart", stops, lk, ls)
	sOut := out[1]
	if n := sOut.answers.non2xx(); n > 0 {
		t.Errorf("ack=spool answered %d requests other than 2xx during the rolling restart (%s)", n, sOut.answers.statusString())
	}
}

func anyOf(rs []readiness, f func(readiness) bool) bool {
	for _, r := range rs {
		if f(r) {
			return true
		}
	}
	return false
}

func logSaid(name string, t *testing.T, rs []readiness) {
	t.Helper()
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  %s", r)
	}
	t.Logf("%s /readyz during the outage (each change):%s", name, b.String())
}
