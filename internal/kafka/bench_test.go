package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

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
	if err := p.ProduceSync(ctxFor(b, 30*time.Second), testkit.BenchRecords(topic, 1)); err != nil {
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
				reqs[i] = testkit.BenchRecords(topic, 5)
			}
			b.ReportAllocs()
			cpu0 := testkit.CPUTime(b)
			b.ResetTimer()
			testkit.CallersN(b, callers, func(c int) error { return bc.do(context.Background(), reqs[c]) })
			b.StopTimer()
			b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkTopicShare is what the per-topic shares add to a request of
// five records, without Kafka: room's check of the request's topic, and
// the buffered and unbuffered hooks of each record (topics.go).
func BenchmarkTopicShare(b *testing.B) {
	p := testProducer(b, []string{"127.0.0.1:1"}, nil) // never contacted
	recs := testkit.BenchRecords("events", 5)
	krs := make([]kgo.Record, len(recs))
	for i := range recs {
		setKgo(&krs[i], &recs[i], nil)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.room(recs); err != nil {
			b.Fatal(err)
		}
		for i := range krs {
			p.topics.OnProduceRecordBuffered(&krs[i])
		}
		for i := range krs {
			p.topics.OnProduceRecordUnbuffered(&krs[i], nil)
		}
	}
}
