package catalog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

const helperEnv = "INLET_CATALOG_TEST_HELPER"

// TestHelperProcess is the child of TestLockHolderKilled: it looks a new
// key up through the real code path and stops, holding the fill lock, at
// the afterLock seam until it is killed.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("only run as TestLockHolderKilled's child")
	}
	parts := strings.Split(spec, "\x1f")
	addr, prefix, group, name := parts[0], parts[1], parts[2], parts[3]
	afterLock = func(k Key) {
		fmt.Println("LOCKED")
		os.Stdout.Sync()
		time.Sleep(time.Hour)
	}
	st, err := NewRedisStore(RedisOptions{Addr: addr, Prefix: prefix, LockTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := New(st, DefaultConfig(), nil, nil)
	_, err = c.Lookup(context.Background(), Key{Group: group, Name: name})
	t.Fatalf("the lookup returned (%v) instead of stopping at the seam", err)
}

// TestLockHolderKilled: a process that holds a fill lock is killed with
// SIGKILL mid-fill; the fill completes after the lock's TTL (not before),
// by the next callers, who agree on one code, and no code is given twice.
func TestLockHolderKilled(t *testing.T) {
	addr := testkit.Redis(t)
	const lockTTL = 2 * time.Second
	kit := redisKit(t, addr, lockTTL, 10*time.Second)
	st := kit.open(t).(*RedisStore)
	k := Key{Group: "crash", Name: "first-sight"}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{addr, st.prefix, k.Group, k.Name}, "\x1f"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	locked := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "LOCKED" {
				locked <- true
				break
			}
		}
		close(locked)
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-locked:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child ended without taking the lock:\n%s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child did not take the lock within 30s:\n%s", stderr.String())
	}
	ctx := context.Background()
	pttl := must(st.rdb.PTTL(ctx, st.lockKey(k)).Result())
	seen := time.Now()
	if pttl <= 0 || pttl > lockTTL {
		t.Fatalf("lock TTL %v after the child took it, want in (0, %v]", pttl, lockTTL)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if n := must(st.rdb.Exists(ctx, st.lockKey(k)).Result()); n != 1 && time.Since(seen) < pttl-50*time.Millisecond {
		t.Fatal("the dead holder's lock is gone before its TTL")
	}

	// Two instances, several callers each, wait out the dead holder's lock.
	cats := []*Catalog{testCatalog(t, st, nil), testCatalog(t, kit.open(t), nil)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int64]int{}
		errs  []error
		first time.Time
		last  time.Time
	)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := cats[i%2].Lookup(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			codes[e.Code]++
			now := time.Now()
			if now.After(last) {
				last = now
			}
			if first.IsZero() || now.Before(first) {
				first = now
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d lookups failed, first: %v", len(errs), errs[0])
	}
	// Redis expires keys to the millisecond; allow that much.
	if early := seen.Add(pttl).Sub(first); early > 5*time.Millisecond {
		t.Fatalf("the fill completed %v before the dead holder's lock expired", early)
	}
	if late := last.Sub(seen.Add(pttl)); late > 3*time.Second {
		t.Fatalf("the fill completed %v after the lock expired, want promptly", late)
	}
	if len(codes) != 1 {
		t.Fatalf("callers got codes %v, want one", codes)
	}
	// No code given twice: the counter and every entry.
	seq := must(st.rdb.Get(ctx, st.seqKey()).Int64())
	all := must(cats[0].List(ctx, "", Key{}, 100))
	if seq != 1 || len(all) != 1 || all[0].Code != 1 || codes[1] != 20 {
		t.Fatalf("counter %d, entries %+v, codes %v: want 1, one entry with code 1", seq, all, codes)
	}
	if cats[0].Store().(*RedisStore).LockWaits()+cats[1].Store().(*RedisStore).LockWaits() == 0 {
		t.Fatal("no fill waited for the dead holder's lock")
	}
}

// TestRedisDown: with Redis stopped, cached keys still answer, misses fail
// with ErrUnavailable promptly, and once Redis is back lookups work again.
func TestRedisDown(t *testing.T) {
	r := testkit.PrivateRedis(t)
	st, err := NewRedisStore(RedisOptions{Addr: r.Addr, Prefix: "inlet:catalog:", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := testCatalog(t, st, func(c *Config) { c.CacheTTL = time.Hour; c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	cached := Key{"down", "cached"}
	want := must(c.Lookup(ctx, cached))

	r.Stop()
	for i := range 3 {
		start := time.Now()
		got, err := c.Lookup(ctx, cached)
		if err != nil || got.Code != want.Code {
			t.Fatalf("cached key with Redis down: %+v %v, want %+v", got, err, want)
		}
		_, err = c.Lookup(ctx, Key{"down", fmt.Sprint("miss-", i)})
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("a miss with Redis down took %v, want < 2s", took)
		}
		isErr(t, err, ErrUnavailable)
		_, err = c.Get(ctx, Key{"down", fmt.Sprint("get-", i)})
		isErr(t, err, ErrUnavailable)
	}
	start := time.Now()
	out := make([]Result, 3)
	c.Resolve(ctx, []Key{cached, {"down", "r1"}, {"down", "r2"}}, out)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Resolve with Redis down took %v, want < 2s", took)
	}
	if !out[0].Found || out[0].Entry.Code != want.Code || out[0].Err != nil {
		t.Fatalf("Resolve, cached key: %+v", out[0])
	}
	for _, r := range out[1:] {
		if !errors.Is(r.Err, ErrUnavailable) || r.Found {
			t.Fatalf("Resolve, missed key with Redis down: %+v, want ErrUnavailable", r)
		}
	}
	_, err = c.Upsert(ctx, Entry{Group: "down", Name: "set"})
	isErr(t, err, ErrUnavailable)

	r.Start()
	// Announcements sent while the watch was down are lost: the cache is
	// dropped when it is re-established.
	testkit.WaitFor(t, 15*time.Second, "the cache to be dropped when the watch is back", func() bool { return c.hits.len() == 0 })
	testkit.WaitFor(t, 10*time.Second, "a first-sight lookup to work after Redis is back", func() bool {
		_, err := c.Lookup(ctx, Key{"down", "after"})
		return err == nil
	})
}

// TestRedisHung: a Redis that accepts connections and never answers (a
// frozen server) fails lookups with ErrUnavailable within the timeout, not
// after go-redis's long retries.
func TestRedisHung(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	st, err := NewRedisStore(RedisOptions{Addr: ln.Addr().String(), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := New(st, DefaultConfig(), testkit.Logger(t), nil)
	defer func() {
		c.Close()
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	ctx := context.Background()
	for _, lookup := range []func() error{
		func() error { _, err := c.Lookup(ctx, Key{"hung", "a"}); return err },
		func() error { _, err := c.Get(ctx, Key{"hung", "b"}); return err },
		func() error { out := make([]Result, 1); c.Resolve(ctx, []Key{{"hung", "c"}}, out); return out[0].Err },
		func() error { _, err := c.Upsert(ctx, Entry{Group: "hung", Name: "d"}); return err },
	} {
		start := time.Now()
		err := lookup()
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("a call on a hung Redis took %v, want < 2s", took)
		}
		isErr(t, err, ErrUnavailable)
	}
}

// TestLockWait: a fill that cannot have the lock within the lock wait fails
// with ErrUnavailable and leaves the other holder's lock alone; a holder
// that finishes wakes its waiters, who take its entry.
func TestLockWait(t *testing.T) {
	addr := testkit.Redis(t)
	kit := redisKit(t, addr, 10*time.Second, 300*time.Millisecond)
	st := kit.open(t).(*RedisStore)
	defer st.Close()
	ctx := context.Background()
	k := Key{"lock", "held"}
	if !must(st.rdb.SetNX(ctx, st.lockKey(k), "someone-else", 10*time.Second).Result()) {
		t.Fatal("could not take the lock for the test")
	}
	start := time.Now()
	_, err := st.Fill(ctx, k, time.Now())
	isErr(t, err, ErrUnavailable)
	if took := time.Since(start); took < 300*time.Millisecond || took > 2*time.Second {
		t.Fatalf("a fill waited %v for a held lock, want the lock wait (300ms)", took)
	}
	if st.LockWaits() != 1 {
		t.Fatalf("lock waits %d, want 1", st.LockWaits())
	}
	if v := must(st.rdb.Get(ctx, st.lockKey(k)).Result()); v != "someone-else" {
		t.Fatalf("the other holder's lock is now %q", v)
	}
	// Release with the wrong token leaves it; with the right one deletes it.
	if n := must(unlockScript.Run(ctx, st.rdb, []string{st.lockKey(k)}, "not-mine").Int()); n != 0 {
		t.Fatal("compare-and-delete deleted a lock of another token")
	}

	// A waiter is woken when the holder writes the entry.
	w, err := NewRedisStore(RedisOptions{Addr: addr, Prefix: st.prefix, Timeout: 3 * time.Second, LockTTL: 10 * time.Second, LockWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan Entry, 1)
	go func() {
		e, err := w.Fill(ctx, k, time.Now())
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	testkit.WaitFor(t, 5*time.Second, "the waiter to find the lock held", func() bool { return w.LockWaits() == 1 })
	holder := must(st.put(ctx, "fill", Entry{Group: k.Group, Name: k.Name, Status: StatusObserved, Created: time.Now(), Updated: time.Now()}))
	select {
	case e := <-done:
		if e.Code != holder.Code {
			t.Fatalf("waiter got code %d, the holder wrote %d", e.Code, holder.Code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not take the holder's entry within 5s")
	}
	if n := must(unlockScript.Run(ctx, st.rdb, []string{st.lockKey(k)}, "someone-else").Int()); n != 1 {
		t.Fatal("compare-and-delete did not delete the lock of its token")
	}
}
