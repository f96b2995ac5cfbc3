package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/relay"
)

// replaySource is a Replay over the records 0..n-1 read once, in batches
// of 7, that checks Done is told in order, in the batches Read yielded.
func replaySource(t *testing.T, n int) (*relay.Replay[int], *source) {
	// The source checks Settled in order; Read is its Next, which Replay
	// calls once per batch: a record read twice fails the test.
	src := newSource(t, n, 7)
	read := 0
	r := &relay.Replay[int]{
		Read: func(ctx context.Context) (relay.Batch[int], error) {
			b, err := src.Next(ctx)
			if err == nil {
				if b.Records[0] != read {
					t.Errorf("read %v after %d records: read twice", b.Records, read)
				}
				read = b.Records[len(b.Records)-1] + 1
			}
			return b, err
		},
		Done: src.Settled,
	}
	return r, src
}

// TestReplay: the engine over a Replay resends what was not settled, from
// the first record not settled, without reading the stream again.
func TestReplay(t *testing.T) {
	for k := 1; k <= 5; k++ {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			r, src := replaySource(t, 100)
			snk := newSink(t, src)
			failed := map[int]bool{}
			batches := 0
			snk.fail = func(_ int, recs []int) error {
				if failed[recs[0]] {
					return nil
				}
				if batches++; batches%k == 0 {
					failed[recs[0]] = true
					if k%2 == 0 {
						return landedError{n: 2}
					}
					return errDown
				}
				return nil
			}
			// The sink checks resends against src, which Replay's Rewind
			// does not rewind: it is told through OnRetry instead.
			cfg := config(snk)
			cfg.Drain = true
			cfg.OnRetry = func(error, bool) { src.mu.Lock(); src.rewound = true; src.mu.Unlock() }
			e := relay.New[int](r, snk, cfg)
			if err := run(t, e, snk); err != nil {
				t.Fatal(err)
			}
			snk.mu.Lock()
			defer snk.mu.Unlock()
			checkLanded(t, snk.landed, 100, nil)
			if len(snk.landed) != 100 || src.firstUnsettled() != 100 {
				t.Errorf("%d landed, settled up to %d", len(snk.landed), src.firstUnsettled())
			}
			if u := r.Unsettled(); len(u) != 0 {
				t.Errorf("unsettled after Run: %v", u)
			}
		})
	}
}

// TestReplayUnsettled: after a Stop, Unsettled is what was yielded and
// not settled, in order.
func TestReplayUnsettled(t *testing.T) {
	r, _ := replaySource(t, 30)
	snk := &blockingSink{sent: make(chan struct{}, 1), deaf: make(chan struct{}), ctxs: true}
	e := relay.New[int](r, snk, relay.Config[int]{Windows: 3, StopGrace: time.Minute})
	ran := make(chan error, 1)
	go func() { ran <- e.Run() }()
	<-snk.sent
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Stop(ctx); !errors.Is(err, relay.ErrAbandoned) {
		t.Errorf("Stop: %v", err)
	}
	close(snk.deaf)
	<-ran
	u := r.Unsettled()
	if len(u) == 0 || len(u)%7 != 0 || u[0] != 0 || u[len(u)-1] != len(u)-1 {
		t.Errorf("unsettled: %v", u)
	}
}

// TestReplayIsolate: a batch the engine settles in steps (records sent
// alone after a refusal for good) is told to Done record by record, at
// their places in the batch Read yielded.
func TestReplayIsolate(t *testing.T) {
	poison := map[int]bool{3: true, 17: true, 18: true, 40: true}
	r, src := replaySource(t, 60)
	snk := newSink(t, src)
	snk.fail = func(_ int, recs []int) error {
		for _, rec := range recs {
			if poison[rec] {
				return errRefused
			}
		}
		return nil
	}
	cfg := config(snk)
	cfg.Drain = true
	cfg.OnRetry = func(error, bool) { src.mu.Lock(); src.rewound = true; src.mu.Unlock() }
	cfg.OnIsolate = func(int, error) { src.mu.Lock(); src.rewound = true; src.mu.Unlock() }
	e := relay.New[int](r, snk, cfg)
	if err := run(t, e, snk); err != nil {
		t.Fatal(err)
	}
	snk.mu.Lock()
	defer snk.mu.Unlock()
	checkLanded(t, snk.landed, 60, poison)
	if src.firstUnsettled() != 60 || len(r.Unsettled()) != 0 {
		t.Errorf("settled up to %d, unsettled %v", src.firstUnsettled(), r.Unsettled())
	}
	for rec := range poison {
		if !errors.Is(src.errs[rec], errRefused) {
			t.Errorf("record %d settled with %v", rec, src.errs[rec])
		}
	}
}
