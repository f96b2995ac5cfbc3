package ship

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// testConfig is the defaults with a short linger and batches of 100,
// changed by set, with Key and Checkpoint filled in as Run fills them.
func testConfig(set func(c *Config)) Config {
	c := DefaultConfig()
	c.Linger, c.BatchSize = 5*time.Millisecond, 100
	set(&c)
	return c.withDefaults()
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line-%d level=info n=%d\n", i, i)
	}
	return b.String()
}

// lineNumbers returns the line number of each record (from props.line),
// and the number of duplicates (records whose id was seen before).
func lineNumbers(t *testing.T, recs []testkit.Record) (nums []int, dups int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range recs {
		id, _ := r.Fields["id"].(string)
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		props, _ := r.Fields["props"].(map[string]any)
		var n int
		if _, err := fmt.Sscanf(fmt.Sprint(props["line"]), "line-%d", &n); err != nil {
			t.Fatalf("record %s: %v", r.Value, err)
		}
		nums = append(nums, n)
	}
	return nums, dups
}

func checkSequence(t *testing.T, nums []int, n int) {
	t.Helper()
	if len(nums) != n {
		t.Fatalf("%d distinct lines arrived, want %d: %v", len(nums), n, nums)
	}
	for i, v := range nums {
		if v != i {
			t.Fatalf("line %d arrived where %d was due", v, i)
		}
	}
}

func distinct(n int) func([]testkit.Record) bool {
	return func(rs []testkit.Record) bool {
		ids := map[any]bool{}
		for _, r := range rs {
			ids[r.Fields["id"]] = true
		}
		return len(ids) >= n
	}
}

// countLines is the number of NDJSON lines in a request body sent with
// Content-Encoding enc.
func countLines(t *testing.T, enc string, body []byte) int {
	t.Helper()
	if enc == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Errorf("gzip body: %v", err)
			return 0
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Errorf("gzip body: %v", err)
			return 0
		}
	}
	n := bytes.Count(body, []byte("\n"))
	if len(body) > 0 && body[len(body)-1] != '\n' {
		n++ // a last line without its newline
	}
	return n
}

func readPos(t *testing.T, path string) filePos {
	var p filePos
	b, err := os.ReadFile(path)
	if err == nil {
		json.Unmarshal(b, &p)
	}
	return p
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestShipStdinToInlet: lines of stdin arrive through a real inlet, in
// order (one anon_id: one partition), and Ship returns nil only after all
// were acknowledged.
func TestShipStdinToInlet(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	const n = 1000
	cfg := testConfig(func(c *Config) { c.Target = "http://" + g.Addr() })
	if err := Run(context.Background(), cfg, strings.NewReader(lines(0, n)), testkit.Logger(t)); err != nil {
		t.Fatal(err)
	}
	recs := testkit.ConsumeN(t, brokers, topic, n, 0)
	nums, dups := lineNumbers(t, recs)
	checkSequence(t, nums, n)
	if dups != 0 {
		t.Errorf("%d duplicates without a fault", dups)
	}
	if ctx := recs[0].Fields["context"].(map[string]any); ctx["source"] != "stdin" || recs[0].Fields["event"] != "log" {
		t.Errorf("event %s", recs[0].Value)
	}
}

// TestShipInletDiesMidBatch: inlet acknowledges a batch but the answer is
// lost (the connection dies, as when inlet is killed after its fsync), and
// another batch is cut before inlet reads it: Ship retries both; the cost
// is duplicates with the same ids, never a lost or reordered line.
func TestShipInletDiesMidBatch(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	target, _ := url.Parse("http://" + g.Addr())
	proxy := httputil.NewSingleHostReverseProxy(target)
	var reqs, lost atomic.Int64 // lost: the lines of the batch whose answer was lost
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch reqs.Add(1) {
		case 3: // acknowledged by inlet, answer lost
			// Batches are cut at 100 lines or after the linger, whichever
			// comes first: count this one's.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading request 3: %v", err)
			}
			lost.Store(int64(countLines(t, r.Header.Get("Content-Encoding"), body)))
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r)
			if rec.Code/100 != 2 {
				t.Errorf("request 3: inlet answered %d, want it acknowledged", rec.Code)
			}
			panic(http.ErrAbortHandler)
		case 6: // cut before inlet
			panic(http.ErrAbortHandler)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	srv.Config.ErrorLog = nil
	const n = 1000
	cfg := testConfig(func(c *Config) { c.Target = srv.URL })
	if err := Run(context.Background(), cfg, strings.NewReader(lines(0, n)), testkit.Logger(t)); err != nil {
		t.Fatal(err)
	}
	recs := testkit.Consume(t, brokers, topic, 30*time.Second, distinct(n))
	nums, dups := lineNumbers(t, recs)
	checkSequence(t, nums, n)
	if l := lost.Load(); l == 0 || int64(dups) != l {
		t.Errorf("%d duplicates, want the %d lines of the batch whose answer was lost", dups, l)
	}
}

// TestShipRejectedExitsNonZero: lines inlet refuses for good are not
// retried, and Ship fails with their count.
func TestShipRejectedExitsNonZero(t *testing.T) {
	var reqs, sent atomic.Int64 // requests, and events in them
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("request %d: %v", reqs.Load(), err)
				return
			}
			body = zr
		}
		dec := json.NewDecoder(body) // NDJSON: one event per line
		for {
			var ev json.RawMessage
			if err := dec.Decode(&ev); err == io.EOF {
				break
			} else if err != nil {
				t.Errorf("request %d: %v", reqs.Load(), err)
				break
			}
			sent.Add(1)
		}
		w.WriteHeader(400)
		w.Write([]byte(`{"error":"no"}`))
	}))
	defer srv.Close()
	err := Run(context.Background(), testConfig(func(c *Config) { c.Target = srv.URL }), strings.NewReader(lines(0, 150)), testkit.Logger(t))
	// However the lines were batched, each was sent once: a 400 is not retried.
	if err == nil || !strings.Contains(err.Error(), "150 of 150 lines") || sent.Load() != 150 {
		t.Errorf("Run: %v after %d requests carrying %d events: want 150 of 150 not acknowledged, each line sent once", err, reqs.Load(), sent.Load())
	}
}

// TestShipUnreachableInterrupted: with inlet unreachable, an interrupt
// ends Ship within --stop-timeout, failing with the count.
func TestShipUnreachableInterrupted(t *testing.T) {
	cfg := testConfig(func(c *Config) { c.Target, c.StopTimeout = "http://"+testkit.FreeAddr(t), 200*time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := Run(ctx, cfg, strings.NewReader(lines(0, 10)), testkit.Logger(t))
	if took := time.Since(t0); err == nil || !strings.Contains(err.Error(), "10 of 10") || took > 3*time.Second {
		t.Errorf("Run: %v after %v", err, took)
	}
}
