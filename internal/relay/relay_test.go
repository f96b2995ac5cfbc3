package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errDown      = errors.New("sink down")
	errRefused   = errors.New("refused for good")
	errRefusing  = errors.New("refusing until resumed")
	errRead      = errors.New("cannot read")
	errFatal     = errors.New("fatal")
	errDeadLtr   = errors.New("dead-letter path down")
	errDeadStuck = errors.New("dead-letter path and fallback down")
)

// landedError: the first n records of the batch landed, the rest failed
// with err (nil: errDown).
type landedError struct {
	n   int
	err error
}

func (e landedError) Error() string { return fmt.Sprintf("%d landed", e.n) }
func (e landedError) Unwrap() error { return e.err }

// source yields the records 0..n-1 in batches of size, from an in-memory
// log, and checks that Settled comes in order.
type source struct {
	t    testing.TB
	n    int
	size int
	// gaps: a record here cannot be read; the batch before it stops short
	// of it, and it is yielded as a gap (given up).
	gaps map[int]bool
	// readFails: Next fails this many times at this record.
	readFails map[int]int
	// grow: the first batch after a Rewind holds this many more records.
	grow int

	mu      sync.Mutex
	next    int // what Next yields next
	settled int // every record before is settled
	errs    map[int]error
	rewound bool // since the last Send
}

func newSource(t testing.TB, n, size int) *source {
	return &source{t: t, n: n, size: size, gaps: map[int]bool{}, readFails: map[int]int{}, errs: map[int]error{}}
}

func (s *source) Next(ctx context.Context) (relay.Batch[int], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= s.n {
		return relay.Batch[int]{}, io.EOF
	}
	if s.readFails[s.next] > 0 {
		s.readFails[s.next]--
		return relay.Batch[int]{}, errRead
	}
	start := s.next
	if s.gaps[start] {
		s.next++
		return relay.Batch[int]{Meta: start}, nil
	}
	var recs []int
	size := s.size
	if s.rewound {
		size += s.grow
	}
	for s.next < s.n && len(recs) < size && !s.gaps[s.next] {
		recs = append(recs, s.next)
		s.next++
	}
	return relay.Batch[int]{Records: recs, Meta: start, Time: time.Unix(int64(start+1), 0)}, nil
}

func (s *source) Rewind() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = s.settled
	s.rewound = true
	return nil
}

func (s *source) Settled(b relay.Batch[int], from, to int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := b.Meta.(int)
	if start+from != s.settled {
		s.t.Errorf("settled [%d, %d) of the batch at %d; expected from %d", from, to, start, s.settled)
	}
	if len(b.Records) == 0 {
		s.settled = start + 1 // a gap of one record
		return
	}
	if to < from || to > len(b.Records) {
		s.t.Errorf("settled [%d, %d) of a batch of %d", from, to, len(b.Records))
	}
	for _, r := range b.Records[from:to] {
		if err != nil {
			s.errs[r] = err
		}
	}
	s.settled = b.Records[to-1] + 1
}

func (s *source) firstUnsettled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled
}

// resend reports whether Rewind was called since the last call, and the
// first record not settled and not in a gap.
func (s *source) resend() (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rewound
	s.rewound = false
	first := s.settled
	for s.gaps[first] {
		first++
	}
	return r, first
}

// sink is a scripted sink. It records every Send as it is made and checks
// there that the engine sends in order: each batch continues the one
// before, or, after a Rewind, starts again at the first record not
// settled; that no more than Windows batches follow a failed one before
// the resend; and that a record sent alone is alone in flight. Its answers
// are decided at Send: fail answers a batch, and after a failure every
// batch fails until Resume (as franz-go fails what it buffered after a
// failed record, and logship's KafkaSink until Resume).
type sink struct {
	t   testing.TB
	src *source
	// fail decides the answer to a batch not refused otherwise (nil: it lands).
	fail func(sendNo int, recs []int) error
	// block: Send does not return until release is closed.
	block   bool
	release chan struct{}

	windows int

	mu       sync.Mutex
	sends    [][]int
	landed   []int
	lastSent int
	refusing bool // a batch failed: refuse every Send until Resume
	refused  int  // Sends refused since
	resumes  int
	alone    bool // a record sent alone is not answered yet
}

func newSink(t testing.TB, src *source) *sink {
	return &sink{t: t, src: src, lastSent: -1, release: make(chan struct{}), windows: 4}
}

func (k *sink) Send(ctx context.Context, recs []int) (relay.Pending, error) {
	if k.block {
		<-k.release
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sends = append(k.sends, slices.Clone(recs))
	for i := 1; i < len(recs); i++ {
		if recs[i] != recs[i-1]+1 {
			k.t.Errorf("send %d: records out of order: %v", len(k.sends), recs)
		}
	}
	k.checkStart(recs)
	if k.alone {
		k.t.Errorf("send %d (%v) while a record sent alone is in flight", len(k.sends), recs)
	}
	k.alone = len(recs) == 1
	k.lastSent = recs[len(recs)-1]
	var err error
	switch {
	case k.refusing:
		err = errRefusing
		if k.refused++; k.refused > k.windows {
			k.t.Errorf("send %d: %d batches sent after a failed one", len(k.sends), k.refused)
		}
	case k.fail != nil:
		err = k.fail(len(k.sends), recs)
	}
	n := len(recs)
	var le landedError
	if errors.As(err, &le) {
		n = le.n
	} else if err != nil && !errors.Is(err, errDropped) {
		n = 0
	}
	k.landed = append(k.landed, recs[:n]...)
	if err != nil && !errors.Is(err, errDropped) {
		k.refusing = true
	}
	return &pending{k: k, err: err, n: len(recs)}, nil
}

// checkStart checks that recs continue the batch sent before, or start at
// the first record not settled after a Rewind.
func (k *sink) checkStart(recs []int) {
	expect := k.lastSent + 1
	for k.src.gaps[expect] {
		expect++
	}
	if rewound, first := k.src.resend(); recs[0] != expect || rewound {
		if recs[0] != first {
			k.t.Errorf("send %d starts at %d after %d (rewound: %v); the first record not settled is %d",
				len(k.sends), recs[0], k.lastSent, rewound, first)
		}
	}
}

func (k *sink) resume() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refusing, k.refused = false, 0
	k.resumes++
}

type pending struct {
	k   *sink
	err error
	n   int
}

func (p *pending) Wait(ctx context.Context) error {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if p.n == 1 {
		p.k.alone = false
	}
	return p.err
}

var errDropped = errors.New("some dropped")

// checkLanded checks that every record of 0..n-1 not in gone landed, and
// that the last copy of each landed in order.
func checkLanded(t testing.TB, landed []int, n int, gone map[int]bool) {
	t.Helper()
	seen := map[int]bool{}
	var last []int
	for i := len(landed) - 1; i >= 0; i-- {
		if !seen[landed[i]] {
			seen[landed[i]] = true
			last = append(last, landed[i])
		}
	}
	slices.Reverse(last)
	var want []int
	for r := range n {
		if !gone[r] {
			want = append(want, r)
		}
	}
	if !slices.Equal(last, want) {
		t.Errorf("last copies landed in this order:\n%v\nwant\n%v", last, want)
	}
}

// run runs e until it returns, failing the test if that takes long.
func run(t testing.TB, e *relay.Engine[int], k *sink) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Run() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		e.Stop(context.Background())
		k.mu.Lock()
		defer k.mu.Unlock()
		t.Fatalf("the engine did not finish; sends: %v", k.sends)
		return nil
	}
}

func config(k *sink) relay.Config[int] {
	return relay.Config[int]{
		Windows: 4,
		Resume:  k.resume,
		Permanent: func(err error) bool {
			return errors.Is(err, errRefused)
		},
		Dropped: func(err error) bool { return errors.Is(err, errDropped) },
		Landed: func(err error) int {
			var le landedError
			if errors.As(err, &le) {
				return le.n
			}
			return 0
		},
	}
}

// TestFaultEveryKth fails the first send of every k-th batch, for windows
// of 1 to 5: every record lands once, in order, and every resend starts at
// the first record not settled (checked at Send).
func TestFaultEveryKth(t *testing.T) {
	for _, drain := range []bool{false, true} {
		for windows := 1; windows <= 5; windows += 2 {
			for k := 1; k <= 7; k++ {
				t.Run(fmt.Sprintf("drain=%v/windows=%d/k=%d", drain, windows, k), func(t *testing.T) {
					src := newSource(t, 200, 7)
					snk := newSink(t, src)
					failed := map[int]bool{}
					batches := 0
					snk.fail = func(_ int, recs []int) error {
						if failed[recs[0]] {
							return nil
						}
						batches++
						if batches%k == 0 {
							failed[recs[0]] = true
							return errDown
						}
						return nil
					}
					cfg := config(snk)
					cfg.Windows, cfg.Drain, snk.windows = windows, drain, windows
					var fails, retries int
					cfg.OnFail = func(error, int, int) { fails++ }
					cfg.OnRetry = func(_ error, stuck bool) {
						if stuck {
							t.Error("stuck on a sink failure")
						}
						retries++
					}
					e := relay.New(src, snk, cfg)
					if err := run(t, e, snk); err != nil {
						t.Fatal(err)
					}
					snk.mu.Lock()
					defer snk.mu.Unlock()
					checkLanded(t, snk.landed, 200, nil)
					if len(snk.landed) != 200 {
						t.Errorf("%d records landed, want each once: 200", len(snk.landed))
					}
					if fails == 0 || fails != retries || snk.resumes != retries {
						t.Errorf("%d failures seen, %d retries, %d resumes", fails, retries, snk.resumes)
					}
					if e.State() != relay.StateStopped || !e.Oldest().IsZero() {
						t.Errorf("state %v, oldest %v after Run", e.State(), e.Oldest())
					}
				})
			}
		}
	}
}

// TestDrainResendsWhatLanded: with Drain, a sink that fails one batch and
// lands those after it has them sent again after the failed one: the last
// copy of each record lands in order.
func TestDrainResendsWhatLanded(t *testing.T) {
	src := newSource(t, 100, 5)
	snk := newSink(t, src)
	snk.fail = func(n int, recs []int) error {
		if n == 3 {
			return errDown
		}
		return nil
	}
	cfg := config(snk)
	cfg.Drain = true
	// This sink lands batches after a failed one (no refusing).
	snk2 := &noRefuse{snk}
	e := relay.New[int](src, snk2, cfg)
	if err := run(t, e, snk); err != nil {
		t.Fatal(err)
	}
	snk.mu.Lock()
	defer snk.mu.Unlock()
	checkLanded(t, snk.landed, 100, nil)
}

// noRefuse lands every batch it is not told to fail, even after a failure.
type noRefuse struct{ *sink }

func (n *noRefuse) Send(ctx context.Context, recs []int) (relay.Pending, error) {
	p, err := n.sink.Send(ctx, recs)
	n.sink.mu.Lock()
	n.refusing = false
	n.sink.mu.Unlock()
	return p, err
}

// TestIsolate: a batch refused for good is sent again one record at a
// time, alone in flight, and no more than its records (the batch read
// again is larger); the records refused alone go to Poison, in order, and
// the rest land once.
func TestIsolate(t *testing.T) {
	poison := map[int]bool{3: true, 17: true, 18: true, 40: true}
	src := newSource(t, 60, 8)
	src.grow = 5
	snk := newSink(t, src)
	snk.fail = func(_ int, recs []int) error {
		for _, r := range recs {
			if poison[r] {
				return errRefused
			}
		}
		return nil
	}
	cfg := config(snk)
	var poisoned []int
	var isolated []int
	cfg.OnIsolate = func(n int, err error) { isolated = append(isolated, n) }
	cfg.Poison = func(ctx context.Context, b relay.Batch[int], i int, err error) error {
		r := b.Records[i]
		if !errors.Is(err, errRefused) {
			t.Errorf("poisoned %d with %v", r, err)
		}
		poisoned = append(poisoned, r)
		return nil
	}
	e := relay.New(src, snk, cfg)
	if err := run(t, e, snk); err != nil {
		t.Fatal(err)
	}
	snk.mu.Lock()
	defer snk.mu.Unlock()
	checkLanded(t, snk.landed, 60, poison)
	if len(snk.landed) != 60-len(poison) {
		t.Errorf("%d records landed, want %d", len(snk.landed), 60-len(poison))
	}
	if !slices.Equal(poisoned, []int{3, 17, 18, 40}) {
		t.Errorf("poisoned %v", poisoned)
	}
	// 0-7 fail; 8-20 (read again after a Rewind: 13) fail; 34-41.
	if !slices.Equal(isolated, []int{8, 13, 8}) {
		t.Errorf("isolated batches of %v records, want 8, 13, 8", isolated)
	}
	alone := 0
	for _, s := range snk.sends {
		if len(s) == 1 {
			alone++
		}
	}
	if alone != 29 {
		t.Errorf("%d records sent alone, want the 3 failed batches' 29", alone)
	}
	for r := range poison {
		if !errors.Is(src.errs[r], errRefused) {
			t.Errorf("record %d settled with %v", r, src.errs[r])
		}
	}
}

// TestPoison: Poison's failures are retried (a *StuckError as stuck),
// without Poison the record is dropped; a refusal in the middle of sending
// alone is retried from the first record not settled.
func TestPoison(t *testing.T) {
	cases := []struct {
		name   string
		fails  []error // Poison's answers before it takes the record
		poison bool
		stuck  bool
	}{
		{name: "success", poison: true},
		{name: "transient", fails: []error{errDeadLtr, errDeadLtr}, poison: true},
		{name: "stuck", fails: []error{&relay.StuckError{Err: errDeadStuck}}, poison: true, stuck: true},
		{name: "nil Poison drops", poison: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(t, 20, 5)
			snk := newSink(t, src)
			downOnce := true
			snk.fail = func(_ int, recs []int) error {
				if slices.Contains(recs, 12) {
					return errRefused
				}
				if len(recs) == 1 && recs[0] == 11 && downOnce {
					downOnce = false // a transient failure while sending alone
					return errDown
				}
				return nil
			}
			cfg := config(snk)
			var calls []int
			if tc.poison {
				fails := tc.fails
				cfg.Poison = func(ctx context.Context, b relay.Batch[int], i int, err error) error {
					calls = append(calls, b.Records[i])
					if len(fails) > 0 {
						err := fails[0]
						fails = fails[1:]
						return err
					}
					return nil
				}
			}
			var states []relay.State
			cfg.OnState = func(s relay.State) { states = append(states, s) }
			var stuck, retries int
			cfg.OnRetry = func(err error, st bool) {
				retries++
				if st {
					stuck++
				}
			}
			e := relay.New(src, snk, cfg)
			if err := run(t, e, snk); err != nil {
				t.Fatal(err)
			}
			snk.mu.Lock()
			defer snk.mu.Unlock()
			checkLanded(t, snk.landed, 20, map[int]bool{12: true})
			if len(snk.landed) != 19 {
				t.Errorf("%d landed: %v", len(snk.landed), snk.landed)
			}
			if want := len(tc.fails) + 1; tc.poison && len(calls) != want {
				t.Errorf("Poison called %d times, want %d", len(calls), want)
			}
			if !errors.Is(src.errs[12], errRefused) || len(src.errs) != 1 {
				t.Errorf("settled with errors: %v", src.errs)
			}
			if tc.stuck != (stuck == 1) || tc.stuck != slices.Contains(states, relay.StateStuck) {
				t.Errorf("stuck %d times; states %v", stuck, states)
			}
			if retries != 1+len(tc.fails) {
				t.Errorf("%d retries, want %d", retries, 1+len(tc.fails))
			}
		})
	}
}

// TestPartialLanding: the first records of a failed batch that landed are
// settled and not sent again; Dropped answers settle the batch.
func TestPartialLanding(t *testing.T) {
	src := newSource(t, 50, 10)
	snk := newSink(t, src)
	snk.fail = func(n int, recs []int) error {
		switch {
		case recs[0] == 20:
			return landedError{n: 4}
		case slices.Contains(recs, 35):
			return errDropped
		}
		return nil
	}
	cfg := config(snk)
	cfg.Windows = 3
	e := relay.New(src, snk, cfg)
	if err := run(t, e, snk); err != nil {
		t.Fatal(err)
	}
	snk.mu.Lock()
	defer snk.mu.Unlock()
	checkLanded(t, snk.landed, 50, nil)
	if len(snk.landed) != 50 {
		t.Errorf("%d landed, want each once: %v", len(snk.landed), snk.landed)
	}
	if !slices.ContainsFunc(snk.sends, func(s []int) bool { return s[0] == 24 }) {
		t.Errorf("no resend from record 24: %v", snk.sends)
	}
	for r := 34; r < 44; r++ {
		if !errors.Is(src.errs[r], errDropped) {
			t.Errorf("record %d settled with %v", r, src.errs[r])
		}
	}
}

// TestSourceErrorsAndGaps: records the source cannot read are retried
// (stuck) and, given up as gaps, settled in order and sent nowhere.
func TestSourceErrorsAndGaps(t *testing.T) {
	src := newSource(t, 40, 6)
	src.gaps[5], src.gaps[6], src.gaps[33] = true, true, true
	src.readFails[13], src.readFails[34] = 2, 1
	snk := newSink(t, src)
	cfg := config(snk)
	var states []relay.State
	cfg.OnState = func(s relay.State) { states = append(states, s) }
	stuck := 0
	cfg.OnRetry = func(err error, st bool) {
		if !st || !errors.Is(err, errRead) {
			t.Errorf("retry after %v, stuck %v", err, st)
		}
		stuck++
	}
	e := relay.New(src, snk, cfg)
	if err := run(t, e, snk); err != nil {
		t.Fatal(err)
	}
	snk.mu.Lock()
	defer snk.mu.Unlock()
	gone := map[int]bool{5: true, 6: true, 33: true}
	checkLanded(t, snk.landed, 40, gone)
	if len(snk.landed) != 37 || stuck != 3 || !slices.Contains(states, relay.StateStuck) {
		t.Errorf("%d landed, %d stuck; states %v", len(snk.landed), stuck, states)
	}
	if src.settled != 40 {
		t.Errorf("settled up to %d", src.settled)
	}
}

// TestFatal: an answer Fatal accepts stops the engine with it; nothing of
// the batch is settled.
func TestFatal(t *testing.T) {
	src := newSource(t, 40, 5)
	snk := newSink(t, src)
	snk.fail = func(n int, recs []int) error {
		if recs[0] == 15 {
			return errFatal
		}
		return nil
	}
	cfg := config(snk)
	cfg.Fatal = func(err error) bool { return errors.Is(err, errFatal) }
	e := relay.New(src, snk, cfg)
	if err := run(t, e, snk); !errors.Is(err, errFatal) {
		t.Fatalf("Run returned %v", err)
	}
	if got := src.firstUnsettled(); got != 15 {
		t.Errorf("settled up to %d, want 15", got)
	}
}

// blockingSink answers nothing: Wait returns only when its ctx ends, or
// never if deaf.
type blockingSink struct {
	mu   sync.Mutex
	n    int
	sent chan struct{}
	deaf chan struct{} // closed: Wait returns (at the end of the test)
	ctxs bool          // Wait returns when its ctx ends
}

func (b *blockingSink) sends() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *blockingSink) Send(ctx context.Context, recs []int) (relay.Pending, error) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	select {
	case b.sent <- struct{}{}:
	default:
	}
	return b, nil
}

func (b *blockingSink) Wait(ctx context.Context) error {
	if b.ctxs {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.deaf:
			return nil
		}
	}
	<-b.deaf
	return nil // lands, late: must not be settled after Stop returned
}

// TestStop: Stop returns within its grace even if the sink never answers,
// and nothing is settled after it returned; with a sink that heeds ctx,
// what is in flight is abandoned.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ctxs  bool
		grace time.Duration
		want  error
	}{
		{"sink never answers", false, time.Millisecond, relay.ErrLeftBehind},
		{"sink heeds ctx", true, time.Minute, relay.ErrAbandoned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(t, 100, 5)
			snk := &blockingSink{sent: make(chan struct{}, 1), deaf: make(chan struct{}), ctxs: tc.ctxs}
			var states []relay.State
			var mu sync.Mutex
			e := relay.New[int](src, snk, relay.Config[int]{Windows: 2, StopGrace: tc.grace,
				OnState: func(s relay.State) { mu.Lock(); states = append(states, s); mu.Unlock() }})
			ran := make(chan error, 1)
			go func() { ran <- e.Run() }()
			<-snk.sent
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := e.Stop(ctx); err != tc.want {
				t.Errorf("Stop returned %v, want %v", err, tc.want)
			}
			if e.State() != relay.StateStopped {
				t.Errorf("state %v after Stop", e.State())
			}
			settled := src.firstUnsettled()
			close(snk.deaf)
			if err := <-ran; err != nil {
				t.Errorf("Run returned %v", err)
			}
			if got := src.firstUnsettled(); got != settled || got != 0 {
				t.Errorf("settled up to %d after Stop returned (%d before)", got, settled)
			}
			if err := e.Stop(context.Background()); err != nil {
				t.Errorf("a second Stop returned %v", err)
			}
		})
	}
}

// TestStopLetsInFlightLand: Stop sends nothing more, and waits for what
// is in flight until its ctx ends.
func TestStopLetsInFlightLand(t *testing.T) {
	src := newSource(t, 100, 5)
	snk := &blockingSink{sent: make(chan struct{}, 1), deaf: make(chan struct{}), ctxs: true}
	e := relay.New[int](src, snk, relay.Config[int]{Windows: 3})
	ran := make(chan error, 1)
	go func() { ran <- e.Run() }()
	<-snk.sent
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop(context.Background()) }()
	close(snk.deaf) // everything in flight lands
	if err := <-stopped; err != nil {
		t.Errorf("Stop returned %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run returned %v", err)
	}
	// Everything sent was settled: nothing was abandoned.
	if got, sent := src.firstUnsettled(), 5*snk.sends(); got != sent || got == 0 {
		t.Errorf("settled up to %d of %d sent", got, sent)
	}
}

// TestDrain: Drain lets the engine send everything the source yields
// (unlike Stop, which sends nothing more), and at its ctx's end abandons
// what is in flight.
func TestDrain(t *testing.T) {
	src := newSource(t, 100, 5)
	snk := newSink(t, src)
	e := relay.New[int](src, snk, config(snk))
	ran := make(chan error, 1)
	go func() { ran <- e.Run() }()
	if err := e.Drain(context.Background()); err != nil {
		t.Errorf("Drain returned %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run returned %v", err)
	}
	if got := src.firstUnsettled(); got != 100 {
		t.Errorf("settled up to %d of 100", got)
	}

	src = newSource(t, 100, 5)
	blk := &blockingSink{sent: make(chan struct{}, 1), deaf: make(chan struct{}), ctxs: true}
	defer close(blk.deaf)
	e = relay.New[int](src, blk, relay.Config[int]{Windows: 2, StopGrace: time.Minute})
	go func() { ran <- e.Run() }()
	<-blk.sent
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := e.Drain(ctx); err != relay.ErrAbandoned {
		t.Errorf("Drain with nothing answered returned %v, want %v", err, relay.ErrAbandoned)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run returned %v", err)
	}
	if got := src.firstUnsettled(); got != 0 {
		t.Errorf("settled up to %d with nothing answered", got)
	}
}

// TestStalled: the oldest batch unanswered for StallAfter reports
// StateStalled, and Oldest its Time.
func TestStalled(t *testing.T) {
	src := newSource(t, 10, 5)
	snk := &blockingSink{sent: make(chan struct{}, 1), deaf: make(chan struct{}), ctxs: true}
	fire := make(chan func(), 1)
	e := relay.New[int](src, snk, relay.Config[int]{Windows: 1, StallAfter: time.Hour,
		AfterFunc: func(d time.Duration, fn func()) func() bool { fire <- fn; return func() bool { return true } }})
	ran := make(chan error, 1)
	go func() { ran <- e.Run() }()
	fn := <-fire
	if e.State() != relay.StateSending {
		t.Errorf("state %v, want sending", e.State())
	}
	if got := e.Oldest(); !got.Equal(time.Unix(1, 0)) {
		t.Errorf("oldest %v", got)
	}
	fn()
	if e.State() != relay.StateStalled {
		t.Errorf("state %v, want stalled", e.State())
	}
	close(snk.deaf)
	if err := <-ran; err != nil {
		t.Error(err)
	}
	fn() // a late timer does nothing
	if e.State() != relay.StateStopped || !e.Oldest().IsZero() {
		t.Errorf("state %v, oldest %v after Run", e.State(), e.Oldest())
	}
}

// TestLandedThenRefused: a batch whose first records landed and whose
// rest was refused for good has only the rest sent again, one record at a
// time, over a Source and over a Replay.
func TestLandedThenRefused(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay=%v", replay), func(t *testing.T) {
			var (
				src  *source
				from relay.Source[int]
			)
			if replay {
				var r *relay.Replay[int]
				r, src = replaySource(t, 30)
				from = r
			} else {
				src = newSource(t, 30, 7)
				from = src
			}
			snk := newSink(t, src)
			snk.fail = func(_ int, recs []int) error {
				switch {
				case len(recs) == 1 && recs[0] == 10:
					return errRefused
				case recs[0] == 7 && len(recs) == 7:
					return landedError{n: 2, err: errRefused} // 7 and 8 landed
				}
				return nil
			}
			cfg := config(snk)
			var poisoned []int
			cfg.Poison = func(ctx context.Context, b relay.Batch[int], i int, err error) error {
				poisoned = append(poisoned, b.Records[i])
				return nil
			}
			// Replay's Rewind does not rewind src: say so for the sink's check.
			cfg.OnIsolate = func(n int, err error) {
				if n != 5 {
					t.Errorf("%d records sent alone, want the 5 that did not land", n)
				}
				src.mu.Lock()
				src.rewound = true
				src.mu.Unlock()
			}
			e := relay.New(from, snk, cfg)
			if err := run(t, e, snk); err != nil {
				t.Fatal(err)
			}
			snk.mu.Lock()
			defer snk.mu.Unlock()
			checkLanded(t, snk.landed, 30, map[int]bool{10: true})
			if len(snk.landed) != 29 || !slices.Equal(poisoned, []int{10}) {
				t.Errorf("landed %v, poisoned %v", snk.landed, poisoned)
			}
			for _, s := range snk.sends {
				if len(s) == 1 && s[0] < 9 {
					t.Errorf("%v sent again alone after it landed", s)
				}
			}
			if !errors.Is(src.errs[10], errRefused) || len(src.errs) != 1 {
				t.Errorf("settled with errors: %v", src.errs)
			}
		})
	}
}
