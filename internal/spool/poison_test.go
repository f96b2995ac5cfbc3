package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// startWatched starts a forwarder whose states are kept, in order, each
// with the age OldestAge reported on entering it.
func startWatched(tb testing.TB, s *Spool, k Producer, fc ForwarderConfig) (*Forwarder, func() []string) {
	tb.Helper()
	f := newForwarder(s, k, fc, s.log)
	var (
		mu   sync.Mutex
		seen []string
	)
	f.stateHook = func(st string) {
		mu.Lock()
		if st == StateStuck && f.OldestAge() <= 0 {
			st += " with no age"
		}
		seen = append(seen, st)
		mu.Unlock()
	}
	f.start()
	tb.Cleanup(func() { stop(tb, f) })
	return f, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// ackedIDs returns the ids Kafka acknowledged, sorted.
func (k *fakeKafka) ackedIDs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for id := range k.acked {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func idRange(from, to int, except ...int) []string {
	var out []string
	for i := from; i < to; i++ {
		if !slices.Contains(except, i) {
			out = append(out, fmt.Sprintf("r%03d", i))
		}
	}
	return out
}

// TestForwarderGivesUpWhatItCannotRead damages the spool under a running
// forwarder — a frame flipped on disk, a segment removed — and checks that
// the records before the damage (in the same window) are delivered, that
// the forwarder reports StateStuck with an age while it tries again, then
// gives up the damaged records (counted, logged, the segment copied to
// .corrupt) and delivers every record after them, including those
// appended later.
func TestForwarderGivesUpWhatItCannotRead(t *testing.T) {
	cases := []struct {
		name   string
		damage func(tb testing.TB, dir string) []int // returns the records hit
	}{
		{"a frame flipped inside a window", func(tb testing.TB, dir string) []int {
			flipFrame(tb, filepath.Join(dir, segName(1)), 2) // r002
			return []int{2}
		}},
		{"a segment gone", func(tb testing.TB, dir string) []int {
			segs := segFiles(tb, dir)
			var base, next uint64
			fmt.Sscanf(filepath.Base(segs[1]), "%020d.seg", &base)
			fmt.Sscanf(filepath.Base(segs[2]), "%020d.seg", &next)
			if err := os.Remove(segs[1]); err != nil {
				tb.Fatal(err)
			}
			var hit []int
			for seq := base; seq < next; seq++ {
				hit = append(hit, int(seq-1))
			}
			return hit
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			cfg.SegmentBytes = 4 << 10
			s, logs, m := open(t, cfg)
			for i := range 12 {
				r := bigRec(fmt.Sprintf("r%03d", i))
				r.EventID = fmt.Sprintf("r%03d", i)
				if err := s.Append(context.Background(), []event.Record{r}); err != nil {
					t.Fatal(err)
				}
			}
			hit := tc.damage(t, cfg.Dir)
			k := newFakeKafka()
			fc := forwarderConfig()
			fc.MaxBackoff = 20 * time.Millisecond
			fc.QuarantineAfter = 3
			f, seen := startWatched(t, s, k, fc)
			testkit.WaitFor(t, 10*time.Second, "the forwarder to be stuck", func() bool { return slices.Contains(seen(), StateStuck) })
			appendN(t, s, 12, 3) // acknowledged after the damage
			testkit.WaitFor(t, 10*time.Second, "everything else delivered", func() bool { return s.Stats().Unforwarded == 0 })
			if want := idRange(0, 15, hit...); !slices.Equal(k.ackedIDs(), want) {
				t.Fatalf("kafka acknowledged %v, want %v\n%s", k.ackedIDs(), want, logs)
			}
			produced, _ := k.snapshot()
			checkLastProductionsInOrder(t, produced)
			if lost := loggedLost(logs); lost != len(hit) || metricValue(t, m, "inlet_spool_quarantined_records_total") != float64(len(hit)) {
				t.Fatalf("logged %d records lost, counted %v, want %d\n%s", lost, metricValue(t, m, "inlet_spool_quarantined_records_total"), len(hit), logs)
			}
			if st := s.Stats(); st.Quarantined != uint64(len(hit)) {
				t.Fatalf("stats %+v, want %d quarantined", st, len(hit))
			}
			if st := f.State(); st == StateStuck || slices.Contains(seen(), StateStuck+" with no age") {
				t.Fatalf("state %s after giving the records up; states %v", st, seen())
			}
			if tc.name == "a frame flipped inside a window" {
				if _, err := os.Stat(filepath.Join(cfg.Dir, segName(1)+".corrupt")); err != nil {
					t.Fatalf("no quarantined copy: %v", err)
				}
			}
			// A restart finds the damage again: it sends the segment's
			// records again (duplicates), never skips one.
			stop(t, f)
			s.Close()
			s2, _, _ := open(t, cfg)
			got, _ := readAll(t, s2, s2.Delivered())
			for _, e := range got {
				if slices.Contains(hit, int(e.Seq-1)) && e.Record.EventID == fmt.Sprintf("r%03d", e.Seq-1) {
					t.Fatalf("a record given up is back: %s", e.Record.EventID)
				}
			}
		})
	}
}

// errTooLarge stands in for an error Kafka answers for good.
var errTooLarge = errors.New("MESSAGE_TOO_LARGE: the request included a message larger than the max message size the server will accept")

func permanent(err error) bool { return errors.Is(err, errTooLarge) }

// refusing is a Kafka that refuses for good every delivery holding one of
// the poison ids.
func refusing(poison ...string) *fakeKafka {
	k := newFakeKafka()
	k.wait = func(_ context.Context, call int) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, id := range k.recs[call] {
			if slices.Contains(poison, id) {
				return fmt.Errorf("producing: %w", errTooLarge)
			}
		}
		return nil
	}
	return k
}

// readParked decodes the parked file.
func readParked(tb testing.TB, dir string) []event.Record {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, parkedFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var out []event.Record
	for len(b) > 0 {
		p, n, err := nextFrame(b)
		if err != nil {
			tb.Fatal(err)
		}
		r, _, err := decodePayload(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, r)
		b = b[n:]
	}
	return out
}

func header(r event.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestForwarderPoisonRecords has Kafka refuse some records for good: they
// go to Poison (or, when Poison refuses them too or there is none, to the
// parked file, counted and logged), and every other record is delivered,
// in order, with no record lost that is not in one of the two places.
func TestForwarderPoisonRecords(t *testing.T) {
	const records = 30
	poisonIDs := []string{"r005", "r006", "r021"}
	cases := []struct {
		name string
		// poison is the Poison hook (nil: none); it appends what it took
		// to took.
		poison func(took *[]string, mu *sync.Mutex) func(context.Context, Entry, error) error
		dead   []string // taken by Poison
		parked []string
	}{
		{"to the dead-letter path", func(took *[]string, mu *sync.Mutex) func(context.Context, Entry, error) error {
			return func(_ context.Context, e Entry, err error) error {
				r := e.Record
				if !permanent(err) {
					return fmt.Errorf("poison called with %v", err)
				}
				mu.Lock()
				*took = append(*took, r.EventID)
				mu.Unlock()
				return nil
			}
		}, poisonIDs, nil},
		{"the dead-letter path refuses one for good: parked", func(took *[]string, mu *sync.Mutex) func(context.Context, Entry, error) error {
			return func(_ context.Context, e Entry, err error) error {
				r := e.Record
				if r.EventID == "r006" {
					return fmt.Errorf("dead letter: %w", errTooLarge)
				}
				mu.Lock()
				*took = append(*took, r.EventID)
				mu.Unlock()
				return nil
			}
		}, []string{"r005", "r021"}, []string{"r006"}},
		{"the dead-letter path fails once, then takes it", func(took *[]string, mu *sync.Mutex) func(context.Context, Entry, error) error {
			failed := false
			return func(_ context.Context, e Entry, err error) error {
				r := e.Record
				mu.Lock()
				defer mu.Unlock()
				if !failed {
					failed = true
					return errors.New("broker unavailable")
				}
				*took = append(*took, r.EventID)
				return nil
			}
		}, poisonIDs, nil},
		{"the dead-letter path keeps failing: parked after QuarantineAfter tries", func(took *[]string, mu *sync.Mutex) func(context.Context, Entry, error) error {
			return func(_ context.Context, e Entry, err error) error {
				if e.Record.EventID == "r021" {
					return errors.New("UNKNOWN_TOPIC_OR_PARTITION")
				}
				mu.Lock()
				*took = append(*took, e.Record.EventID)
				mu.Unlock()
				return nil
			}
		}, []string{"r005", "r006"}, []string{"r021"}},
		{"no dead-letter path: parked", nil, nil, poisonIDs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t.TempDir())
			s, logs, m := open(t, cfg)
			appendN(t, s, 0, records/2)
			k := refusing(poisonIDs...)
			fc := forwarderConfig()
			fc.WindowBytes = 600 // a few records a window
			fc.Permanent = permanent
			var (
				mu   sync.Mutex
				took []string
			)
			if tc.poison != nil {
				fc.Poison = tc.poison(&took, &mu)
			}
			_, _ = startWatched(t, s, k, fc)
			appendN(t, s, records/2, records/2)
			testkit.WaitFor(t, 10*time.Second, "everything settled", func() bool { return s.Stats().Unforwarded == 0 })
			var good []string
			for _, id := range idRange(0, records) {
				if !slices.Contains(poisonIDs, id) {
					good = append(good, id)
				}
			}
			if got := k.ackedIDs(); !slices.Equal(got, good) {
				t.Fatalf("kafka acknowledged %v, want %v\n%s", got, good, logs)
			}
			produced, _ := k.snapshot()
			var last []string // the good records, by their last production
			for _, id := range produced {
				if !slices.Contains(poisonIDs, id) {
					last = append(last, id)
				}
			}
			checkLastProductionsInOrder(t, last)
			mu.Lock()
			gotDead := slices.Clone(took)
			mu.Unlock()
			if !slices.Equal(gotDead, tc.dead) {
				t.Fatalf("dead-lettered %v, want %v", gotDead, tc.dead)
			}
			var parked []string
			for _, r := range readParked(t, cfg.Dir) {
				parked = append(parked, r.EventID)
				if why := header(r, HeaderParkedReason); !strings.Contains(why, "MESSAGE_TOO_LARGE") || len(r.Value) == 0 {
					t.Fatalf("parked record %+v without its reason or value", r)
				}
			}
			if !slices.Equal(parked, tc.parked) {
				t.Fatalf("parked %v, want %v", parked, tc.parked)
			}
			if n := metricValue(t, m, "inlet_spool_parked_records_total"); n != float64(len(tc.parked)) || s.Stats().Parked != uint64(len(tc.parked)) {
				t.Fatalf("parked metric %v, want %d", n, len(tc.parked))
			}
			if len(tc.parked) > 0 && logs.Count("parked them") < 1 {
				t.Fatalf("parking not logged:\n%s", logs)
			}
			if n := metricValue(t, m, "inlet_forwarder_records_total"); n != float64(len(good)) {
				t.Fatalf("forwarded metric %v, want %d", n, len(good))
			}
		})
	}
}
