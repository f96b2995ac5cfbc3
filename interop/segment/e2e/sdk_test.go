// Package e2e runs the Segment-API SDKs from their registries, unmodified,
// against `inlet serve` on a real Kafka: Segment's and RudderStack's Python
// and Node SDKs and Segment's Go SDK (drivers in interop/segment/*), each
// pointed at inlet by its host setting alone.
//
// The test is skipped unless INLET_TEST_SEGMENT_SDKS=1, which
// scripts/segment-interop.sh sets after installing the SDKs; then every
// SDK is required. Environment:
//
//	INLET_SEGMENT_PYTHON   the Python with segment-analytics-python and rudder-sdk-python
//	INLET_TEST_BROKERS     the shared Kafka (testkit); INLET_TEST_KAFKA_SCRIPT for the outage's private one
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// sdk is one SDK's driver: a command that sends through the SDK and prints
// what it sent and what the SDK reported.
type sdk struct {
	name string   // as in the messageIds: python-segment, node-rudder, go-segment...
	cmd  []string // the driver's command line
	// refused: what this SDK reports for a wrong write key (inlet's 401),
	// a substring of one of its errors.
	refused string
}

// report is a driver's one line of output.
type report struct {
	SDK    string           `json:"sdk"`
	Sent   []map[string]any `json:"sent"`
	Errors []map[string]any `json:"errors"`
}

func sdks(t *testing.T) []sdk {
	t.Helper()
	if os.Getenv("INLET_TEST_SEGMENT_SDKS") != "1" {
		t.Skip("INLET_TEST_SEGMENT_SDKS is not 1: run scripts/segment-interop.sh, which installs the SDKs")
	}
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	py := os.Getenv("INLET_SEGMENT_PYTHON")
	if py == "" {
		t.Fatal("INLET_SEGMENT_PYTHON is empty: the Python with the SDKs (scripts/segment-interop.sh sets it)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node", "node_modules", "@segment", "analytics-node")); err != nil {
		t.Fatalf("the Node SDKs are not installed (npm ci in interop/segment/node): %v", err)
	}
	goDriver := filepath.Join(t.TempDir(), "go-driver")
	build := exec.Command("go", "build", "-o", goDriver, ".")
	build.Dir = filepath.Join(dir, "go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the Go SDK's driver: %v\n%s", err, out)
	}
	pyDriver := filepath.Join(dir, "python", "driver.py")
	nodeDriver := filepath.Join(dir, "node", "driver.mjs")
	return []sdk{
		// segment-analytics-python raises APIError(status, code, message) from the JSON body.
		{"python-segment", []string{py, pyDriver, "segment"}, `"status": 401`},
		{"python-rudder", []string{py, pyDriver, "rudder"}, `"status": 401`},
		// analytics-node: Error("[401] Unauthorized"), not retried.
		{"node-segment", []string{"node", nodeDriver, "segment"}, `[401] Unauthorized`},
		// rudder-sdk-node: axios's error to errorHandler, with the response; not retried.
		{"node-rudder", []string{"node", nodeDriver, "rudder"}, `"status":401`},
		// analytics-go: "401 401 Unauthorized" after its ten attempts.
		{"go-segment", []string{goDriver}, `401 401 Unauthorized`},
	}
}

// result is one run of a driver.
type result struct {
	sdk    sdk
	code   int
	rep    report
	stdout string
	stderr string
	took   time.Duration
}

// runAll runs every SDK's driver at once against url with key, and returns
// when all have exited (each within timeout).
func runAll(t *testing.T, list []sdk, url, key, run string, rounds int, extra ...string) []result {
	t.Helper()
	out := make([]result, len(list))
	var wg sync.WaitGroup
	for i, s := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = runOne(s, url, key, run, rounds, extra)
		}()
	}
	wg.Wait()
	for _, r := range out {
		t.Logf("%s (%s, exit %d): sent %d messages; the SDK reported %d errors: %s",
			r.sdk.name, r.took.Round(100*time.Millisecond), r.code, len(r.rep.Sent), len(r.rep.Errors), trim(r.stdout, 600))
		if r.rep.SDK != r.sdk.name {
			t.Errorf("%s: the driver printed no report (exit %d)\nstdout: %s\nstderr: %s", r.sdk.name, r.code, r.stdout, trim(r.stderr, 4000))
		}
	}
	return out
}

func runOne(s sdk, url, key, run string, rounds int, extra []string) result {
	start := time.Now()
	cmd := exec.Command(s.cmd[0], s.cmd[1:]...)
	cmd.Env = append(os.Environ(), "INLET_URL="+url, "WRITE_KEY="+key, "RUN="+run, fmt.Sprintf("ROUNDS=%d", rounds))
	cmd.Env = append(cmd.Env, extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Start()
	if err == nil {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
			fmt.Fprintf(&stderr, "\n(killed after 90 s)")
		}
	}
	r := result{sdk: s, code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if err != nil && cmd.ProcessState == nil {
		r.code, r.stderr = -1, err.Error()
	}
	if line := lastLine(r.stdout); line != "" {
		_ = json.Unmarshal([]byte(line), &r.rep)
	}
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// gateway runs `inlet serve --ack kafka --auth` on brokers and returns its
// base URL.
func gateway(t *testing.T, brokers []string, topic, clients string) string {
	t.Helper()
	addr := testkit.FreeAddr(t)
	testkit.Start(t, nil, "serve", "--listen", addr, "--brokers", strings.Join(brokers, ","), "--topic", topic,
		"--data-dir", t.TempDir(), "--ack", "kafka", "--produce-timeout", "5s",
		"--clients", clients, "--auth")
	base := "http://" + addr
	testkit.WaitReady(t, base, 30*time.Second)
	return base
}

// clientsFile makes a clients file with one client and returns its path
// and the secret `inlet clients add` printed: the SDKs' write key.
func clientsFile(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clients.json")
	out, err := exec.Command(testkit.Binary(t), "clients", "add", "--file", path, "sdk").Output()
	if err != nil {
		t.Fatalf("inlet clients add: %v", err)
	}
	return path, strings.TrimSpace(string(out))
}

// byID groups records by their messageId.
func byID(recs []testkit.Record) map[string][]testkit.Record {
	m := map[string][]testkit.Record{}
	for _, r := range recs {
		if id, ok := r.Fields["messageId"].(string); ok {
			m[id] = append(m[id], r)
		}
	}
	return m
}

// checkAsSent fails unless rec holds msg's fields as the driver gave them
// to the SDK, is keyed by its userId and carries its messageId in the
// inlet-event-id header.
func checkAsSent(t *testing.T, who string, msg map[string]any, rec testkit.Record) {
	t.Helper()
	id := msg["messageId"].(string)
	for k, want := range msg {
		if got := field(rec.Fields, k); !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s: %q is %#v in Kafka, sent %#v\nrecord: %s", who, id, k, got, want, rec.Value)
		}
	}
	if rec.Headers["inlet-event-id"] != id {
		t.Errorf("%s %s: header inlet-event-id %q", who, id, rec.Headers["inlet-event-id"])
	}
	if rec.Key != msg["userId"] {
		t.Errorf("%s %s: key %q, want the userId %q", who, id, rec.Key, msg["userId"])
	}
}

// field is the value at path (names joined by dots) in v.
func field(v map[string]any, path string) any {
	var cur any = v
	for _, name := range strings.Split(path, ".") {
		m, _ := cur.(map[string]any)
		cur = m[name]
	}
	return cur
}

// readAll reads topic from its start until it holds every id of want
// (at most 90 s: the checks then name what is missing), then for settle
// more, so that late copies (a batch Kafka took twice) are counted too.
func readAll(t *testing.T, brokers []string, topic string, want []string, settle time.Duration) []testkit.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []testkit.Record
	missing := len(want)
	deadline := time.Now().Add(90 * time.Second)
	var settled time.Time // when the last of want arrived
	for {
		now := time.Now()
		if (missing == 0 && now.Sub(settled) >= settle) || now.After(deadline) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			rec := testkit.Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Headers: map[string]string{}, Value: r.Value}
			for _, h := range r.Headers {
				rec.Headers[h.Key] = string(h.Value)
			}
			_ = json.Unmarshal(r.Value, &rec.Fields)
			out = append(out, rec)
		})
		cancel()
		if missing > 0 {
			have := byID(out)
			missing = 0
			for _, id := range want {
				if len(have[id]) == 0 {
					missing++
				}
			}
			if missing == 0 {
				settled = time.Now()
			}
		}
	}
	if missing > 0 {
		t.Errorf("topic %s: %d of the %d messages not in Kafka after 90 s", topic, missing, len(want))
	}
	return out
}

// ids are the messageIds of rs; with ok, only of the drivers that
// succeeded (the others failed the test already: their messages are not
// waited for).
func ids(rs []result, ok bool) []string {
	var out []string
	for _, r := range rs {
		if ok && (r.code != 0 || len(r.rep.Errors) > 0) {
			continue
		}
		for _, m := range r.rep.Sent {
			out = append(out, m["messageId"].(string))
		}
	}
	return out
}

// TestSegmentSDKs: each SDK's track, identify, page, screen, group and
// alias land in Kafka once, as sent; a wrong write key is refused as each
// SDK reports it. The outage half is TestSegmentSDKsOutage.
func TestSegmentSDKs(t *testing.T) {
	list := sdks(t)
	t.Parallel() // beside TestSegmentSDKsOutage, which mostly waits
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "seg-")
	clients, key := clientsFile(t)
	base := gateway(t, brokers, topic, clients)
	run := fmt.Sprintf("r%d", time.Now().UnixNano())

	good := runAll(t, list, base, key, run, 3, "FAST_RETRY=1")
	for _, r := range good {
		if r.code != 0 || len(r.rep.Errors) > 0 {
			t.Errorf("%s: exit %d, the SDK reported %v\nstderr: %s", r.sdk.name, r.code, r.rep.Errors, trim(r.stderr, 4000))
		}
		if len(r.rep.Sent) != 18 {
			t.Errorf("%s: sent %d messages, want 3 of each of the 6 calls", r.sdk.name, len(r.rep.Sent))
		}
	}
	// The same SDKs with a key inlet does not know: each reports the 401
	// its own way, and nothing of theirs reaches Kafka.
	bad := runAll(t, list, base, "not-"+key, run+"-badkey", 1, "FAST_RETRY=1")
	for _, r := range bad {
		if r.code == 0 || !strings.Contains(r.stdout, r.sdk.refused) {
			t.Errorf("%s with a wrong write key: exit %d, reported %s; want a failure reporting %q", r.sdk.name, r.code, trim(r.stdout, 2000), r.sdk.refused)
		}
	}
	want := ids(good, true)
	recs := readAll(t, brokers, topic, want, 3*time.Second)
	got := byID(recs)
	for _, r := range good {
		if r.code != 0 || len(r.rep.Errors) > 0 {
			continue // failed above
		}
		for _, m := range r.rep.Sent {
			id := m["messageId"].(string)
			switch n := len(got[id]); n {
			case 1:
				checkAsSent(t, r.sdk.name, m, got[id][0])
			default:
				t.Errorf("%s %s: %d records in Kafka, want 1", r.sdk.name, id, n)
			}
		}
	}
	if len(recs) != len(ids(good, false)) {
		t.Errorf("topic %s holds %d records, want the %d sent with the right key", topic, len(recs), len(ids(good, false)))
	}
	if t.Failed() {
		for _, r := range append(good, bad...) {
			t.Logf("%s stderr:\n%s", r.sdk.name, trim(r.stderr, 3000))
		}
	}
}

// TestSegmentSDKsOutage: with `--ack kafka`, each SDK sends while Kafka is
// down for 20 s; the SDKs retry, and after it every message is in Kafka
// (none lost; duplicates, a batch Kafka took but whose answer came too
// late, are counted and reported).
func TestSegmentSDKsOutage(t *testing.T) {
	list := sdks(t)
	t.Parallel()
	ctl := testkit.HaltableKafka(t)
	topic := testkit.Unique(t, "seg-")
	testkit.CreateTopic(t, ctl.Brokers, topic, 1, nil)
	clients, key := clientsFile(t)
	base := gateway(t, ctl.Brokers, topic, clients)
	run := fmt.Sprintf("o%d", time.Now().UnixNano())

	ctl.Halt()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(20 * time.Second)
		ctl.Resume()
	}()
	rs := runAll(t, list, base, key, run, 5)
	<-resumed
	for _, r := range rs {
		if r.code != 0 || len(r.rep.Errors) > 0 {
			t.Errorf("%s: exit %d after the outage, the SDK reported %v\nstderr: %s", r.sdk.name, r.code, r.rep.Errors, trim(r.stderr, 4000))
		}
		if r.took < 20*time.Second {
			t.Errorf("%s was done in %v, before Kafka came back: it did not wait for the outage's end", r.sdk.name, r.took)
		}
	}
	recs := readAll(t, ctl.Brokers, topic, ids(rs, true), 5*time.Second)
	got := byID(recs)
	for _, r := range rs {
		if r.code != 0 || len(r.rep.Errors) > 0 {
			continue // failed above
		}
		lost, dups := 0, 0
		for _, m := range r.rep.Sent {
			id := m["messageId"].(string)
			switch n := len(got[id]); {
			case n == 0:
				lost++
				t.Errorf("%s %s: lost", r.sdk.name, id)
			default:
				dups += n - 1
				checkAsSent(t, r.sdk.name, m, got[id][0])
			}
		}
		t.Logf("outage: %s sent %d messages, lost %d, duplicates %d, took %v", r.sdk.name, len(r.rep.Sent), lost, dups, r.took.Round(100*time.Millisecond))
	}
	if names := slices.Sorted(func(yield func(string) bool) {
		for id := range got {
			if !slices.Contains(ids(rs, false), id) && !yield(id) {
				return
			}
		}
	}); len(names) > 0 {
		t.Errorf("records in Kafka that no SDK sent: %v", names)
	}
}
