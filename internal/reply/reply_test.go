package reply

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
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

func TestReplyMarshal(t *testing.T) {
	for _, rep := range []Reply{
		{ID: "01a2", Status: 200, ContentType: "application/json", Body: []byte(`{"ok":true}`)},
		{ID: "x", Status: 502, Err: "no such order"},
		{ID: "empty"},
		{ID: string(bytes.Repeat([]byte("i"), 300)), Status: 999, Body: bytes.Repeat([]byte{0, 'R', 1}, 1000)},
	} {
		got, err := Unmarshal(rep.Marshal())
		if err != nil {
			t.Fatalf("%q: %v", rep.ID, err)
		}
		if got.ID != rep.ID || got.Status != rep.Status || got.ContentType != rep.ContentType || got.Err != rep.Err || !bytes.Equal(got.Body, rep.Body) {
			t.Fatalf("round trip: %+v, want %+v", got, rep)
		}
	}
	good := Reply{ID: "abc", Status: 200, ContentType: "text/plain", Err: "e", Body: []byte("body")}.Marshal()
	for name, b := range map[string][]byte{
		"empty":            nil,
		"wrong magic":      append([]byte{'X'}, good[1:]...),
		"wrong version":    append([]byte{'R', 2}, good[2:]...),
		"id past the end":  {'R', 1, 50, 'a'},
		"status too large": {'R', 1, 1, 'a', 0xe8, 0x07}, // 1000
		"no content type":  {'R', 1, 1, 'a', 200, 1},
		"cut error":        good[:len(good)-len("body")-1],
	} {
		if _, err := Unmarshal(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestAddressAndDeadline(t *testing.T) {
	for _, s := range []string{"kafka:inlet.replies.a", "redis:inlet:replies:a"} {
		a, err := ParseAddress(s)
		if err != nil || a.String() != s {
			t.Errorf("%s: %v %v", s, a, err)
		}
	}
	for _, s := range []string{"", "kafka:", "http:x", "nocolon"} {
		if _, err := ParseAddress(s); err == nil {
			t.Errorf("%q: parsed, want an error", s)
		}
	}
	d := time.UnixMilli(1_790_000_000_123)
	got, err := ParseDeadline(FormatDeadline(d))
	if err != nil || !got.Equal(d) {
		t.Fatalf("deadline round trip: %v %v", got, err)
	}
	if _, err := ParseDeadline("tomorrow"); err == nil {
		t.Fatal("a deadline that is not Unix milliseconds parsed")
	}
}
