package ship

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/logsink"
	"github.com/inlet-dev/inlet/internal/relay"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// fakePipe is a pipelining sink whose sends wait until the test answers
// them.
type fakePipe struct {
	mu      sync.Mutex
	sends   []*fakeSend
	resumes int
	// auto, if set, answers each send at once (and the send is not kept);
	// after it failed one, every send fails at once until Resume, as a
	// KafkaSink refuses sends after a failure.
	auto     func(recs [][]byte) error
	refusing bool
}

// fakeSend is a send and its answer, err once done is closed.
type fakeSend struct {
	lines int
	done  chan struct{}
	err   error
}

func (f *fakeSend) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *fakePipe) Send(_ context.Context, recs [][]byte) (relay.Pending, error) {
	f := &fakeSend{lines: len(recs), done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.auto != nil {
		if p.refusing {
			return nil, errFakeDown
		}
		f.err = p.auto(recs)
		p.refusing = f.err != nil
		close(f.done)
		return f, nil
	}
	p.sends = append(p.sends, f)
	return f, nil
}

func (p *fakePipe) Resume() {
	p.mu.Lock()
	p.resumes++
	p.refusing = false
	p.mu.Unlock()
}

func (p *fakePipe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sends)
}

// answer answers send i (in the order sent) with err.
func (p *fakePipe) answer(i int, err error) {
	p.mu.Lock()
	f := p.sends[i]
	p.mu.Unlock()
	f.err = err
	close(f.done)
}

var errFakeDown = errors.New("fake pipe down")

// TestShipCheckpointWithBatchesInFlight: `ship --file` keeps several
// batches in flight, and its checkpoint moves only past batches
// acknowledged in order: not when later batches are acknowledged before
// an earlier one, nor when an earlier one fails (it and those after it are
// sent again, in order).
func TestShipCheckpointWithBatchesInFlight(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.log")
	appendTo(t, path, lines(0, 50))
	cfg := testConfig(func(c *Config) { c.File, c.BatchSize, c.Brokers, c.Topic = path, 10, []string{"127.0.0.1:1"}, "t" })
	p := &fakePipe{}
	cfg.testSink, cfg.testResume = p, p.Resume
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- Run(ctx, cfg, nil, testkit.Logger(t)) }()

	pos := func() int64 { return readPos(t, cfg.Checkpoint).Offset }
	after := func(n int) int64 { return int64(len(lines(0, n))) }
	testkit.WaitFor(t, 10*time.Second, "the 5 batches in flight at once", func() bool { return p.count() == 5 })
	for i := 1; i < 5; i++ {
		p.answer(i, nil)
	}
	p.answer(0, errFakeDown)
	// All 5 sent again, in order: Ship heard of the 4 acknowledged.
	testkit.WaitFor(t, 10*time.Second, "the 5 batches sent again", func() bool { return p.count() == 10 })
	if got := pos(); got != 0 {
		t.Fatalf("checkpoint at %d after batch 0 failed, want none", got)
	}
	p.answer(5, nil) // batch 0 again
	testkit.WaitFor(t, 10*time.Second, "the checkpoint after batch 0", func() bool { return pos() == after(10) })
	for i := 7; i < 10; i++ {
		p.answer(i, nil)
	}
	p.answer(6, errFakeDown) // batch 1, after batches 2-4 were acknowledged
	testkit.WaitFor(t, 10*time.Second, "batches 1-4 sent again", func() bool { return p.count() == 14 })
	if got := pos(); got != after(10) {
		t.Fatalf("checkpoint at %d while batch 1 is not acknowledged, want %d", got, after(10))
	}
	for i := 10; i < 14; i++ {
		p.answer(i, nil)
	}
	testkit.WaitFor(t, 10*time.Second, "the checkpoint at the end", func() bool { return pos() == after(50) })
	cancel()
	if err := <-res; err != nil {
		t.Errorf("Run: %v, want nil: every line acknowledged", err)
	}
	if p.resumes != 2 {
		t.Errorf("%d resumes, want one per failure", p.resumes)
	}
}

// TestShipBatchRefusedTooLarge: Kafka refuses every batch holding one
// line too large (as franz-go reports a batch the broker refuses), and
// the line alone too: Ship sends that batch again a line at a time, so
// that only the line is rejected; it ends, non-zero with the count, and
// every other line landed once, in order.
func TestShipBatchRefusedTooLarge(t *testing.T) {
	var landed []string
	p := &fakePipe{auto: func(recs [][]byte) error {
		for _, r := range recs {
			if strings.Contains(string(r), "huge") {
				return fmt.Errorf("producing: %w", logsink.ErrTooLarge)
			}
		}
		for _, r := range recs {
			landed = append(landed, string(r))
		}
		return nil
	}}
	cfg := testConfig(func(c *Config) { c.BatchSize, c.Brokers, c.Topic = 10, []string{"127.0.0.1:1"}, "t" })
	cfg.testSink, cfg.testResume = p, p.Resume
	in := lines(0, 17) + "huge\n" + lines(17, 30)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := Run(ctx, cfg, strings.NewReader(in), testkit.Logger(t))
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "1 of 31") || !strings.Contains(err.Error(), "1 rejected") {
		t.Fatalf("Run: %v; want it to end with the one line rejected", err)
	}
	if len(landed) != 30 {
		t.Fatalf("%d lines landed, want 30", len(landed))
	}
	for i, r := range landed {
		if !strings.Contains(r, fmt.Sprintf(`"line-%d level`, i)) {
			t.Fatalf("landed %d: %s, want line-%d", i, r, i)
		}
	}
}
