package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		sent       []string
		acked      []string
		seen       map[string]int
		want       Report // counts only
		wantLostID []string
	}{
		{
			name:  "all delivered",
			sent:  []string{"r-0", "r-1", "r-2"},
			acked: []string{"r-0", "r-1", "r-2"},
			seen:  map[string]int{"r-0": 1, "r-1": 1, "r-2": 1},
			want:  Report{Sent: 3, Acknowledged: 3, Delivered: 3},
		},
		{
			name:       "acknowledged but absent is lost",
			sent:       []string{"r-0", "r-1", "r-2"},
			acked:      []string{"r-0", "r-1", "r-2"},
			seen:       map[string]int{"r-1": 1},
			want:       Report{Sent: 3, Acknowledged: 3, Delivered: 1, Lost: 2},
			wantLostID: []string{"r-0", "r-2"},
		},
		{
			name:  "duplicates are extra copies",
			sent:  []string{"r-0", "r-1"},
			acked: []string{"r-0", "r-1"},
			seen:  map[string]int{"r-0": 3, "r-1": 1},
			want:  Report{Sent: 2, Acknowledged: 2, Delivered: 2, Duplicates: 2},
		},
		{
			name:  "unacknowledged and delivered is allowed",
			sent:  []string{"r-0", "r-1", "r-2"},
			acked: []string{"r-0"},
			seen:  map[string]int{"r-0": 1, "r-1": 2},
			want:  Report{Sent: 3, Acknowledged: 1, Delivered: 2, Duplicates: 1, DeliveredUnacknowledged: 1},
		},
		{
			name:  "unacknowledged and absent is not lost",
			sent:  []string{"r-0", "r-1"},
			acked: nil,
			seen:  map[string]int{},
			want:  Report{Sent: 2},
		},
		{
			name:  "zero counts are not deliveries",
			sent:  []string{"r-0"},
			acked: []string{"r-0"},
			seen:  map[string]int{"r-0": 0},
			want:  Report{Sent: 1, Acknowledged: 1, Lost: 1},
			// A zero count is what a map lookup of an unseen id gives.
			wantLostID: []string{"r-0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := NewLedger()
			l.Sent(tt.sent...)
			l.Acked(tt.acked...)
			r := Compare("r", l, tt.seen)
			got := Report{Sent: r.Sent, Acknowledged: r.Acknowledged, Delivered: r.Delivered, Lost: r.Lost,
				Duplicates: r.Duplicates, DeliveredUnacknowledged: r.DeliveredUnacknowledged}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("counts = %+v\nwant     %+v", got, tt.want)
			}
			if !slices.Equal(r.LostIDs, tt.wantLostID) {
				t.Errorf("LostIDs = %q, want %q", r.LostIDs, tt.wantLostID)
			}
			if r.OK() != (tt.want.Lost == 0) {
				t.Errorf("OK() = %v with %d lost", r.OK(), r.Lost)
			}
			if r.Run != "r" {
				t.Errorf("Run = %q", r.Run)
			}
		})
	}
}

func TestLostIDsInSendOrderAndCapped(t *testing.T) {
	t.Parallel()
	l := NewLedger()
	for n := range 30 {
		l.Sent(ID("run", n))
		l.Acked(ID("run", n))
	}
	r := Compare("run", l, nil)
	if r.Lost != 30 || r.OK() {
		t.Fatalf("Lost = %d, OK = %v; want 30, false", r.Lost, r.OK())
	}
	want := make([]string, MaxLostIDs)
	for n := range want {
		want[n] = ID("run", n)
	}
	if !slices.Equal(r.LostIDs, want) {
		t.Errorf("LostIDs = %q\nwant %q", r.LostIDs, want)
	}
}

func TestLedgerConcurrent(t *testing.T) {
	t.Parallel()
	l := NewLedger()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for n := range 100 {
				id := ID("r", n) // every worker sends the same ids: each counts once
				l.Sent(id)
				if n%2 == 0 {
					l.Acked(id)
				}
				l.Answered(strconv.Itoa(200 + w%2))
			}
		})
	}
	wg.Wait()
	if s, a := l.Counts(); s != 100 || a != 50 {
		t.Errorf("Counts() = %d, %d; want 100, 50", s, a)
	}
	r := Compare("r", l, nil)
	if r.Status["200"] != 400 || r.Status["201"] != 400 {
		t.Errorf("Status = %v, want 400 of each", r.Status)
	}
	if l.Start().IsZero() || r.Duration == "" {
		t.Errorf("no start time or duration: %v %q", l.Start(), r.Duration)
	}
}

func TestLoadConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultLoadConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name   string
		modify func(*LoadConfig)
	}{
		{"no scheme", func(c *LoadConfig) { c.Target = "127.0.0.1:8080" }},
		{"nothing to send", func(c *LoadConfig) { c.Events = 0 }},
		{"negative events", func(c *LoadConfig) { c.Events = -1 }},
		{"zero batch", func(c *LoadConfig) { c.Batch = 0 }},
		{"zero concurrency", func(c *LoadConfig) { c.Concurrency = 0 }},
		{"negative rate", func(c *LoadConfig) { c.Rate = -5 }},
		{"zero timeout", func(c *LoadConfig) { c.Timeout = 0 }},
		{"timeout past the engine's range", func(c *LoadConfig) { c.Timeout = 2 * time.Minute }},
		{"concurrency past the engine's", func(c *LoadConfig) { c.Concurrency = 100001 }},
		{"events and a duration", func(c *LoadConfig) { c.Duration = time.Second }},
		{"empty run", func(c *LoadConfig) { c.Run = "" }},
		{"run with a quote", func(c *LoadConfig) { c.Run = `a"b` }},
		{"long run", func(c *LoadConfig) { c.Run = string(make([]byte, 101)) }},
		{"CA for http", func(c *LoadConfig) { c.TLSCAFile = "ca.pem" }},
		{"skip verify for http", func(c *LoadConfig) { c.TLSInsecureSkipVerify = true }},
	}
	for _, tt := range tests {
		c := ok
		tt.modify(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tt.name)
		}
	}
	c := ok
	c.Events, c.Duration = 0, time.Second
	if err := c.Validate(); err != nil {
		t.Errorf("duration instead of events: %v", err)
	}
}

// fakeGateway answers batches like inlet: 200 with the batch answer. Batches
// whose first seq is a multiple of 20 get 503; it rejects event index 1 of
// batches whose first seq is 5.
func fakeGateway(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/batch" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var evs []struct {
			Event string `json:"event"`
			ID    string `json:"id"`
			Props struct {
				Seq int `json:"seq"`
			} `json:"props"`
		}
		if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || len(evs) == 0 {
			http.Error(w, "bad batch", http.StatusBadRequest)
			return
		}
		for _, e := range evs {
			if e.Event != "inlet_verify" || e.ID != ID("r", e.Props.Seq) {
				http.Error(w, "bad event "+e.ID, http.StatusBadRequest)
				return
			}
		}
		switch first := evs[0].Props.Seq; {
		case first%20 == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case first == 5:
			fmt.Fprintf(w, `{"accepted":%d,"rejected":[{"index":1,"error":"no"}]}`, len(evs)-1)
		default:
			fmt.Fprintf(w, `{"accepted":%d,"rejected":[]}`, len(evs))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLoad(t *testing.T) {
	t.Parallel()
	srv := fakeGateway(t)
	cfg := DefaultLoadConfig()
	cfg.Target, cfg.Run, cfg.Events, cfg.Batch, cfg.Concurrency = srv.URL, "r", 102, 5, 4
	l := NewLedger()
	if err := Load(context.Background(), cfg, l); err != nil {
		t.Fatal(err)
	}
	// 21 requests (the last of 2 events); those starting at 0, 20, ..., 100 get 503.
	r := Compare("r", l, nil)
	if r.Sent != 102 || r.Status["503"] != 6 || r.Status["200"] != 15 {
		t.Fatalf("sent %d, status %v; want 102, 6x503, 15x200", r.Sent, r.Status)
	}
	// 503 batches hold 5+5+5+5+5+2 events; one more event was rejected.
	if want := 102 - 27 - 1; r.Acknowledged != want {
		t.Errorf("acknowledged %d, want %d", r.Acknowledged, want)
	}
	if _, acked := l.has(ID("r", 6)); acked {
		t.Error("an event the answer rejected counts as acknowledged")
	}
	if _, acked := l.has(ID("r", 7)); !acked {
		t.Error("an event accepted beside a rejected one is not acknowledged")
	}
}

func TestLoadRate(t *testing.T) {
	t.Parallel()
	srv := fakeGateway(t)
	cfg := DefaultLoadConfig()
	cfg.Target, cfg.Run, cfg.Events, cfg.Batch, cfg.Rate = srv.URL, "r", 60, 3, 200
	start := time.Now()
	if err := Load(context.Background(), cfg, NewLedger()); err != nil {
		t.Fatal(err)
	}
	// The last batch (seq 57) is due at 57/200 s.
	if d := time.Since(start); d < 280*time.Millisecond {
		t.Errorf("60 events at 200/s took %v, want at least 285ms", d)
	}
}

func TestLoadDuration(t *testing.T) {
	t.Parallel()
	srv := fakeGateway(t)
	cfg := DefaultLoadConfig()
	cfg.Target, cfg.Run, cfg.Events, cfg.Duration, cfg.Batch, cfg.Rate = srv.URL, "r", 0, 300*time.Millisecond, 1, 100
	l := NewLedger()
	if err := Load(context.Background(), cfg, l); err != nil {
		t.Fatal(err)
	}
	if sent, _ := l.Counts(); sent < 15 || sent > 30 {
		t.Errorf("sent %d events in 300ms at 100/s, want about 30", sent)
	}
}

func TestLoadClientErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leaving
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	for target, want := range map[string]string{closed: "refused", slow.URL: "timeout"} {
		cfg := DefaultLoadConfig()
		cfg.Target, cfg.Events, cfg.Batch, cfg.Concurrency, cfg.Timeout = target, 4, 2, 2, 100*time.Millisecond
		l := NewLedger()
		if err := Load(context.Background(), cfg, l); err != nil {
			t.Fatal(err)
		}
		r := Compare(cfg.Run, l, nil)
		if r.Sent != 4 || r.Acknowledged != 0 || r.Status[want] != 2 || len(r.Status) != 1 {
			t.Errorf("%s: sent %d, acknowledged %d, status %v; want 4, 0, {%s:2}", target, r.Sent, r.Acknowledged, r.Status, want)
		}
	}
}

func TestLoadStopsWithContext(t *testing.T) {
	t.Parallel()
	srv := fakeGateway(t)
	cfg := DefaultLoadConfig()
	cfg.Target, cfg.Run, cfg.Events, cfg.Rate = srv.URL, "r", 1000, 10 // 100 s
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := Load(ctx, cfg, NewLedger()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Load = %v, want the context's error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Load returned %v after its context ended", d)
	}
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	bcfg := devbroker.DefaultConfig()
	bcfg.Listen, bcfg.SyncWrites = "127.0.0.1:0", false
	b, err := devbroker.Start(bcfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	brokers := []string{b.Addr()}
	// One partition, so that every record before the last acknowledged one
	// is read before Delivered stops.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const topic = "events"
	produce := func(id string, header bool) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, `{"event":"inlet_verify","id":%q}`, id)}
		if header {
			r.Headers = []kgo.RecordHeader{{Key: "inlet-event-id", Value: []byte(id)}}
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce("other-0", true) // another run: not counted
	produce("r-9", true)     // sent, never acknowledged
	produce("r-10", true)    // not in the ledger, but of the run
	produce("r-0", true)
	produce("r-0", true)  // a duplicate
	produce("r-1", false) // the id only in the value
	produce("r-11", true) // after the last acknowledged id: may or may not be read

	l := NewLedger()
	l.Sent("r-0", "r-1", "r-9")
	l.Acked("r-0", "r-1")
	start := time.Now()
	seen, err := Delivered(ctx, brokers, kafka.Security{}, topic, Prefix("r"), l, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 8*time.Second {
		t.Errorf("Delivered waited %v although every acknowledged id was seen", time.Since(start))
	}
	delete(seen, "r-11")
	want := map[string]int{"r-0": 2, "r-1": 1, "r-9": 1, "r-10": 1}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("seen = %v, want %v", seen, want)
	}

	// An acknowledged id that never arrives: read until idle, then report it lost.
	l.Sent("r-2")
	l.Acked("r-2")
	start = time.Now()
	seen, err = Delivered(ctx, brokers, kafka.Security{}, topic, Prefix("r"), l, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("Delivered returned after %v, want about the idle time", d)
	}
	r := Compare("r", l, seen)
	if r.Lost != 1 || !slices.Equal(r.LostIDs, []string{"r-2"}) || r.Duplicates != 1 || r.DeliveredUnacknowledged != 3 {
		t.Errorf("report %+v, want r-2 lost, 1 duplicate, 3 delivered unacknowledged (r-9, r-10, r-11)", r)
	}

	if _, err := Delivered(ctx, []string{closedAddr(t)}, kafka.Security{}, topic, "r-", l, time.Second); err == nil {
		t.Error("Delivered from a broker that does not exist: no error")
	}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestAckGaps feeds a ledger on a fake clock: the spans without a 2xx
// answer run from the first send, between 2xx answers, and to the last
// answer; answers other than 2xx do not end them.
func TestAckGaps(t *testing.T) {
	t.Parallel()
	type step struct {
		at      time.Duration // since the start
		outcome string        // "sent" or what Answered gets
	}
	tests := []struct {
		name      string
		steps     []step
		longest   string
		after     string
		atLeast1s int
	}{
		{name: "nothing sent", longest: "0s", after: "0s"},
		{
			name:    "steady 2xx",
			steps:   []step{{0, "sent"}, {100 * time.Millisecond, "200"}, {300 * time.Millisecond, "200"}, {500 * time.Millisecond, "202"}},
			longest: "200ms", after: "100ms",
		},
		{
			name: "a gap between 2xx, 503s and timeouts inside",
			steps: []step{{0, "sent"}, {100 * time.Millisecond, "200"}, {300 * time.Millisecond, "200"},
				{time.Second, "503"}, {2 * time.Second, "timeout"}, {2500 * time.Millisecond, "200"}, {2600 * time.Millisecond, "200"}},
			longest: "2.2s", after: "300ms", atLeast1s: 1,
		},
		{
			name:    "the first 2xx late",
			steps:   []step{{0, "sent"}, {1500 * time.Millisecond, "200"}, {1600 * time.Millisecond, "200"}},
			longest: "1.5s", after: "0s", atLeast1s: 1,
		},
		{
			name: "the end without a 2xx",
			steps: []step{{0, "sent"}, {100 * time.Millisecond, "200"}, {1100 * time.Millisecond, "200"},
				{2 * time.Second, "refused"}, {4100 * time.Millisecond, "503"}},
			longest: "3s", after: "1.1s", atLeast1s: 2, // 1.0s between the 2xx (1 s counts), 3.0s to the end
		},
		{
			name:    "no 2xx at all",
			steps:   []step{{0, "sent"}, {time.Second, "503"}, {2 * time.Second, "503"}},
			longest: "2s", after: "0s", atLeast1s: 1,
		},
		{
			name:    "not a status",
			steps:   []step{{0, "sent"}, {500 * time.Millisecond, "2000"}, {600 * time.Millisecond, "error"}, {700 * time.Millisecond, "204"}},
			longest: "700ms", after: "0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			var now time.Time
			l := NewLedger()
			l.now = func() time.Time { return now }
			for i, s := range tt.steps {
				now = start.Add(s.at)
				if s.outcome == "sent" {
					l.Sent(ID("r", i))
				} else {
					l.Answered(s.outcome)
				}
			}
			g := Compare("r", l, nil).AckGaps
			if g.Longest != tt.longest || g.LongestAfter != tt.after || g.AtLeast1s != tt.atLeast1s {
				t.Errorf("AckGaps = %+v\nwant longest %s, %s after the start, %d of 1s or more", g, tt.longest, tt.after, tt.atLeast1s)
			}
			if tt.longest != "0s" {
				after, _ := time.ParseDuration(tt.after)
				longest, _ := time.ParseDuration(tt.longest)
				if !g.LongestStart.Equal(start.Add(after)) || g.LongestSeconds != longest.Seconds() {
					t.Errorf("LongestStart %v, LongestSeconds %v; want %v, %v", g.LongestStart, g.LongestSeconds, start.Add(after), longest.Seconds())
				}
			}
		})
	}
}

// TestDeliveredToEndOffsets: without a ledger Delivered reads a topic that
// another producer keeps writing (every 5 ms, ids of the run too) up to the
// end offsets listed at its start, and stops there, long before idle.
func TestDeliveredToEndOffsets(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	testkit.CreateTopic(t, brokers, topic, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var before []*kgo.Record
	for n := range 30 {
		id := ID("r", n)
		before = append(before, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"id":%q}`, id),
			Headers: []kgo.RecordHeader{{Key: "inlet-event-id", Value: []byte(id)}}})
		before = append(before, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"id":"other-%d"}`, n)})
	}
	before = append(before, &kgo.Record{Topic: topic, Value: []byte(`{"id":"r-0"}`)}) // a duplicate
	if err := cl.ProduceSync(ctx, before...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The other producer: ids of the run after the first 30, until the end.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var late atomic.Int64 // acknowledged by Kafka
	wg.Go(func() {
		for n := 1000; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"id":%q}`, ID("r", n))}).FirstErr() == nil {
				late.Add(1)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	testkit.WaitFor(t, 10*time.Second, "the other producer writing", func() bool { return late.Load() >= 10 })

	const idle = 10 * time.Second
	dctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	start := time.Now()
	seen, err := Delivered(dctx, brokers, kafka.Security{}, topic, Prefix("r"), nil, idle)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Delivered after %v: %v", took, err)
	}
	if took >= idle {
		t.Errorf("Delivered took %v with a producer writing: it did not stop at the end offsets", took)
	}
	for n := range 30 {
		want := 1
		if n == 0 {
			want = 2
		}
		if got := seen[ID("r", n)]; got != want {
			t.Errorf("%s seen %d times, want %d", ID("r", n), got, want)
		}
	}
	// The other producer's ids, r-1000 on, each once at most: those
	// written before the end offsets were listed.
	lateSeen := 0
	for id, n := range seen {
		if seq, _ := strconv.Atoi(id[len("r-"):]); seq >= 1000 {
			lateSeen++
			if n != 1 {
				t.Errorf("%s seen %d times, want once", id, n)
			}
		}
	}
	if lateSeen > int(late.Load()) || len(seen) != 30+lateSeen {
		t.Errorf("seen %d ids, want the 30 and at most the %d the other producer wrote: %v", len(seen), late.Load(), seen)
	}

	// A topic that does not exist holds nothing: no wait for idle.
	start = time.Now()
	seen, err = Delivered(dctx, brokers, kafka.Security{}, testkit.Unique(t, "none-"), Prefix("r"), nil, idle)
	if err != nil || len(seen) != 0 || time.Since(start) >= idle/2 {
		t.Errorf("Delivered of a missing topic: %v, %v after %v; want nothing, at once", seen, err, time.Since(start))
	}
}
