package client_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeInlet answers /v1/batch with the status answer(n) returns for the
// n-th request (from 1), recording each request's event ids.
type fakeInlet struct {
	mu     sync.Mutex
	times  []time.Time
	ids    [][]string
	answer func(n int, w http.ResponseWriter, ids []string)
}

func (f *fakeInlet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = zr
	}
	var ids []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		var e struct{ ID string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ids = append(ids, e.ID)
	}
	f.mu.Lock()
	f.times = append(f.times, time.Now())
	f.ids = append(f.ids, ids)
	n := len(f.ids)
	f.mu.Unlock()
	f.answer(n, w, ids)
}

func (f *fakeInlet) requests() ([][]string, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.ids...), append([]time.Time(nil), f.times...)
}

func ok(w http.ResponseWriter, ids []string) {
	fmt.Fprintf(w, `{"accepted":%d,"rejected":[]}`, len(ids))
}

func start(t *testing.T, f *fakeInlet, opts ...client.Option) *client.Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func track(t *testing.T, c *client.Client, n int) {
	t.Helper()
	for i := range n {
		if err := c.Track(context.Background(), client.Event{Event: "e", Props: map[string]any{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRetryHonoursRetryAfter: 503 and 429 with Retry-After are retried no
// sooner than the header says, with the same event ids; then delivered.
func TestRetryHonoursRetryAfter(t *testing.T) {
	for _, code := range []int{503, 429} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) {
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					http.Error(w, `{"error":"busy"}`, code)
					return
				}
				ok(w, ids)
			}}
			c := start(t, f, client.WithBackoff(time.Millisecond, 5*time.Millisecond))
			track(t, c, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			reqs, times := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2: %v", len(reqs), reqs)
			}
			if gap := times[1].Sub(times[0]); gap < time.Second {
				t.Errorf("retried after %v, before Retry-After: 1", gap)
			}
			if fmt.Sprint(reqs[0]) != fmt.Sprint(reqs[1]) || reqs[0][0] == "" {
				t.Errorf("ids changed across the retry: %v then %v", reqs[0], reqs[1])
			}
			s := c.Stats()
			if s.Sent != 3 || s.Retried != 1 || len(s.Dropped) != 0 {
				t.Errorf("stats %+v, want 3 sent, 1 retried, none dropped", s)
			}
		})
	}
}

// TestNotRetried: 4xx other than 408/429 are not retried, and reported;
// 408 and 500 are retried.
func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		code  int
		retry bool
	}{{400, false}, {401, false}, {403, false}, {415, false}, {408, true}, {500, true}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) {
				if n == 1 {
					http.Error(w, `{"error":"no"}`, tc.code)
					return
				}
				ok(w, ids)
			}}
			var mu sync.Mutex
			var reported []error
			c := start(t, f, client.WithBackoff(time.Millisecond, 5*time.Millisecond),
				client.WithErrorHandler(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }))
			track(t, c, 2)
			if err := c.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			reqs, _ := f.requests()
			s := c.Stats()
			mu.Lock()
			defer mu.Unlock()
			if tc.retry {
				if len(reqs) != 2 || s.Sent != 2 || s.Retried != 1 {
					t.Errorf("%d requests, stats %+v: want a retry and 2 sent", len(reqs), s)
				}
				return
			}
			var se *client.StatusError
			if len(reqs) != 1 || s.Dropped[client.DropRejected] != 2 || len(reported) != 1 || !errors.As(reported[0], &se) || se.Code != tc.code {
				t.Errorf("%d requests, stats %+v, reported %v: want 1 request, 2 dropped as rejected, the %d reported", len(reqs), s, reported, tc.code)
			}
		})
	}
}

// TestPartialReject: events inlet lists in "rejected" are counted and reported.
func TestPartialReject(t *testing.T) {
	f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) {
		fmt.Fprintf(w, `{"accepted":%d,"rejected":[{"index":1,"error":"bad"}]}`, len(ids)-1)
	}}
	var got error
	c := start(t, f, client.WithErrorHandler(func(err error) { got = err }))
	track(t, c, 3)
	c.Flush(context.Background())
	var re *client.RejectedError
	if s := c.Stats(); s.Sent != 2 || s.Dropped[client.DropRejected] != 1 || !errors.As(got, &re) || re.Rejected[0].Index != 1 {
		t.Errorf("stats %+v, reported %v", s, got)
	}
}

// TestTooLargeSplits: a 413 halves the batch, in order, down to the event
// that alone is too large, which is dropped and counted.
func TestTooLargeSplits(t *testing.T) {
	f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) {
		if len(ids) > 2 {
			http.Error(w, `{"error":"too large"}`, 413)
			return
		}
		ok(w, ids)
	}}
	c := start(t, f, client.WithBatch(8, 1<<20, time.Hour))
	track(t, c, 8)
	c.Flush(context.Background())
	if s := c.Stats(); s.Sent != 8 || len(s.Dropped) != 0 {
		t.Errorf("stats %+v, want 8 sent", s)
	}
	reqs, _ := f.requests()
	var order []string
	for _, r := range reqs {
		if len(r) <= 2 {
			order = append(order, r...)
		}
	}
	first := reqs[0]
	if fmt.Sprint(order) != fmt.Sprint(first) {
		t.Errorf("delivered %v, want the order %v", order, first)
	}
}

// TestQueueFullPolicies: with the sender stuck, DropNewest refuses at once
// and Block after its duration; both count what they drop.
func TestQueueFullPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy client.Policy
		min    time.Duration
	}{{"drop-newest", client.DropNewest(), 0}, {"block", client.Block(100 * time.Millisecond), 100 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) { <-release; ok(w, ids) }}
			c := start(t, f, client.WithQueueSize(2), client.WithBatch(1, 1<<20, 0), client.WithFullPolicy(tc.policy))
			defer close(release)
			track(t, c, 1) // taken by the sender, stuck in the request
			time.Sleep(50 * time.Millisecond)
			track(t, c, 2) // fills the queue
			t0 := time.Now()
			err := c.Track(context.Background(), client.Event{Event: "e"})
			took := time.Since(t0)
			if !errors.Is(err, client.ErrQueueFull) || took < tc.min || took > tc.min+2*time.Second {
				t.Errorf("Track: %v after %v, want ErrQueueFull after %v", err, took, tc.min)
			}
			if s := c.Stats(); s.Dropped[client.DropQueueFull] != 1 {
				t.Errorf("stats %+v, want 1 dropped as queue_full", s)
			}
		})
	}
}

// TestCloseDeadline: Close with a deadline returns in time while inlet
// keeps answering 503, and counts what it could not deliver.
func TestCloseDeadline(t *testing.T) {
	f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) {
		w.Header().Set("Retry-After", "30")
		http.Error(w, `{"error":"busy"}`, 503)
	}}
	c := start(t, f)
	track(t, c, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := c.Close(ctx)
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("Close took %v with a 300ms deadline", took)
	}
	if err == nil || c.Stats().Dropped[client.DropCloseTimeout] != 5 {
		t.Errorf("Close: %v, stats %+v: want 5 dropped as close_timeout", err, c.Stats())
	}
	if err := c.Track(context.Background(), client.Event{Event: "late"}); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Track after Close: %v", err)
	}
}

// TestBatching: events are batched by count; linger sends a partial batch.
func TestBatching(t *testing.T) {
	f := &fakeInlet{answer: func(n int, w http.ResponseWriter, ids []string) { ok(w, ids) }}
	c := start(t, f, client.WithBatch(10, 1<<20, 50*time.Millisecond))
	track(t, c, 25)
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Sent < 25 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	reqs, _ := f.requests()
	var sizes []int
	for _, r := range reqs {
		sizes = append(sizes, len(r))
	}
	if fmt.Sprint(sizes) != "[10 10 5]" {
		t.Errorf("batch sizes %v, want [10 10 5]", sizes)
	}
}

func TestBackoff(t *testing.T) {
	for attempt := 1; attempt < 40; attempt++ {
		d := client.Backoff(attempt, 100*time.Millisecond, 10*time.Second, 0)
		if d < 0 || d > 10*time.Second {
			t.Fatalf("attempt %d: %v", attempt, d)
		}
	}
	if d := client.Backoff(1, 100*time.Millisecond, time.Second, 5*time.Second); d < 5*time.Second {
		t.Errorf("Retry-After 5s gave %v", d)
	}
}
