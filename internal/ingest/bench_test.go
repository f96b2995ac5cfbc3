package ingest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/event"
)

// discardSink takes every record and keeps none: done with them on return
// (RecordsDone), as the spool and Kafka after its acks are.
type discardSink struct{}

func (discardSink) Write(context.Context, []event.Record) error { return nil }

func (discardSink) RecordsDone(error) bool { return true }

// benchBody is a batch of n events of a few names, as a page sends them.
func benchBody(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"event":"page_view_%d","uid":"user-%04d","props":{"path":"/pricing","ref":"ad"}}`, i%3, i)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// benchIngest serves POST /v1/batch of a 10-event batch through the handler
// (no network), per op one request.
func benchIngest(b *testing.B, opts ...Option) { benchIngestBody(b, benchBody(10), 10, opts...) }

// benchIngestBody serves POST /v1/batch of body, n events, per op one
// request, and reports allocs/event (the request's allocations, the test
// client's included, over its events).
func benchIngestBody(b *testing.B, body []byte, n int, opts ...Option) {
	benchIngestConfig(b, DefaultConfig(), body, n, opts...)
}

// benchIngestConfig is benchIngestBody with cfg.
func benchIngestConfig(b *testing.B, cfg Config, body []byte, n int, opts ...Option) {
	s, err := New(cfg, discardSink{}, slog.New(slog.DiscardHandler), nil, opts...)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ops := 0
	defer func() {
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(ops*n), "allocs/event")
	}()
	for b.Loop() {
		ops++
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("answer %d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkIngest is the cost of one batch request without credentials or
// catalog.
func BenchmarkIngest(b *testing.B) { benchIngest(b) }

// BenchmarkIngestSizes is BenchmarkIngest with batches of 5 events of
// 100 B, 1 KiB and 8 KiB.
func BenchmarkIngestSizes(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"100B", 100}, {"1KiB", 1 << 10}, {"8KiB", 8 << 10}} {
		b.Run("size="+size.name, func(b *testing.B) {
			var body bytes.Buffer
			body.WriteByte('[')
			for i := range 5 {
				if i > 0 {
					body.WriteByte(',')
				}
				e := fmt.Sprintf(`{"event":"page_view","ts":1767366245000,"uid":"user-%04d","props":{"path":"/pricing","pad":""}}`, i)
				body.WriteString(strings.Replace(e, `"pad":""`, `"pad":"`+strings.Repeat("x", max(size.n-len(e), 0))+`"`, 1))
			}
			body.WriteByte(']')
			benchIngestBody(b, body.Bytes(), 5)
		})
	}
}

// BenchmarkIngestCatalog is BenchmarkIngest with the catalog on (mode
// open, every key found, as a warm cache answers): the cost of grouping,
// one Resolve and the code in each record.
func BenchmarkIngestCatalog(b *testing.B) {
	c := &staticCatalog{entries: map[catalog.Key]catalog.Entry{}}
	for i := range 3 {
		k := catalog.Key{Group: "default", Name: fmt.Sprintf("page_view_%d", i)}
		c.entries[k] = catalog.Entry{Group: k.Group, Name: k.Name, Code: int64(100 + i), Status: catalog.StatusObserved}
	}
	benchIngest(b, WithCatalog(c))
}

// staticCatalog answers from a fixed map, in mode open, keeping nothing.
type staticCatalog struct{ entries map[catalog.Key]catalog.Entry }

func (c *staticCatalog) Mode() catalog.Mode   { return catalog.ModeOpen }
func (c *staticCatalog) DefaultGroup() string { return "default" }
func (c *staticCatalog) Resolve(_ context.Context, keys []catalog.Key, out []catalog.Result) {
	for i, k := range keys {
		e, ok := c.entries[k]
		out[i] = catalog.Result{Entry: e, Found: ok}
	}
}
func (c *staticCatalog) Check(*catalog.Entry, []byte) []catalog.Violation { return nil }

// BenchmarkIngestShapes is 20 events of about 200 bytes a request as
// inlet's own batch and as a Segment batch (track messages in a
// {"batch":[...]} wrapper), as `inlet bench http --shape` sends them.
func BenchmarkIngestShapes(b *testing.B) {
	body := func(segment bool) []byte {
		head, mid, tail := `{"event":"bench","id":"run-`, `","props":{"pad":"`, `"}}`
		var out []byte
		if segment {
			head, mid = `{"type":"track","event":"bench","messageId":"run-`, `","anonymousId":"a","properties":{"pad":"`
			out = append(out, `{"batch":`...)
		}
		out = append(out, '[')
		for i := range 20 {
			if i > 0 {
				out = append(out, ',')
			}
			e := fmt.Appendf(nil, "%s%d%s", head, i, mid)
			e = append(e, strings.Repeat("x", max(0, 200-len(e)-len(tail)))...)
			out = append(append(out, e...), tail...)
		}
		out = append(out, ']')
		if segment {
			out = append(out, `,"sentAt":"2026-12-05T10:00:00.000Z"}`...)
		}
		return out
	}
	b.Run("shape=inlet", func(b *testing.B) { benchIngestBody(b, body(false), 20) })
	b.Run("shape=segment", func(b *testing.B) { benchIngestBody(b, body(true), 20) })
}
