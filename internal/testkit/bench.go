package testkit

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// CPUTime is the CPU time (user and system) the process has used so far:
// benchmarks report CPU per op from two readings, which a shared, busy
// machine measures more steadily than wall time.
func CPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchRecords returns a request of n records for topic shaped like those
// ingest builds from ~100-byte events: a key, a ~250-byte enriched JSON
// value and the three headers of every event. Each call returns new
// slices, so a benchmark may hand them to code that keeps them.
func BenchRecords(topic string, n int) []event.Record {
	recs := make([]event.Record, n)
	for i := range recs {
		id := fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", i)
		recs[i] = event.Record{
			Topic: topic,
			Key:   fmt.Appendf(nil, "user-%d", i),
			Value: []byte(`{"event":"page_view","id":"` + id + `","uid":"user-1","props":{"path":"/products/123","ref":"home","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},` +
				`"received_at":"2026-12-01T17:00:00.123456789Z","ip":"127.0.0.1","ua":"inlet-bench/1"}`),
			Headers: []event.Header{
				{Key: event.HeaderEventID, Value: []byte(id)},
				{Key: event.HeaderEventName, Value: []byte("page_view")},
				{Key: event.HeaderContentType, Value: []byte("application/json")},
			},
			EventID: id,
		}
	}
	return recs
}

// CallersN runs b.N calls of call over callers goroutines (call's
// argument is the goroutine's index), as many callers of a server would,
// each making its next call once its last returned; a failed call fails
// b. It returns when every call has returned.
func CallersN(b *testing.B, callers int, call func(caller int) error) {
	b.Helper()
	next := make(chan struct{}, callers)
	go func() {
		for range b.N {
			next <- struct{}{}
		}
		close(next)
	}()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for range next {
				if err := call(c); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
