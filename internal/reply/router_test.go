package reply

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestRouter(t *testing.T) {
	r := NewRouter(2, nil)
	a, err := r.Add("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Add("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add("c"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third waiter past the limit of 2: %v, want ErrBusy", err)
	}
	if !r.Deliver(Reply{ID: "a", Status: 201, Body: []byte("x")}) {
		t.Fatal("a reply with a waiter was not delivered")
	}
	if got := <-a; got.Status != 201 || string(got.Body) != "x" {
		t.Fatalf("delivered %+v", got)
	}
	if r.Deliver(Reply{ID: "a"}) {
		t.Fatal("a second reply to one request was delivered")
	}
	if r.Deliver(Reply{ID: "nobody"}) {
		t.Fatal("a reply nobody waits for was delivered")
	}
	r.Fail("b", errors.New("refused"))
	if got := <-b; got.unsent == nil || got.unsent.Error() != "refused" {
		t.Fatalf("a failed request: %+v", got)
	}
	r.Fail("b", errors.New("again")) // nobody waits: nothing happens, nothing blocks
	r.Remove("a")
	r.Remove("b")
	if n := r.InFlight(); n != 0 {
		t.Fatalf("%d in flight after every waiter left", n)
	}
	if p := r.Peak(); p != 2 {
		t.Fatalf("peak %d, want 2", p)
	}
	if _, err := r.Add("c"); err != nil {
		t.Fatalf("room again after removals: %v", err)
	}
}

// TestRouterConcurrent: replies, failures and removals race; every waiter
// gets at most one outcome, nothing blocks, and the router ends empty.
func TestRouterConcurrent(t *testing.T) {
	const n = 2000
	r := NewRouter(n, nil)
	chans := make([]<-chan Reply, n)
	for i := range n {
		ch, err := r.Add(fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprint(i)
		wg.Go(func() { r.Deliver(Reply{ID: id}) })
		wg.Go(func() { r.Fail(id, errors.New("x")) })
		wg.Go(func() { r.Deliver(Reply{ID: id}) })
	}
	wg.Wait()
	for i, ch := range chans {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d got no outcome", i)
		}
		select {
		case rep := <-ch:
			t.Fatalf("waiter %d got a second outcome %+v", i, rep)
		default:
		}
	}
	if got := r.InFlight(); got != 0 {
		t.Fatalf("%d left in flight", got)
	}
}
