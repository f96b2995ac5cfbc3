package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixedNow is the server time of every test server: received_at is exact.
var fixedNow = time.Date(2026, 11, 30, 11, 12, 10, 8505123, time.UTC)

// A failure tells the recording sink how to fail a Write; nil succeeds.
type failure func(ctx context.Context) error

var (
	failFull     failure = func(context.Context) error { return fmt.Errorf("%w: %w", ErrSinkFull, errors.New("spool over 1 GiB")) }
	failDeadline failure = func(context.Context) error { return fmt.Errorf("producing: %w", context.DeadlineExceeded) }
	failGeneric  failure = func(context.Context) error { return errors.New("disk on fire") }
	// failBlock blocks until the request's context ends: a Kafka that never
	// answers. With WriteTimeout it is a timeout; with a client gone, a cancel.
	failBlock failure = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
)

// recordingSink is a Sink that keeps every Write it got (failed ones too),
// without copying, as a sink that hands records to a Kafka client does. It
// is safe for concurrent use.
type recordingSink struct {
	mu      sync.Mutex
	writes  [][]event.Record
	fail    failure
	entered chan struct{} // gets a value (if there is room) when Write starts
}

func (k *recordingSink) Write(ctx context.Context, recs []event.Record) error {
	k.mu.Lock()
	k.writes = append(k.writes, recs)
	fail := k.fail
	k.mu.Unlock()
	select {
	case k.entered <- struct{}{}:
	default:
	}
	if fail != nil {
		return fail(ctx)
	}
	return nil
}

func (k *recordingSink) setFail(f failure) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fail = f
}

// calls returns the Writes so far.
func (k *recordingSink) calls() [][]event.Record {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]event.Record(nil), k.writes...)
}

// records returns every record written so far, in order.
func (k *recordingSink) records() []event.Record {
	var out []event.Record
	for _, w := range k.calls() {
		out = append(out, w...)
	}
	return out
}

// onTopic returns the records written to topic.
func (k *recordingSink) onTopic(topic string) []event.Record {
	var out []event.Record
	for _, r := range k.records() {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

var _ Sink = (*recordingSink)(nil)

// harness is a Server on a real HTTP server on 127.0.0.1:0, with a
// recording sink behind it.
type harness struct {
	s    *Server
	sink *recordingSink
	logs *testkit.LogBuffer
	srv  *httptest.Server
}

// newServer makes a Server with the default config as edit changes it,
// writing to a recording sink, logging to a buffer, its clock at fixedNow.
func newServer(tb testing.TB, edit func(*Config), opts ...Option) (*Server, *recordingSink, *testkit.LogBuffer) {
	tb.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	sink := &recordingSink{entered: make(chan struct{}, 1)}
	log, logs := testkit.NewLogBuffer()
	s, err := New(cfg, sink, log, nil, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	s.now = func() time.Time { return fixedNow }
	return s, sink, logs
}

// serve runs h on a real HTTP server on 127.0.0.1:0 (tweak may set its
// timeouts before it starts), closed at the end of the test.
func serve(tb testing.TB, h http.Handler, tweak func(*http.Server)) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	if tweak != nil {
		tweak(srv.Config)
	}
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

func newHarness(tb testing.TB, edit func(*Config), opts ...Option) *harness {
	tb.Helper()
	s, sink, logs := newServer(tb, edit, opts...)
	mux := http.NewServeMux()
	s.Register(mux)
	return &harness{s: s, sink: sink, logs: logs, srv: serve(tb, mux, nil)}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// do sends a request with headers given as name, value pairs, and returns
// the answer. A nil body is sent as no body.
func (h *harness) do(tb testing.TB, method, path string, body []byte, headers ...string) response {
	tb.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	return h.send(tb, method, path, rd, headers...)
}

// send is do with any body reader: one of unknown length goes chunked.
func (h *harness) send(tb testing.TB, method, path string, body io.Reader, headers ...string) response {
	tb.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// errorAnswer is a rejection's body.
type errorAnswer struct {
	Error  string `json:"error"`
	Offset *int64 `json:"offset"`
}

func decodeError(tb testing.TB, r response) errorAnswer {
	tb.Helper()
	var e errorAnswer
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" {
		tb.Fatalf("answer %s is not a JSON error: %v", r, err)
	}
	return e
}

func decodeAnswer(tb testing.TB, r response) Answer {
	tb.Helper()
	var a Answer
	if err := json.Unmarshal(r.body, &a); err != nil || a.Rejected == nil {
		tb.Fatalf("answer %s is not an Answer: %v", r, err)
	}
	return a
}

// fields decodes a record's value.
func fields(tb testing.TB, r event.Record) map[string]any {
	tb.Helper()
	var f map[string]any
	if err := json.Unmarshal(r.Value, &f); err != nil {
		tb.Fatalf("record value %q is not a JSON object: %v", r.Value, err)
	}
	return f
}

func header(r event.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// unquote makes an answer's JSON-escaped quotes plain, for Contains checks.
func unquote(b []byte) string { return strings.ReplaceAll(string(b), `\"`, `"`) }

// sinkErrors is the number of sink failures of kind counted so far.
func (h *harness) sinkErrors(kind string) float64 {
	return testutil.ToFloat64(h.s.metrics.SinkErrors.WithLabelValues(kind))
}
