package membudget

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBudget(t *testing.T) {
	b := New(100)
	if !b.Take(60) || b.Take(41) || b.Used() != 60 {
		t.Fatalf("after taking 60 of 100 and refusing 41: used %d", b.Used())
	}
	if !b.Take(40) || b.Used() != 100 {
		t.Fatalf("exactly the rest: used %d", b.Used())
	}
	b.Release(100)
	if b.Used() != 0 || b.Max() != 100 {
		t.Fatalf("after release: used %d, max %d", b.Used(), b.Max())
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	var taken sync.Map
	for i := range 100 {
		wg.Go(func() {
			if b.Take(30) {
				taken.Store(i, true)
			}
		})
	}
	wg.Wait()
	n := 0
	taken.Range(func(any, any) bool { n++; return true })
	if n != 33 || b.Used() != 990 {
		t.Fatalf("%d takes of 30 succeeded in a budget of 1000 (used %d), want 33", n, b.Used())
	}
}

// TestConnShare: one connection's requests together hold at most the
// share; other connections still get the rest of the budget, and what a
// connection gives back it may take again.
func TestConnShare(t *testing.T) {
	b := NewShared(100, 25)
	greedy, other := ConnFrom(ConnContext(context.Background(), nil)), ConnFrom(ConnContext(context.Background(), nil))
	if greedy == nil || greedy == other {
		t.Fatal("ConnContext does not give each connection its own Conn")
	}
	if err := b.TakeConn(greedy, 20); err != nil {
		t.Fatal(err)
	}
	if err := b.TakeConn(greedy, 6); !errors.Is(err, ErrConnShare) {
		t.Fatalf("over the share: %v, want ErrConnShare", err)
	}
	if greedy.Used() != 20 || b.Used() != 20 {
		t.Fatalf("a refused take kept bytes: conn %d, budget %d", greedy.Used(), b.Used())
	}
	for range 3 {
		if err := b.TakeConn(other, 25); errors.Is(err, ErrConnShare) {
			t.Fatalf("another connection's take: %v", err)
		}
		b.ReleaseConn(other, 25)
	}
	if err := b.TakeConn(nil, 80); err != nil {
		t.Fatalf("no connection, within the budget: %v", err)
	}
	if err := b.TakeConn(other, 1); !errors.Is(err, ErrExhausted) {
		t.Fatalf("budget full: %v, want ErrExhausted", err)
	}
	if other.Used() != 0 {
		t.Fatalf("a take refused by the budget left %d on the connection", other.Used())
	}
	b.ReleaseConn(nil, 80)
	h := &Hold{B: b, Conn: greedy}
	if err := h.Take(5); err != nil {
		t.Fatal(err)
	}
	h.Release()
	b.ReleaseConn(greedy, 20)
	if greedy.Used() != 0 || b.Used() != 0 || h.Taken != 0 {
		t.Fatalf("after release: conn %d, budget %d, hold %d", greedy.Used(), b.Used(), h.Taken)
	}
	if ConnFrom(context.Background()) != nil {
		t.Fatal("ConnFrom of a context without a Conn")
	}
}
