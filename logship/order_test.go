package logship_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

func valuesEvents(tb testing.TB, vals [][]byte) []map[string]any {
	tb.Helper()
	out := make([]map[string]any, 0, len(vals))
	for _, v := range vals {
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			tb.Fatalf("record is not JSON: %v: %s", err, v)
		}
		out = append(out, m)
	}
	return out
}

// dropNotice returns the handler's drop notice among events, or nil.
func dropNotice(events []map[string]any) map[string]any {
	for _, e := range events {
		if p := props(e); p != nil && strings.Contains(p["msg"].(string), "dropped") {
			return p
		}
	}
	return nil
}

// checkLastInOrder checks that records 0..n-1 all arrived and that their
// last copies are in order, and returns the events that are not records.
// After a refusal for good, a batch franz-go took in the moment between
// failing the refused one and the sink hearing of it can land ahead of the
// refused one's resend: it is sent again after it, so its last copy is in
// order (the package doc's open window).
func checkLastInOrder(tb testing.TB, events []map[string]any, n int) (others []map[string]any) {
	tb.Helper()
	last := map[int]int{} // record -> index of its last copy
	for j, e := range events {
		i, ok := props(e)["i"].(float64)
		if !ok {
			others = append(others, e)
			continue
		}
		last[int(i)] = j
	}
	for i := range n {
		j, ok := last[i]
		if !ok {
			tb.Fatalf("record %d never arrived (%d of %d did)", i, len(last), n)
		}
		if i > 0 && j < last[i-1] {
			tb.Fatalf("the last copy of record %d arrived before that of %d", i, i-1)
		}
	}
	return others
}

// answering answers p's records until the test ends.
func answering(t *testing.T, p *logship.FakeProducer) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				p.Answer()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestKafkaTooLargeRecord: one record over the topic's max.message.bytes
// among small ones. Kafka refuses the batch franz-go made of it and its
// neighbours, and franz-go fails every record it buffered after (the fake
// producer does as they do); when the sink knows the limit it refuses the
// record itself. Either way only that record is dropped, counted as
// too_large and reported in the drop notice; every other arrives, its last
// copy in order (checkLastInOrder).
func TestKafkaTooLargeRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		known int // MaxMessageBytes given to the sink
	}{{"limit unknown: the batch refused", 0}, {"limit known: refused at once", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &logship.FakeProducer{MaxBytes: 1000, BatchRecords: 8}
			h, err := logship.NewHandler(logship.NewFakeKafkaSink(p, tc.known), logship.Options{BatchSize: 10,
				Linger: time.Millisecond, QueueSize: 4096, SpillDir: t.TempDir(), RetryBackoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			answering(t, p)
			const n = 300
			l := slog.New(h)
			for i := range n {
				if i == 137 {
					l.Info("big", "pad", strings.Repeat("x", 2000))
				}
				l.Info("record", "i", i)
			}
			testkit.WaitFor(t, 20*time.Second, "the records and the drop notice delivered", func() bool {
				return dropNotice(valuesEvents(t, p.Landed())) != nil && h.Stats().Sent >= n+1
			})
			if err := h.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			events := valuesEvents(t, p.Landed())
			others := checkLastInOrder(t, events, n)
			st := h.Stats()
			if st.Dropped[logship.DropTooLarge] != 1 || st.Dropped[logship.DropRejected] != 0 {
				t.Errorf("dropped %v, want the one record too large", st.Dropped)
			}
			notice := dropNotice(events)
			if by, _ := notice["dropped_by_reason"].(map[string]any); by[logship.DropTooLarge] != float64(1) {
				t.Errorf("drop notice %v: want too_large: 1", notice)
			}
			for _, e := range others {
				if _, ok := props(e)["pad"]; ok {
					t.Errorf("the record too large arrived: %v", e)
				}
			}
		})
	}
}

// TestKafkaNoSendAfterFailure: batch 0 is in flight and fails for good (as
// franz-go fails every buffered record when Kafka refuses one for good,
// here for authorization) while the handler is filling batch 1. Batch 1
// must not reach the producer before batch 0 is sent again: it would land
// first. Every record arrives, and the first copies are in order.
func TestKafkaNoSendAfterFailure(t *testing.T) {
	p := &logship.FakeProducer{}
	h, err := logship.NewHandler(logship.NewFakeKafkaSink(p, 0), logship.Options{BatchSize: 10,
		Linger: 3 * time.Second, QueueSize: 4096, SpillDir: t.TempDir(), RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	for i := range 10 {
		l.Info("record", "i", i)
	}
	testkit.WaitFor(t, 10*time.Second, "batch 0 in flight", func() bool { return p.Buffered() == 10 })
	for i := 10; i < 13; i++ {
		l.Info("record", "i", i)
	}
	// The handler took record 10 (alone, or with 11 and 12 if it came to
	// the queue after they were written) and waits (Linger, long enough
	// for a loaded machine) for more to fill batch 1.
	testkit.WaitFor(t, 10*time.Second, "batch 1 being filled", func() bool { return h.Stats().Queued < 3 })
	if n := p.Fail(kerr.TopicAuthorizationFailed); n != 10 {
		t.Fatalf("failed %d records, want batch 0's 10", n)
	}
	answering(t, p)
	testkit.WaitFor(t, 20*time.Second, "every record delivered", func() bool { return h.Stats().Sent >= 13 })
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkInOrder(t, valuesEvents(t, p.Landed()), 13)
	if st := h.Stats(); st.Retried == 0 {
		t.Errorf("stats %+v: want batch 0 retried", st)
	}
}

// TestKafkaTooLargeRecordReal: as TestKafkaTooLargeRecord, against real
// Kafka, a topic whose max.message.bytes is 4096.
func TestKafkaTooLargeRecordReal(t *testing.T) {
	brokers := testkit.Brokers(t)
	for _, tc := range []struct {
		name  string
		known int32
		n     int // with the limit unknown, franz-go's batches are refused and sent again one record at a time: fewer
	}{{"limit unknown", 0, 300}, {"limit known", 4096, 2000}} {
		t.Run(tc.name, func(t *testing.T) {
			topic := testkit.Unique(t, "logship-large-")
			testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "4096"})
			sink, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: brokers, Topic: topic, MaxMessageBytes: tc.known})
			if err != nil {
				t.Fatal(err)
			}
			h, err := logship.NewHandler(sink, logship.Options{BatchSize: 50, QueueSize: 8192,
				SpillDir: t.TempDir(), RetryBackoff: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			n := tc.n
			l := slog.New(h)
			for i := range n {
				if i == n/2+1 {
					// Random: franz-go compresses batches, Kafka limits them compressed.
					pad := make([]byte, 12000)
					rand.Read(pad)
					l.Info("big", "pad", base64.StdEncoding.EncodeToString(pad))
				}
				l.Info("record", "i", i)
			}
			testkit.WaitFor(t, 60*time.Second, "every record and the drop notice delivered", func() bool { return h.Stats().Sent >= int64(n)+1 })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := h.Close(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("stats %+v", h.Stats()) // (shown on failure)
			recs := testkit.Consume(t, brokers, topic, 30*time.Second, func(rs []testkit.Record) bool {
				return distinctIDs(n)(rs) && dropNotice(recordsEvents(rs)) != nil
			})
			events := recordsEvents(recs)
			checkLastInOrder(t, events, n)
			if st := h.Stats(); st.Dropped[logship.DropTooLarge] != 1 || len(st.Dropped) != 1 {
				t.Errorf("dropped %v, want the one record too large", st.Dropped)
			}
			if notice := dropNotice(events); notice == nil {
				t.Errorf("no drop notice")
			}
		})
	}
}
