package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"

	"github.com/inlet-dev/inlet/internal/verify"
)

// loader sends batches of five events with unique ids, recording them in a
// verify.Ledger, until stopped.
type loader struct {
	run    string
	ledger *verify.Ledger
	seq    atomic.Int64
	client *http.Client

	mu       sync.Mutex
	statuses map[string]int // HTTP status or client error → count

	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoader(target string, workers int, pause time.Duration) *loader {
	l := &loader{run: verify.NewRun(), ledger: verify.NewLedger(), statuses: map[string]int{}, stop: make(chan struct{}),
		client: &http.Client{Timeout: 20 * time.Second}}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.send(target)
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	return l
}

func (l *loader) send(target string) {
	ids := make([]string, 5)
	var b strings.Builder
	b.WriteString("[")
	for i := range ids {
		ids[i] = verify.ID(l.run, int(l.seq.Add(1)))
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"event":"fault","id":%q,"props":{"pad":"0123456789abcdef0123456789abcdef"}}`, ids[i])
	}
	b.WriteString("]")
	l.ledger.Sent(ids...)
	resp, err := l.client.Post(target+"/v1/batch", "application/json", strings.NewReader(b.String()))
	outcome := ""
	if err != nil {
		outcome = "client error"
		time.Sleep(10 * time.Millisecond) // the server is down: do not spin
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		outcome = fmt.Sprint(resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			l.ledger.Acked(ids...)
		}
	}
	l.ledger.Answered(outcome)
	l.mu.Lock()
	l.statuses[outcome]++
	l.mu.Unlock()
}

func (l *loader) Stop() map[string]int {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses
}

// check reads the topic and fails the test if any acknowledged event is
// missing; it logs the report (duplicates included).
func (l *loader) check(t *testing.T, brokers []string, topic string) verify.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seen, err := verify.Delivered(ctx, brokers, kafka.Security{}, topic, verify.Prefix(l.run), l.ledger, 15*time.Second)
	if err != nil {
		t.Fatalf("reading %s: %v", topic, err)
	}
	rep := verify.Compare(l.run, l.ledger, seen)
	js, _ := json.Marshal(rep)
	t.Logf("verify: %s", js)
	if !rep.OK() {
		t.Fatalf("%d acknowledged events lost (e.g. %v)", rep.Lost, rep.LostIDs)
	}
	if rep.Acknowledged == 0 {
		t.Fatal("nothing was acknowledged: the load did not run")
	}
	return rep
}

// TestKill9UnderLoad kills `inlet serve --ack spool` with SIGKILL under
// load five times, restarting it each time on the same data dir, and
// checks that no acknowledged event is lost.
func TestKill9UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	// Each run's log is shown by testkit.Start if the test fails.
	start := func() *testkit.Process {
		// Uncompressed, as in gatewaytest.Config: the checker reads ~100k
		// records back, too slowly from lz4 under -race.
		p := testkit.Start(t, nil, "serve", "--listen", addr, "--topic", topic, "--data-dir", dataDir, "--ack", "spool",
			"--brokers", strings.Join(brokers, ","), "--compression", "none")
		waitReady(t, "http://"+addr)
		return p
	}
	l := startLoader("http://"+addr, 8, 0)
	acked := 0
	for i := 0; i < 5; i++ {
		p := start()
		time.Sleep(time.Duration(800+150*i) * time.Millisecond)
		p.Signal(t, syscall.SIGKILL)
		p.Wait(t, 10*time.Second)
		_, a := l.ledger.Counts()
		if a <= acked {
			t.Fatalf("kill %d: no event acknowledged since the last restart", i+1)
		}
		acked = a
	}
	// Bring it back, stop the load, and stop it cleanly: it drains the spool.
	p := start()
	time.Sleep(500 * time.Millisecond)
	statuses := l.Stop()
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("final SIGTERM: exit %d", code)
	}
	t.Logf("answers: %v", statuses)
	rep := l.check(t, brokers, topic)
	t.Logf("5 kills: %d sent, %d acknowledged, %d delivered, %d duplicates, %d delivered without acknowledgement",
		rep.Sent, rep.Acknowledged, rep.Delivered, rep.Duplicates, rep.DeliveredUnacknowledged)
}

func getReady(t *testing.T, base string) (int, gateway.Readiness) {
	r := testkit.Do(t, "GET", base+"/readyz", nil)
	var rd gateway.Readiness
	if err := json.Unmarshal(r.Body, &rd); err != nil {
		t.Fatalf("readyz %s: %v", r, err)
	}
	return r.Status, rd
}

// TestBrokerOutageUnderLoad stops Kafka for 30 s under load: inlet answers
// 200 throughout (the spool absorbs it), reports the outage, drains the
// backlog when Kafka is back while new events keep flowing, and loses
// nothing.
func TestBrokerOutageUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s outage; skipped with -short")
	}
	ctl := testkit.HaltableKafka(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, ctl.Brokers, topic)
	cfg.DataDir = t.TempDir()
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	testkit.WaitFor(t, 10*time.Second, "ready", func() bool { return testkit.Do(t, "GET", base+"/readyz", nil).Status == 200 })

	l := startLoader(base, 4, 20*time.Millisecond)
	time.Sleep(2 * time.Second)
	ctl.Halt()
	outage := 30 * time.Second
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		if status, rd := getReady(t, base); status != 200 || !rd.Ready {
			t.Errorf("not ready during the outage: %d %+v", status, rd)
		}
		time.Sleep(time.Second)
	}
	_, during := getReady(t, base)
	ctl.Resume()
	time.Sleep(5 * time.Second) // new events flow while the backlog drains
	statuses := l.Stop()
	if during.Kafka == "ok" || (during.Spool.Forwarder != "stalled" && during.Spool.Forwarder != "retrying") ||
		during.Spool.Unforwarded == 0 || during.Spool.OldestUnforwardedSeconds < 20 {
		t.Errorf("the outage did not show: %+v %+v", during, *during.Spool)
	}
	testkit.WaitFor(t, 60*time.Second, "the backlog drained", func() bool {
		_, rd := getReady(t, base)
		return rd.Spool.Unforwarded == 0
	})
	for s, n := range statuses {
		if s != "200" {
			t.Errorf("%d answers %s during the outage; want only 200", n, s)
		}
	}
	t.Logf("answers: %v; at the end of the outage: %d records spooled, oldest %.1fs, forwarder %s",
		statuses, during.Spool.Unforwarded, during.Spool.OldestUnforwardedSeconds, during.Spool.Forwarder)
	l.check(t, ctl.Brokers, topic)
}

// TestSpoolFull: with Kafka down, a full spool answers 503 with
// Retry-After, without crashing, and takes events again once drained.
func TestSpoolFull(t *testing.T) {
	ctl := testkit.HaltableKafka(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, ctl.Brokers, topic)
	cfg.DataDir = t.TempDir()
	cfg.Spool.SegmentBytes = 16 << 10
	cfg.Spool.MaxBytes = 64 << 10
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()

	ctl.Halt()
	l := &loader{run: verify.NewRun(), ledger: verify.NewLedger(), statuses: map[string]int{}, client: http.DefaultClient}
	for i := 0; i < 1000 && l.statuses["503"] == 0; i++ {
		l.send(base)
	}
	if l.statuses["503"] != 1 || l.statuses["200"] == 0 {
		t.Fatalf("answers %v: want 200s, then 503", l.statuses)
	}
	more := []byte(`[{"event":"more","props":{"s":"` + strings.Repeat("m", 2000) + `"}}]`) // larger than what is left
	r := testkit.Do(t, "POST", base+"/v1/batch", more, "Content-Type", "application/json")
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "capacity") {
		t.Fatalf("full spool: %s (Retry-After %q)", r, r.Header.Get("Retry-After"))
	}
	if status, rd := getReady(t, base); status != 503 || !strings.Contains(rd.Error, "full") {
		t.Fatalf("readyz with a full spool: %d %+v", status, rd)
	}
	if r := testkit.Do(t, "GET", base+"/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz: %s", r)
	}
	ctl.Resume()
	testkit.WaitFor(t, 60*time.Second, "the spool drained", func() bool {
		status, rd := getReady(t, base)
		return status == 200 && rd.Spool.Unforwarded == 0
	})
	before := l.statuses["200"]
	l.send(base)
	if l.statuses["200"] != before+1 {
		t.Fatalf("after draining: answers %v", l.statuses)
	}
	l.check(t, ctl.Brokers, topic)
}

// TestCorruptSpoolTail: events spooled while Kafka was unreachable, the
// last segment's tail torn while inlet was down: on start the tail is cut
// (and logged) and everything before it is delivered.
func TestCorruptSpoolTail(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	dataDir := t.TempDir()
	offline := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, topic)
	offline.DataDir = dataDir
	offline.ShutdownTimeout = 500 * time.Millisecond
	g, err := gateway.Start(offline, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/track", []byte(fmt.Sprintf(`{"event":"spooled","id":"c%d"}`, i)), "Content-Type", "application/json")
		if r.Status != 200 {
			t.Fatalf("spooling event %d: %s", i, r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), offline.ShutdownTimeout)
	g.Shutdown(ctx) // the spool cannot drain: Kafka is unreachable
	cancel()

	segs, _ := filepath.Glob(filepath.Join(dataDir, "spool", "*.seg"))
	sort.Strings(segs)
	var last string
	for _, s := range segs {
		if fi, _ := os.Stat(s); fi.Size() > 0 {
			last = s
		}
	}
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatalf("no spool segment with data: %v", err)
	}
	if err := os.Truncate(last, fi.Size()-5); err != nil { // a torn last write
		t.Fatal(err)
	}

	online := gatewaytest.Config(t, brokers, topic)
	online.DataDir = dataDir
	log, logs := testkit.NewLogBuffer()
	g2, err := gateway.Start(online, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), online.ShutdownTimeout)
		defer cancel()
		g2.Shutdown(ctx)
	}()
	recs := testkit.ConsumeN(t, brokers, topic, 9, 2*time.Second) // the nine good ones, nothing of the torn one
	got := map[string]bool{}
	for _, r := range recs {
		got[r.Headers["inlet-event-id"]] = true
	}
	for i := 0; i < 9; i++ {
		if !got[fmt.Sprintf("c%d", i)] {
			t.Errorf("event c%d, before the torn record, was not delivered", i)
		}
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "cutting it at the last good record") {
		t.Errorf("the torn tail was not logged as an error:\n%s", logs)
	}
}

// TestDiskWriteError puts the spool on a tiny tmpfs: when the disk refuses
// a write, inlet answers 503 (not stored, retry) and keeps serving.
func TestDiskWriteError(t *testing.T) {
	dir := testkit.Tmpfs(t, "256k")        // registered first: unmounted after the gateway stopped
	filler := filepath.Join(dir, "filler") // half the disk, freed later
	if err := os.WriteFile(filler, make([]byte, 128<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, testkit.Unique(t, "t-")) // nothing drains
	cfg.DataDir = dir
	cfg.Spool.SegmentBytes = 1 << 20
	cfg.Spool.MaxBytes = 64 << 20 // far more than the disk
	cfg.ShutdownTimeout = time.Second
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	body := []byte(`[{"event":"big","props":{"s":"` + strings.Repeat("x", 20<<10) + `"}}]`)
	var r testkit.Response
	n := 0
	for ; n < 100; n++ {
		if r = testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 200 {
			break
		}
	}
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "write failed") {
		t.Fatalf("after %d events on a full disk: %s, want 503 write failed", n, r)
	}
	if r := testkit.Do(t, "GET", base+"/healthz", nil); r.Status != 200 {
		t.Fatalf("healthz after a disk error: %s", r)
	}
	if r := testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 503 {
		t.Fatalf("still full: %s", r)
	}
	// A full disk is not a broken one: once there is room, inlet takes
	// events again without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := testkit.Do(t, "POST", base+"/v1/batch", body, "Content-Type", "application/json"); r.Status != 200 {
		t.Fatalf("after room was freed on the disk: %s, want 200", r)
	}
	if r := testkit.Do(t, "GET", base+"/readyz", nil); r.Status != 200 {
		t.Fatalf("readyz after room was freed: %s", r)
	}
}
