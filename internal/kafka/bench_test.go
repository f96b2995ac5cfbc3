package kafka

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// benchRecords returns a request of n records shaped like those ingest
// builds from ~100-byte events: a key, a ~250-byte value, three headers.
func benchRecords(topic string, n int) []event.Record {
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

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProduce measures the producer with acks=all and idempotence,
// one request of five records per op from 100 concurrent callers (the
// gateway's closed loop in make bench), each waiting until Kafka
// acknowledged all five:
//
//	delivery   Producer.ProduceSync: a Delivery per request, the records
//	           handed to kgo.TryProduce with one promise for all of them
//	kgo-sync   kgo.Client.ProduceSync: franz-go's own, a promise per record
//	           and a WaitGroup, after converting the records
//
// Run it with -cpu 1 against a real broker (INLET_TEST_BROKERS: else the
// development broker in process, whose CPU then counts too); cpu-µs/op is
// the process's CPU time per request.
func BenchmarkProduce(b *testing.B) {
	brokers := testkit.Brokers(b)
	topic := testkit.Unique(b, "bench-produce-")
	p := testProducer(b, brokers, nil)
	if err := p.ProduceSync(ctxFor(b, 30*time.Second), benchRecords(topic, 1)); err != nil {
		b.Fatal(err) // the topic exists and the producer has its id
	}
	for _, bc := range []struct {
		name string
		do   func(ctx context.Context, recs []event.Record) error
	}{
		{"delivery", p.ProduceSync},
		{"kgo-sync", func(ctx context.Context, recs []event.Record) error {
			krs := make([]*kgo.Record, len(recs))
			for i := range recs {
				krs[i] = toKgo(&recs[i])
			}
			return p.cl.ProduceSync(ctx, krs...).FirstErr()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const callers = 100
			reqs := make([][]event.Record, callers)
			for i := range reqs {
				reqs[i] = benchRecords(topic, 5)
			}
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			var (
				wg   sync.WaitGroup
				next = make(chan struct{}, callers)
			)
			go func() {
				for range b.N {
					next <- struct{}{}
				}
				close(next)
			}()
			for c := range callers {
				wg.Go(func() {
					for range next {
						if err := bc.do(context.Background(), reqs[c]); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}
