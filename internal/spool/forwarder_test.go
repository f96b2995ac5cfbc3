package spool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// flakyKafka stands in for the producer: it acknowledges windows after a
// delay and fails every third delivery, to drive the forwarder's retries.
// (Real Kafka is exercised end to end in internal/app.)
type flakyKafka struct {
	mu      sync.Mutex
	calls   int
	got     []string // ids, in the order deliveries were acknowledged
	blocked bool
}

type flakyDelivery struct {
	k    *flakyKafka
	recs []event.Record
	fail bool
}

func (k *flakyKafka) Produce(recs []event.Record) (Delivery, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	return &flakyDelivery{k: k, recs: recs, fail: k.calls%3 == 0}, nil
}

func (d *flakyDelivery) Wait(ctx context.Context) error {
	select {
	case <-time.After(2 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	d.k.mu.Lock()
	defer d.k.mu.Unlock()
	if d.fail || d.k.blocked {
		return errors.New("broker unavailable")
	}
	for _, r := range d.recs {
		d.k.got = append(d.k.got, r.EventID)
	}
	return nil
}

func TestForwarderRetriesAndAcksInOrder(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	s, _, _ := open(t, cfg)
	k := &flakyKafka{}
	fc := DefaultForwarderConfig()
	fc.WindowBytes = 1 << 10
	fc.MinBackoff = time.Millisecond
	fc.MaxBackoff = 5 * time.Millisecond
	f := StartForwarder(s, k, fc, s.log)
	for i := 0; i < 300; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Unforwarded != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v, forwarder %s", s.Stats(), f.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.Stop(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	seen := map[string]bool{}
	for _, id := range k.got {
		seen[id] = true
	}
	if len(seen) != 300 {
		t.Fatalf("%d distinct records delivered, want 300", len(seen))
	}
	if testutilCalls := k.calls; testutilCalls <= len(k.got)/50 {
		t.Fatalf("only %d produce calls", testutilCalls)
	}
	if f.State() != StateStopped || f.OldestAge() != 0 {
		t.Fatalf("after stop: state %s, oldest %v", f.State(), f.OldestAge())
	}
	if left := segFiles(t, cfg.Dir); len(left) > 2 {
		t.Fatalf("%d segments left after everything was delivered", len(left))
	}
}

func TestForwarderReportsAnOutage(t *testing.T) {
	s, _, _ := open(t, testConfig(t.TempDir()))
	k := &flakyKafka{blocked: true}
	fc := DefaultForwarderConfig()
	fc.MinBackoff = time.Millisecond
	fc.MaxBackoff = 10 * time.Millisecond
	f := StartForwarder(s, k, fc, s.log)
	defer f.Stop(context.Background())
	if err := s.Append(context.Background(), []event.Record{rec("a")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if st := f.State(); st != StateRetrying && st != StateForwarding {
		t.Fatalf("state %s while kafka refuses", st)
	}
	if age := f.OldestAge(); age < 50*time.Millisecond {
		t.Fatalf("oldest age %v while nothing is delivered", age)
	}
	k.mu.Lock()
	k.blocked = false
	k.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Unforwarded != 0 || f.State() != StateIdle {
		if time.Now().After(deadline) {
			t.Fatalf("not recovered: %+v %s", s.Stats(), f.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
