package event_test

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// benchEvent returns one event of about size bytes, padded in its props.
func benchEvent(tb testing.TB, size, i int) []byte {
	tb.Helper()
	const format = `{"event":"page_view","ts":1767366245000,"uid":"user-%04d","props":{"path":"/pricing","pad":"%s"}}`
	pad := size - len(fmt.Sprintf(format, i, ""))
	if pad < 0 {
		tb.Fatalf("an event of %d bytes is too small", size)
	}
	return fmt.Appendf(nil, format, i, strings.Repeat("x", pad))
}

// sink keeps the benchmark's records alive, as a sink would.
var sink event.Record

// BenchmarkPipeline measures what the server does for each event of a batch:
// Frame, then a Batch that validates, enriches and lays out each record
// (Add, Build, Record). It reports ns/event and allocs/event besides the
// usual figures per batch.
func BenchmarkPipeline(b *testing.B) {
	const events = 5
	sizes := []struct {
		name string
		size int
	}{{"100B", 100}, {"1KiB", 1 << 10}, {"8KiB", 8 << 10}}
	layouts := []struct {
		name   string
		format event.Format
	}{{"array", event.FormatJSON}, {"ndjson", event.FormatNDJSON}}

	meta := event.Meta{ReceivedAt: time.Now(), IP: "192.0.2.7", UA: "Mozilla/5.0 (X11; Linux x86_64)"}
	for _, s := range sizes {
		for _, l := range layouts {
			b.Run(fmt.Sprintf("size=%s/layout=%s", s.name, l.name), func(b *testing.B) {
				var body bytes.Buffer
				if l.format == event.FormatJSON {
					body.WriteByte('[')
				}
				for i := range events {
					if i > 0 && l.format == event.FormatJSON {
						body.WriteByte(',')
					}
					body.Write(benchEvent(b, s.size, i))
					if l.format == event.FormatNDJSON {
						body.WriteByte('\n')
					}
				}
				if l.format == event.FormatJSON {
					body.WriteByte(']')
				}
				raw := body.Bytes()

				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				n := 0
				var items [][]byte // reused, as the server pools it
				for b.Loop() {
					n++
					var err error
					items, err = event.Frame(items[:0], raw, l.format, event.DefaultLimits.MaxEvents)
					if err != nil {
						b.Fatal(err)
					}
					batch := event.NewBatch("events", meta, event.DefaultLimits.MaxEventBytes)
					for _, item := range items {
						if bad := batch.Add(item); bad != nil {
							b.Fatal(bad)
						}
					}
					batch.Build()
					for i := range items {
						sink = batch.Record(i)
					}
					batch.Release()
				}
				runtime.ReadMemStats(&after)
				per := float64(n * events)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/event")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/event")
			})
		}
	}
}
