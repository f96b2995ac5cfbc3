package spool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fakeKafka stands in for the producer (real Kafka is exercised end to end
// in internal/app). It records the order in which records are handed to
// Produce, which is the order the idempotent producer puts them in a
// partition: that order, not the order of acknowledgements, is what a
// consumer sees.
type fakeKafka struct {
	// produce, if set, runs before each Produce call (number call, from 1)
	// takes the records; an error fails the call, enqueuing nothing. It may
	// block.
	produce func(call int) error
	// wait, if set, decides the outcome of call's delivery; nil
	// acknowledges it at once. It must return once ctx is done.
	wait func(ctx context.Context, call int) error

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each Produce
	calls    int
	produced []string         // ids, in the order they were produced
	recs     map[int][]string // ids, by call
	acked    map[string]bool  // ids whose delivery was acknowledged
	failures []failure

	headFailed map[string]bool // for failEveryThird
}

// failure is a delivery the fake failed: the call, and len(produced) when
// the failure was reported.
type failure struct{ call, at int }

func newFakeKafka() *fakeKafka {
	return &fakeKafka{changed: make(chan struct{}), recs: map[int][]string{}, acked: map[string]bool{}, headFailed: map[string]bool{}}
}

type fakeDelivery struct {
	k    *fakeKafka
	call int
}

func (k *fakeKafka) Produce(recs []event.Record) (Delivery, error) {
	k.mu.Lock()
	k.calls++
	call := k.calls
	k.mu.Unlock()
	if k.produce != nil {
		if err := k.produce(call); err != nil {
			return nil, err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range recs {
		k.produced = append(k.produced, r.EventID)
		k.recs[call] = append(k.recs[call], r.EventID)
	}
	close(k.changed)
	k.changed = make(chan struct{})
	return &fakeDelivery{k: k, call: call}, nil
}

func (d *fakeDelivery) Wait(ctx context.Context) error {
	var err error
	if d.k.wait != nil {
		err = d.k.wait(ctx, d.call)
	}
	d.k.mu.Lock()
	defer d.k.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			d.k.failures = append(d.k.failures, failure{d.call, len(d.k.produced)})
		}
		return err
	}
	for _, id := range d.k.recs[d.call] {
		d.k.acked[id] = true
	}
	return nil
}

// failEveryThird fails every third delivery, but not twice a window that
// starts with the same record: else a forwarder that happens to produce
// three windows at a time would fail for ever. k.mu must be held.
func (k *fakeKafka) failEveryThird(call int) error {
	if first := k.recs[call][0]; call%3 == 0 && !k.headFailed[first] {
		k.headFailed[first] = true
		return errors.New("broker unavailable")
	}
	return nil
}

// untilCalls blocks until Produce was called n times or ctx is done.
func (k *fakeKafka) untilCalls(ctx context.Context, n int) error {
	for {
		k.mu.Lock()
		calls, ch := k.calls, k.changed
		k.mu.Unlock()
		if calls >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (k *fakeKafka) snapshot() (produced []string, failures []failure) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.produced), slices.Clone(k.failures)
}

// checkLastProductionsInOrder checks that the last time each record was
// produced, it was after the last time of every record before it: what is
// in Kafka once all is delivered holds each key's records in order (after
// duplicates). ids sort in the order they were appended.
func checkLastProductionsInOrder(tb testing.TB, produced []string) {
	tb.Helper()
	last := map[string]int{}
	for i, id := range produced {
		last[id] = i
	}
	ids := make([]string, 0, len(last))
	for id := range last {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i := 1; i < len(ids); i++ {
		if last[ids[i-1]] > last[ids[i]] {
			tb.Fatalf("%s was last produced after %s (at %d, %d); produced: %v",
				ids[i-1], ids[i], last[ids[i-1]], last[ids[i]], produced)
		}
	}
}

func forwarderConfig() ForwarderConfig {
	fc := DefaultForwarderConfig()
	fc.MinBackoff = time.Millisecond
	fc.MaxBackoff = 5 * time.Millisecond
	return fc
}

func appendN(tb testing.TB, s *Spool, from, n int) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("r%03d", i))}); err != nil {
			tb.Fatal(err)
		}
	}
}

func stop(tb testing.TB, f *Forwarder) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.Stop(ctx)
}

// TestForwarderKeepsOrderAcrossFailures fails a window after the windows
// behind it were produced, and checks that nothing newer than it is
// produced before it is produced again, and that the last copies of the
// records (all of one key) are in order.
func TestForwarderKeepsOrderAcrossFailures(t *testing.T) {
	const records = 40
	fc := forwarderConfig()
	fc.WindowBytes = 300 // a few records a window
	cases := []struct {
		name string
		k    func() *fakeKafka
		// strict: when the failure is reported the forwarder holds
		// Windows windows in flight, so it cannot produce more by luck:
		// none may be produced between the report and the failed
		// window's next production.
		strict bool
	}{
		{"the third delivery fails once the windows behind it were produced", func() *fakeKafka {
			k := newFakeKafka()
			k.wait = func(ctx context.Context, call int) error {
				if call != 3 {
					return nil
				}
				if err := k.untilCalls(ctx, 3+fc.Windows-1); err != nil {
					return err
				}
				return errors.New("delivery timeout")
			}
			return k
		}, true},
		{"the third produce fails: buffer full", func() *fakeKafka {
			k := newFakeKafka()
			k.produce = func(call int) error {
				if call == 3 {
					return errors.New("kafka: producer buffer full")
				}
				return nil
			}
			return k
		}, false},
		{"every third delivery fails, late", func() *fakeKafka {
			k := newFakeKafka()
			k.wait = func(ctx context.Context, call int) error {
				if !sleepCtx(ctx, time.Millisecond) {
					return ctx.Err()
				}
				k.mu.Lock()
				defer k.mu.Unlock()
				return k.failEveryThird(call)
			}
			return k
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, _ := open(t, testConfig(t.TempDir()))
			appendN(t, s, 0, records)
			k := tc.k()
			f := StartForwarder(s, k, fc, s.log)
			testkit.WaitFor(t, 10*time.Second, "all delivered", func() bool { return s.Stats().Unforwarded == 0 })
			stop(t, f)
			produced, failures := k.snapshot()
			t.Logf("produced %v; failures %v", produced, failures)
			checkLastProductionsInOrder(t, produced)
			if tc.strict {
				if len(failures) != 1 {
					t.Fatalf("failures %v, want one", failures)
				}
				failed := k.recs[failures[0].call][0]
				rest := produced[failures[0].at:]
				next := slices.Index(rest, failed)
				if next < 0 {
					t.Fatalf("%s never produced again after its failure: %v", failed, rest)
				}
				for _, id := range rest[:next] {
					if id > failed {
						t.Fatalf("%s produced after %s failed, before it was produced again: %v", id, failed, rest)
					}
				}
			}
		})
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// TestForwarderRetriesAndAcksInOrder forwards while records are appended,
// with every third delivery failing, and checks that the spool records a
// delivery only once Kafka acknowledged every record before it, and that
// the last copies produced are in order.
func TestForwarderRetriesAndAcksInOrder(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	s, _, _ := open(t, cfg)
	k := newFakeKafka()
	var early []string // records the spool counted as delivered before Kafka acknowledged them
	k.wait = func(ctx context.Context, call int) error {
		if !sleepCtx(ctx, 2*time.Millisecond) {
			return ctx.Err()
		}
		d := s.Delivered()
		k.mu.Lock()
		defer k.mu.Unlock()
		for seq := uint64(1); seq < d.Seq; seq++ {
			if id := fmt.Sprintf("r%03d", seq-1); !k.acked[id] {
				early = append(early, id)
			}
		}
		return k.failEveryThird(call)
	}
	fc := forwarderConfig()
	fc.WindowBytes = 1 << 10
	f := StartForwarder(s, k, fc, s.log)
	appendN(t, s, 0, 300)
	testkit.WaitFor(t, 10*time.Second, "all delivered", func() bool { return s.Stats().Unforwarded == 0 })
	stop(t, f)
	produced, failures := k.snapshot()
	checkLastProductionsInOrder(t, produced)
	k.mu.Lock()
	acked := len(k.acked)
	k.mu.Unlock()
	if acked != 300 || len(early) > 0 {
		t.Fatalf("%d records acknowledged by kafka, want 300; counted as delivered before kafka acknowledged them: %v", acked, early)
	}
	if len(failures) == 0 {
		t.Fatal("no delivery failed")
	}
	if f.State() != StateStopped || f.OldestAge() != 0 {
		t.Fatalf("after stop: state %s, oldest %v", f.State(), f.OldestAge())
	}
	if left := segFiles(t, cfg.Dir); len(left) > 2 {
		t.Fatalf("%d segments left after everything was delivered", len(left))
	}
}

// down is a Kafka that refuses every delivery until up is called.
type down struct {
	*fakeKafka
	mu sync.Mutex
	up bool
}

func newDown() *down {
	d := &down{fakeKafka: newFakeKafka()}
	d.wait = func(context.Context, int) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.up {
			return errors.New("broker unavailable")
		}
		return nil
	}
	return d
}

func (d *down) recover() {
	d.mu.Lock()
	d.up = true
	d.mu.Unlock()
}

func TestForwarderReportsAnOutage(t *testing.T) {
	s, logs, m := open(t, testConfig(t.TempDir()))
	k := newDown()
	fc := forwarderConfig()
	fc.MaxBackoff = 10 * time.Millisecond
	f := StartForwarder(s, k, fc, s.log)
	defer stop(t, f)
	appendN(t, s, 0, 1)
	testkit.WaitFor(t, 5*time.Second, "the oldest record's age to grow", func() bool {
		return f.OldestAge() >= 50*time.Millisecond
	})
	if st := f.State(); st != StateRetrying && st != StateForwarding {
		t.Fatalf("state %s while kafka refuses", st)
	}
	// Counted per failed attempt; a loaded machine may have made only one
	// in the 50 ms.
	testkit.WaitFor(t, 5*time.Second, "two failed attempts counted", func() bool { return testutil.ToFloat64(m.ForwardErrors) >= 2 })
	if st := f.State(); st != StateRetrying && st != StateForwarding {
		t.Fatalf("state %s while kafka refuses", st)
	}
	k.recover()
	testkit.WaitFor(t, 5*time.Second, "recovery", func() bool {
		return s.Stats().Unforwarded == 0 && f.State() == StateIdle && f.OldestAge() == 0
	})
	// Dozens of failed attempts, a bounded number of lines.
	if n := logs.Count("kafka did not take the records"); n < 1 || n > 2 {
		t.Fatalf("%d warnings for %v failures:\n%s", n, testutil.ToFloat64(m.ForwardErrors), logs)
	}
	if logs.Count("kafka acknowledged again") != 1 {
		t.Fatalf("recovery not logged once:\n%s", logs)
	}
}

// TestForwarderStates walks the forwarder through its states, with the
// stall timer in the test's hands: a timer that fires late, after the
// delivery it watched, does not change the state.
func TestForwarderStates(t *testing.T) {
	s, _, m := open(t, testConfig(t.TempDir()))
	k := newFakeKafka()
	release := make(chan error)
	k.wait = func(ctx context.Context, call int) error {
		select {
		case err := <-release:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fc := forwarderConfig()
	fc.MinBackoff, fc.MaxBackoff = 200*time.Millisecond, 200*time.Millisecond // long enough to be seen
	f := newForwarder(s, k, fc, s.log)
	var (
		mu     sync.Mutex
		stalls []func()
	)
	f.afterFunc = func(d time.Duration, fn func()) func() bool {
		mu.Lock()
		defer mu.Unlock()
		stalls = append(stalls, fn)
		return func() bool { return true }
	}
	stall := func(i int) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, "a stall timer", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(stalls) > i
		})
		mu.Lock()
		fn := stalls[i]
		mu.Unlock()
		fn()
	}
	// want waits for the state st, and its gauge alone at 1.
	want := func(st string) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, "state "+st, func() bool {
			if f.State() != st {
				return false
			}
			for _, other := range states {
				if v := testutil.ToFloat64(m.ForwarderState.WithLabelValues(other)); (v == 1) != (other == st) {
					return false
				}
			}
			return true
		})
	}
	want(StateIdle)
	f.start()
	appendN(t, s, 0, 1)
	defer func() {
		if t.Failed() {
			var g []float64
			for _, other := range states {
				g = append(g, testutil.ToFloat64(m.ForwarderState.WithLabelValues(other)))
			}
			t.Logf("state %s gauges %v topics %v lanes %+v stats %+v calls %d", f.State(), g, s.Topics(), f.TopicStates(), s.Stats(), k.calls)
		}
	}()
	want(StateForwarding)
	stall(0)
	want(StateStalled)
	release <- nil
	want(StateIdle)
	stall(0) // late
	if st := f.State(); st != StateIdle {
		t.Fatalf("a late stall timer made the state %s", st)
	}

	appendN(t, s, 1, 1)
	want(StateForwarding)
	release <- errors.New("delivery timeout")
	want(StateRetrying)
	if f.OldestAge() == 0 {
		t.Fatal("no oldest age while a record waits to be sent again")
	}
	want(StateForwarding) // sent again
	stall(1)              // the failed wait's timer, late
	if st := f.State(); st != StateForwarding {
		t.Fatalf("the failed delivery's stall timer made the state %s", st)
	}
	release <- nil
	want(StateIdle)
	if f.OldestAge() != 0 || s.Stats().Unforwarded != 0 {
		t.Fatalf("idle with oldest age %v, %+v", f.OldestAge(), s.Stats())
	}
	stop(t, f)
	want(StateStopped)
}

// TestForwarderStopReturnsByItsDeadline stops a forwarder whose Kafka does
// not answer in several ways: Stop returns within its deadline and a small
// bound, and records no delivery after it returned.
func TestForwarderStopReturnsByItsDeadline(t *testing.T) {
	const deadline = 100 * time.Millisecond
	cases := []struct {
		name string
		// k returns the producer and, to end the test, what lets it go.
		k func() (*fakeKafka, func())
		// early: Stop returns long before the deadline.
		early bool
	}{
		{"idle", func() (*fakeKafka, func()) { return newFakeKafka(), func() {} }, true},
		{"a delivery never acknowledged", func() (*fakeKafka, func()) {
			k := newFakeKafka()
			k.wait = func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }
			return k, func() {}
		}, false},
		{"kafka refuses, backing off", func() (*fakeKafka, func()) {
			k := newFakeKafka()
			k.wait = func(context.Context, int) error { return errors.New("broker unavailable") }
			return k, func() {}
		}, true},
		{"produce blocks", func() (*fakeKafka, func()) {
			k := newFakeKafka()
			unblock := make(chan struct{})
			k.produce = func(int) error { <-unblock; return nil }
			return k, func() { close(unblock) }
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, _ := open(t, testConfig(t.TempDir()))
			k, letGo := tc.k()
			fc := forwarderConfig()
			fc.MinBackoff, fc.MaxBackoff = time.Minute, time.Minute
			f := StartForwarder(s, k, fc, s.log)
			if tc.name != "idle" {
				appendN(t, s, 0, 3)
				testkit.WaitFor(t, 5*time.Second, "a window in flight", func() bool { return f.State() != StateIdle })
			}
			if tc.name == "kafka refuses, backing off" {
				testkit.WaitFor(t, 5*time.Second, "retrying", func() bool { return f.State() == StateRetrying })
			}
			before := s.Delivered()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			f.Stop(ctx)
			took := time.Since(start)
			bound := deadline + stopGrace + 300*time.Millisecond // the race detector's slack
			if tc.early {
				bound = deadline / 2
			}
			if took > bound {
				t.Fatalf("Stop took %v, want at most %v", took, bound)
			}
			if st := f.State(); st != StateStopped {
				t.Fatalf("state %s after Stop", st)
			}
			// What the producer does after Stop returned is not recorded.
			s.Close()
			letGo()
			<-f.done
			if got := s.Delivered(); got != before {
				t.Fatalf("delivered moved from %+v to %+v after Stop", before, got)
			}
		})
	}
}

// TestForwarderStopLetsWindowsInFlightFinish: Stop waits for the windows
// already produced, until its deadline.
func TestForwarderStopLetsWindowsInFlightFinish(t *testing.T) {
	s, _, _ := open(t, testConfig(t.TempDir()))
	k := newFakeKafka()
	k.wait = func(ctx context.Context, _ int) error {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
		return nil
	}
	f := StartForwarder(s, k, forwarderConfig(), s.log)
	appendN(t, s, 0, 3)
	testkit.WaitFor(t, 5*time.Second, "a window in flight", func() bool {
		produced, _ := k.snapshot()
		return len(produced) == 3
	})
	stop(t, f)
	if st := s.Stats(); st.Unforwarded != 0 {
		t.Fatalf("after Stop: %+v", st)
	}
	if produced, _ := k.snapshot(); strings.Join(produced, ",") != "r000,r001,r002" {
		t.Fatalf("produced %v", produced)
	}
}

// TestForwarderGivesUpUnreadableOnceBehindAFailedWindow: a record that
// cannot be read, found while a window before it is in flight, is given up
// only once everything before it is delivered; when that window fails and
// is sent again, the damage is given up and counted once.
func TestForwarderGivesUpUnreadableOnceBehindAFailedWindow(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 4 << 10
	s, logs, m := open(t, cfg)
	for i := range 6 {
		if err := s.Append(context.Background(), []event.Record{bigRec(fmt.Sprintf("r%03d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	flipFrame(t, filepath.Join(cfg.Dir, segName(1)), 2) // r002
	k := newFakeKafka()
	release := make(chan struct{})
	k.wait = func(ctx context.Context, call int) error {
		if call > 1 {
			return nil
		}
		select {
		case <-release:
			return errors.New("broker unavailable")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fc := forwarderConfig()
	fc.WindowBytes, fc.QuarantineAfter = 1500, 1 // a window per record; r002 given up at the first failure to read it
	f := StartForwarder(s, k, fc, s.log)
	defer stop(t, f)
	testkit.WaitFor(t, 10*time.Second, "the read of r002 to fail", func() bool {
		return strings.Contains(logs.String(), "spool: reading for the forwarder")
	})
	close(release) // r000's window fails: r000 and r001 are sent again, and r002 read again
	testkit.WaitFor(t, 10*time.Second, "everything else delivered", func() bool { return s.Stats().Unforwarded == 0 })
	if want := idRange(0, 6, 2); !slices.Equal(k.ackedIDs(), want) {
		t.Fatalf("kafka acknowledged %v, want %v\n%s", k.ackedIDs(), want, logs)
	}
	if lost, n := loggedLost(logs), metricValue(t, m, "inlet_spool_quarantined_records_total"); lost != 1 || n != 1 {
		t.Fatalf("logged %d records lost, counted %v, want 1\n%s", lost, n, logs)
	}
}
