package membudget

import (
	"errors"
	"io"
	"strings"
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

func TestReader(t *testing.T) {
	b := New(10)
	r := &Reader{R: strings.NewReader("0123456789abc"), B: b}
	got, err := io.ReadAll(io.LimitReader(r, 8))
	if err != nil || string(got) != "01234567" || r.Taken != 8 || b.Used() != 8 {
		t.Fatalf("read %q, %v: taken %d, used %d", got, err, r.Taken, b.Used())
	}
	_, err = io.ReadAll(r)
	if !errors.Is(err, ErrExhausted) || b.Used() > 10 {
		t.Fatalf("past the budget: %v, used %d", err, b.Used())
	}
	b.Release(r.Taken)
	if b.Used() != 0 {
		t.Fatalf("after releasing what it took: used %d", b.Used())
	}
}
