package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/internal/verify"
)

// margin is added to a gateway's produce timeout for the longest a request
// may take to be answered: the gateway is on a busy 2-core machine beside
// three JVMs.
const margin = 10 * time.Second

// gateway is `inlet serve` writing to the cluster, behind a recording proxy.
type gateway struct {
	ack            string
	topic          string
	addr           string // the gateway itself
	produceTimeout time.Duration
	proc           *testkit.Process
	rec            *recorder
}

// startGateway runs the built binary with --ack ack on the cluster's
// PLAINTEXT listener and waits until it is ready.
func startGateway(t *testing.T, c *testkit.KafkaCluster, ack, topic string, produceTimeout time.Duration) *gateway {
	t.Helper()
	g := &gateway{ack: ack, topic: topic, addr: testkit.FreeAddr(t), produceTimeout: produceTimeout}
	g.proc = testkit.Start(t, nil, "serve", "--listen", g.addr, "--brokers", strings.Join(c.Plaintext, ","),
		"--ack", ack, "--topic", topic, "--data-dir", t.TempDir(), "--compression", "none",
		"--produce-timeout", produceTimeout.String(), "--ui=false", "--shutdown-timeout", "20s")
	testkit.WaitReady(t, "http://"+g.addr, 60*time.Second)
	g.rec = newRecorder(t, "ack="+ack, g.addr)
	return g
}

// readiness is the part of /readyz the tests look at.
type readiness struct {
	Status int    `json:"-"`
	Ready  bool   `json:"ready"`
	Ack    string `json:"ack"`
	Kafka  string `json:"kafka"`
	Error  string `json:"error"`
	Spool  *struct {
		Unforwarded uint64  `json:"unforwarded_records"`
		Oldest      float64 `json:"oldest_unforwarded_seconds"`
		Forwarder   string  `json:"forwarder"`
		Failed      string  `json:"failed"`
	} `json:"spool"`
}

func (r readiness) String() string {
	s := fmt.Sprintf("%d ready=%v kafka=%q", r.Status, r.Ready, r.Kafka)
	if r.Error != "" {
		s += fmt.Sprintf(" error=%q", r.Error)
	}
	if r.Spool != nil {
		s += fmt.Sprintf(" spool{unforwarded=%d oldest=%.1fs forwarder=%s}", r.Spool.Unforwarded, r.Spool.Oldest, r.Spool.Forwarder)
	}
	return s
}

// key is what a change of state is: answer, readiness, error, forwarder.
func (r readiness) key() string {
	k := fmt.Sprint(r.Status, r.Ready, r.Error, r.Kafka == "ok")
	if r.Spool != nil {
		k += r.Spool.Forwarder
	}
	return k
}

// ready asks the gateway's /readyz.
func (g *gateway) ready() (readiness, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + g.addr + "/readyz")
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	var rd readiness
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		return readiness{}, fmt.Errorf("/readyz: %w", err)
	}
	rd.Status = resp.StatusCode
	return rd, nil
}

// waitDrained waits until a spool gateway's forwarder has nothing left to
// deliver.
func (g *gateway) waitDrained(t *testing.T, timeout time.Duration) {
	t.Helper()
	if g.ack != "spool" {
		return
	}
	var rd readiness
	last := "no answer yet"
	poll(t, timeout, "the spool of ack=spool to be forwarded to Kafka", &last, func() bool {
		var err error
		rd, err = g.ready()
		last = rd.String()
		if err != nil {
			last = err.Error()
		}
		return err == nil && rd.Spool != nil && rd.Spool.Unforwarded == 0
	})
	t.Logf("ack=spool drained: /readyz %s", rd)
}

// recorder is a reverse proxy in front of a gateway that records what the
// clients of /v1/batch were answered and when.
type recorder struct {
	name string
	srv  *httptest.Server

	// stopping is set when the load stops: the requests it abandons then
	// are not counted.
	stopping atomic.Bool

	mu       sync.Mutex
	status   map[string]int // "200", "503", "client gave up", "proxy: no answer"
	noRetry  int            // 503s without Retry-After
	slowest  time.Duration
	slowAt   time.Time
	first2xx time.Time
	last2xx  time.Time
	gaps     []gap // times without a 2xx of a second or more, at most maxGaps
	maxGap   gap
}

// gap is a span of time: one in which no request was answered 2xx, or a
// failure from its start to the recovery.
type gap struct{ from, to time.Time }

func (g gap) d() time.Duration { return g.to.Sub(g.from) }

const maxGaps = 1000

func newRecorder(t *testing.T, name, addr string) *recorder {
	r := &recorder{name: name, status: map[string]int{}}
	target := &url.URL{Scheme: "http", Host: addr}
	rp := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp.Transport = tr
	rp.ErrorHandler = func(w http.ResponseWriter, req *http.Request, err error) {
		w.Header().Set("X-Failover-Proxy-Error", "1")
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/batch" {
			rp.ServeHTTP(w, req)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(sw, req)
		r.record(start, sw, req.Context().Err())
	}))
	t.Cleanup(func() { r.srv.Close(); tr.CloseIdleConnections() })
	return r
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (r *recorder) record(start time.Time, w *statusWriter, ctxErr error) {
	if ctxErr != nil && r.stopping.Load() {
		return // abandoned by the load's stop
	}
	now := time.Now()
	took := now.Sub(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	key := strconv.Itoa(w.code)
	switch {
	case w.Header().Get("X-Failover-Proxy-Error") != "" && ctxErr != nil:
		key = "client gave up"
	case w.Header().Get("X-Failover-Proxy-Error") != "":
		key = "proxy: no answer"
	}
	r.status[key]++
	if took > r.slowest {
		r.slowest, r.slowAt = took, now
	}
	if w.code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		r.noRetry++
	}
	if w.code < 200 || w.code > 299 {
		return
	}
	if r.first2xx.IsZero() {
		r.first2xx = now
	}
	if !r.last2xx.IsZero() {
		g := gap{r.last2xx, now}
		if g.d() > r.maxGap.d() {
			r.maxGap = g
		}
		if g.d() >= time.Second && len(r.gaps) < maxGaps {
			r.gaps = append(r.gaps, g)
		}
	}
	r.last2xx = now
}

// answers is a snapshot of the recorder's counts.
type answers struct {
	status  map[string]int
	noRetry int
	slowest time.Duration
	maxGap  gap
	gaps    []gap
	last2xx time.Time
}

func (r *recorder) snapshot() answers {
	r.mu.Lock()
	defer r.mu.Unlock()
	return answers{status: maps.Clone(r.status), noRetry: r.noRetry, slowest: r.slowest, maxGap: r.maxGap,
		gaps: slices.Clone(r.gaps), last2xx: r.last2xx}
}

// non2xx is the number of requests not answered 2xx (proxy errors included).
func (a answers) non2xx() int {
	n := 0
	for k, v := range a.status {
		if !strings.HasPrefix(k, "2") {
			n += v
		}
	}
	return n
}

// longestIn returns the longest gap without a 2xx that overlaps w (a
// failure, from its start to the recovery), or 0 if 2xx answers kept
// coming at least every second during w.
func (a answers) longestIn(w gap) time.Duration {
	var d time.Duration
	for _, g := range a.gaps {
		if g.to.After(w.from) && g.from.Before(w.to) {
			d = max(d, g.d())
		}
	}
	return d
}

func (a answers) statusString() string {
	keys := slices.Sorted(maps.Keys(a.status))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, a.status[k])
	}
	return strings.Join(parts, " ")
}

// load is `inlet verify`'s load (verify.Load) through a gateway's recorder,
// until stopped.
type load struct {
	g      *gateway
	cfg    verify.LoadConfig
	ledger *verify.Ledger
	cancel context.CancelFunc
	done   chan error
}

// rate is the events per second of each load: steady, and light enough
// for two gateways, three JVMs and the race detector on two cores.
const rate = 200

func startLoad(t *testing.T, g *gateway) *load {
	t.Helper()
	cfg := verify.DefaultLoadConfig()
	cfg.Target = g.rec.srv.URL
	cfg.Events = 0
	cfg.Duration = 20 * time.Minute // stopped long before
	cfg.Rate = rate
	cfg.Batch = 5
	cfg.Concurrency = 16 // room for a gateway slowed by the busy machine to keep the rate
	// Longer than the gateway may take (produce timeout + margin): a
	// request that hangs shows as the recorder's slowest answer, not as
	// a client timeout.
	cfg.Timeout = g.produceTimeout + 3*margin
	cfg.Run = verify.NewRun()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{g: g, cfg: cfg, ledger: verify.NewLedger(), cancel: cancel, done: make(chan error, 1)}
	go func() { l.done <- verify.Load(ctx, cfg, l.ledger) }()
	t.Cleanup(l.stop)
	return l
}

// stop ends the load; requests in flight are abandoned (and count as not
// acknowledged).
func (l *load) stop() {
	l.g.rec.stopping.Store(true)
	l.cancel()
	if err, ok := <-l.done; ok {
		close(l.done)
		if err != nil && err != context.Canceled {
			panic(fmt.Sprintf("verify.Load: %v", err)) // a config error: a bug of this test
		}
	}
}

func (l *load) acked() int {
	_, a := l.ledger.Counts()
	return a
}

// waitAcked waits until n more events were acknowledged.
func waitAcked(t *testing.T, n int, when string, loads ...*load) {
	t.Helper()
	for _, l := range loads {
		want := l.acked() + n
		testkit.WaitFor(t, 120*time.Second, fmt.Sprintf("%d more events acknowledged by ack=%s %s", n, l.g.ack, when),
			func() bool { return l.acked() >= want })
	}
}

// outcome is what a scenario measured for one gateway.
type outcome struct {
	rep     verify.Report
	dups    int // extra copies in the whole topic, read to the end
	answers answers
}

// finish stops every load (the events of one are in the topic of the
// others: a topic still written to keeps a reader from going idle), waits
// for the spool gateways to forward everything, and checks each load with
// verify: no acknowledged event may be missing from the topic. It logs and
// returns what was measured, in the order of loads.
//
// failures are the times from each failure to the recovery (every replica
// back in sync): the summary gives the longest gap without a 2xx in each.
func finish(t *testing.T, c *testkit.KafkaCluster, scenario string, failures []gap, loads ...*load) []outcome {
	t.Helper()
	for _, l := range loads {
		l.stop()
	}
	for _, l := range loads {
		l.g.waitDrained(t, 120*time.Second)
	}
	out := make([]outcome, len(loads))
	for i, l := range loads {
		out[i] = l.check(t, c, scenario, failures)
	}
	return out
}

// check reads the topic back for l's run, after finish stopped the loads.
func (l *load) check(t *testing.T, c *testkit.KafkaCluster, scenario string, failures []gap) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seen, err := verify.Delivered(ctx, c.Plaintext, kafka.Security{}, l.g.topic, verify.Prefix(l.cfg.Run), l.ledger, 60*time.Second)
	if err != nil {
		t.Fatalf("ack=%s: reading the topic back: %v", l.g.ack, err)
	}
	rep := verify.Compare(l.cfg.Run, l.ledger, seen)
	// Delivered stops once every acknowledged event was seen; read the
	// rest of the topic for every copy.
	all, err := verify.Delivered(ctx, c.Plaintext, kafka.Security{}, l.g.topic, verify.Prefix(l.cfg.Run), nil, 5*time.Second)
	if err != nil {
		t.Fatalf("ack=%s: reading the topic to its end: %v", l.g.ack, err)
	}
	o := outcome{rep: rep, answers: l.g.rec.snapshot()}
	for _, n := range all {
		o.dups += n - 1
	}
	var during []string
	for _, w := range failures {
		d := "<1s"
		if g := o.answers.longestIn(w); g > 0 {
			d = g.Round(time.Millisecond).String()
		}
		during = append(during, d)
	}
	line := fmt.Sprintf("failover summary: %s ack=%s: sent %d, acknowledged %d, delivered %d, lost %d, duplicates %d, delivered unacknowledged %d; longest time without a 2xx %v",
		scenario, l.g.ack, rep.Sent, rep.Acknowledged, rep.Delivered, rep.Lost, o.dups, rep.DeliveredUnacknowledged,
		o.answers.maxGap.d().Round(time.Millisecond))
	if len(failures) > 0 {
		line += fmt.Sprintf(" (during each failure, until every replica was back in sync: %s)", strings.Join(during, ", "))
	}
	line += fmt.Sprintf("; slowest answer %v; answers %s; 503 without Retry-After %d", o.answers.slowest.Round(time.Millisecond),
		o.answers.statusString(), o.answers.noRetry)
	t.Log(line)
	if f := os.Getenv("INLET_FAILOVER_SUMMARY"); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(fh, line)
			fh.Close()
		}
	}
	if rep.Lost > 0 {
		t.Errorf("ack=%s: %d acknowledged events lost, e.g. %v", l.g.ack, rep.Lost, rep.LostIDs)
	}
	if rep.Acknowledged == 0 {
		t.Errorf("ack=%s acknowledged nothing: answers %s", l.g.ack, o.answers.statusString())
	}
	if o.answers.noRetry > 0 {
		t.Errorf("ack=%s: %d answers 503 without Retry-After", l.g.ack, o.answers.noRetry)
	}
	if bound := l.g.produceTimeout + margin; o.answers.slowest > bound {
		t.Errorf("ack=%s: a request took %v to be answered, more than the produce timeout %v + %v",
			l.g.ack, o.answers.slowest.Round(time.Millisecond), l.g.produceTimeout, margin)
	}
	for k, n := range o.answers.status {
		if strings.HasPrefix(k, "proxy") {
			t.Errorf("ack=%s: %d requests got no answer from the gateway", l.g.ack, n)
		}
	}
	return o
}

// admin is a Kafka admin client on the cluster.
func admin(t *testing.T, c *testkit.KafkaCluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Plaintext...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// waitISR waits until every partition of the topics has a leader and
// every node in its ISR.
func waitISR(t *testing.T, adm *kadm.Client, nodes int, topics ...string) {
	t.Helper()
	last := "no answer yet"
	poll(t, 180*time.Second, fmt.Sprintf("%d in-sync replicas for every partition of %v", nodes, topics), &last, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		td, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			last = err.Error()
			return false
		}
		for _, topic := range topics {
			if td[topic].Err != nil || len(td[topic].Partitions) == 0 {
				last = fmt.Sprintf("%s: %v", topic, td[topic].Err)
				return false
			}
			for _, pd := range td[topic].Partitions {
				if pd.Leader < 0 || len(pd.ISR) != nodes {
					last = fmt.Sprintf("%s/%d: leader %d, ISR %v", topic, pd.Partition, pd.Leader, pd.ISR)
					return false
				}
			}
		}
		return true
	})
}

// poll checks cond every 200 ms (each check asks Kafka or a gateway) until
// it holds, failing the test after timeout with what and *last.
func poll(t *testing.T, timeout time.Duration, what string, last *string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting after %v for %s; last: %s", timeout, what, *last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkReplication fails the test unless every partition of topic has a
// replica on each of the cluster's nodes (the topic inlet had Kafka create).
func checkReplication(t *testing.T, adm *kadm.Client, topic string, nodes int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range td[topic].Partitions {
		if len(pd.Replicas) != nodes {
			t.Errorf("%s/%d has %d replicas, want %d", topic, pd.Partition, len(pd.Replicas), nodes)
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cf := range r.Configs {
		if cf.Key == "min.insync.replicas" && cf.MaybeValue() != strconv.Itoa(nodes-1) {
			t.Errorf("%s has min.insync.replicas=%s, want %d", topic, cf.MaybeValue(), nodes-1)
		}
	}
}

// busiestLeader returns the partition of topic that grew most since
// before (end offsets by partition; nil: since its start), its leader, and
// the end offsets now.
func busiestLeader(t *testing.T, adm *kadm.Client, topic string, before map[int32]int64) (partition, leader int32, now map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	now = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { now[o.Partition] = o.Offset })
	parts := slices.Collect(maps.Keys(now))
	sort.Slice(parts, func(i, j int) bool {
		return now[parts[i]]-before[parts[i]] > now[parts[j]]-before[parts[j]]
	})
	if len(parts) == 0 {
		t.Fatalf("%s has no partitions", topic)
	}
	partition = parts[0]
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	pd, ok := td[topic].Partitions[partition]
	if !ok || pd.Leader < 0 {
		t.Fatalf("%s/%d has no leader", topic, partition)
	}
	return partition, pd.Leader, now
}
