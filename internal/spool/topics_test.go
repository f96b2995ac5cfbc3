package spool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// topicKafka is a producer whose topics can be made to refuse records
// (down): a Produce with a record of such a topic is taken, and its
// delivery fails, as a topic with no leader does after the producer's own
// retries. It records, per topic, the ids it acknowledged, in order.
type topicKafka struct {
	mu      sync.Mutex
	down    map[string]bool
	landed  map[string][]string // ids acknowledged, by topic, in order of production
	calls   map[string]int      // Produce calls, by topic
	changed chan struct{}
}

func newTopicKafka() *topicKafka {
	return &topicKafka{down: map[string]bool{}, landed: map[string][]string{}, calls: map[string]int{}, changed: make(chan struct{})}
}

func (k *topicKafka) setDown(topic string, down bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down[topic] = down
}

type topicDelivery struct {
	k   *topicKafka
	ids map[string][]string
	err error
}

func (k *topicKafka) Produce(recs []event.Record) (Delivery, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := &topicDelivery{k: k, ids: map[string][]string{}}
	for _, r := range recs {
		k.calls[r.Topic]++
		if k.down[r.Topic] {
			d.err = fmt.Errorf("topic %s: %w", r.Topic, errTopicDown)
		}
		d.ids[r.Topic] = append(d.ids[r.Topic], r.EventID)
	}
	return d, nil
}

var errTopicDown = errors.New("not leader for partition")

func (d *topicDelivery) Wait(ctx context.Context) error {
	if d.err != nil {
		// The producer's delivery timeout, shortened.
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
		return d.err
	}
	d.k.mu.Lock()
	defer d.k.mu.Unlock()
	for t, ids := range d.ids {
		d.k.landed[t] = append(d.k.landed[t], ids...)
	}
	close(d.k.changed)
	d.k.changed = make(chan struct{})
	return nil
}

// landedOf returns the ids of topic acknowledged so far, deduplicated by
// their last production (what a consumer sees after duplicates).
func (k *topicKafka) landedOf(topic string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.landed[topic])
}

// until waits until cond holds, checked at each acknowledgement, or d
// passes.
func (k *topicKafka) until(d time.Duration, cond func() bool) bool {
	deadline := time.After(d)
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			return cond()
		}
	}
}

func topicRec(topic, id string) event.Record {
	r := rec(id)
	r.Topic = topic
	return r
}

// appendTopics appends n records to each topic, interleaved: id
// <topic>-NNN.
func appendTopics(tb testing.TB, s *Spool, from, n int, topics ...string) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		for _, t := range topics {
			if err := s.Append(context.Background(), []event.Record{topicRec(t, fmt.Sprintf("%s-%03d", t, i))}); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

func wantIDs(topic string, from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf("%s-%03d", topic, i))
	}
	return out
}

// dedupLast keeps each id's last occurrence, in order.
func dedupLast(ids []string) []string {
	last := map[string]int{}
	for i, id := range ids {
		last[id] = i
	}
	var out []string
	for i, id := range ids {
		if last[id] == i {
			out = append(out, id)
		}
	}
	return out
}

// TestStuckTopicDoesNotHoldBackOthers: topic b's records are refused
// (its leader gone) while a's are taken; every record of a is delivered
// while b waits, and once b is back its records are delivered, in order.
func TestStuckTopicDoesNotHoldBackOthers(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s, logs, _ := open(t, cfg)
	_ = logs
	k := newTopicKafka()
	k.setDown("b", true)
	fc := forwarderConfig()
	fc.WindowBytes = 400 // a few records a window
	f := StartForwarder(s, k, fc, s.log)
	defer stop(t, f)

	appendTopics(t, s, 0, 50, "b", "a")
	if !k.until(5*time.Second, func() bool { return len(k.landedOf("a")) >= 50 }) {
		t.Fatalf("topic a: %d of 50 records delivered while topic b is down; b's window holds them back", len(k.landedOf("a")))
	}
	if got := dedupLast(k.landedOf("a")); !slices.Equal(got, wantIDs("a", 0, 50)) {
		t.Fatalf("topic a delivered %v", got)
	}
	if n := len(k.landedOf("b")); n != 0 {
		t.Fatalf("topic b is down, but %d of its records landed", n)
	}
	k.setDown("b", false)
	if !k.until(5*time.Second, func() bool { return len(dedupLast(k.landedOf("b"))) >= 50 }) {
		t.Fatalf("topic b: %d of 50 records delivered after it came back", len(dedupLast(k.landedOf("b"))))
	}
	if got := dedupLast(k.landedOf("b")); !slices.Equal(got, wantIDs("b", 0, 50)) {
		t.Fatalf("topic b delivered, out of order: %v", got)
	}
}
