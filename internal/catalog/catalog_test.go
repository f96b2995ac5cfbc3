package catalog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestSingleflight: N concurrent misses of one key in one process make one
// store round trip.
func TestSingleflight(t *testing.T) {
	for _, kit := range kits(t) {
		for _, mode := range []Mode{ModeOpen, ModeWarn} {
			t.Run(kit.name+"/"+string(mode), func(t *testing.T) {
				gate := make(chan struct{})
				rec := &recStore{Store: kit.open(t), gate: gate}
				c := testCatalog(t, rec, func(c *Config) { c.Mode = mode })
				k := Key{"sf", "key-" + string(mode)}
				const n = 100
				var wg sync.WaitGroup
				errs := make([]error, n)
				codes := make([]int64, n)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						e, err := c.Lookup(context.Background(), k)
						codes[i], errs[i] = e.Code, err
					}()
				}
				// Every caller has missed the cache before the one store call answers.
				testkit.WaitFor(t, 10*time.Second, "all lookups to miss", func() bool {
					return testutil.ToFloat64(c.m.misses) == n
				})
				close(gate)
				wg.Wait()
				gets, _, fills := rec.counts()
				if gets != 1 {
					t.Fatalf("%d concurrent misses made %d store Gets, want 1", n, gets)
				}
				for i := range n {
					if mode == ModeOpen && (errs[i] != nil || codes[i] != codes[0]) {
						t.Fatalf("lookup %d: code %d, %v; lookup 0: code %d", i, codes[i], errs[i], codes[0])
					}
					if mode == ModeWarn {
						isErr(t, errs[i], ErrNotFound)
					}
				}
				if want := map[Mode]int{ModeOpen: 1, ModeWarn: 0}[mode]; fills != want {
					t.Fatalf("%d fills, want %d", fills, want)
				}
				// And then the cache answers.
				_, _ = c.Lookup(context.Background(), k)
				if gets, _, _ := rec.counts(); gets != 1 {
					t.Fatalf("a lookup after the first went to the store (%d Gets)", gets)
				}
			})
		}
	}
}

// TestResolve: a request's keys make one GetMany for its distinct misses,
// and one fill per distinct new key in mode open.
func TestResolve(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			ctx := context.Background()
			st := kit.open(t)
			rec := &recStore{Store: st}
			c := testCatalog(t, rec, nil)
			known := must(c.Upsert(ctx, Entry{Group: "r", Name: "known", DisplayName: "Known"}))
			cached := must(c.Lookup(ctx, Key{"r", "cached"}))
			gets0, gm0, fills0 := rec.counts()

			var keys []Key
			for i := range 30 {
				keys = append(keys, []Key{{"r", "known"}, {"r", "cached"}, {"r", fmt.Sprint("new-", i%5)}, {"", "bad"}}[i%4])
			}
			out := make([]Result, len(keys))
			c.Resolve(ctx, keys, out)
			gets, gm, fills := rec.counts()
			if gm-gm0 != 1 || gets != gets0 {
				t.Fatalf("Resolve made %d GetMany and %d Get calls, want 1 and 0", gm-gm0, gets-gets0)
			}
			if got := rec.getManyKeys[len(rec.getManyKeys)-1]; len(got) != 1+5 {
				t.Fatalf("GetMany asked for %v, want the distinct misses r/known and r/new-0..4", got)
			}
			if fills-fills0 != 5 {
				t.Fatalf("%d fills, want one per distinct new key (5)", fills-fills0)
			}
			newCodes := map[Key]int64{}
			for i, r := range out {
				k := keys[i]
				switch {
				case k.Group == "":
					isErr(t, r.Err, ErrInvalid)
				case r.Err != nil || !r.Found:
					t.Fatalf("key %v: %+v", k, r)
				case k.Name == "known" && r.Entry.Code != known.Code:
					t.Fatalf("known: %+v, want code %d", r, known.Code)
				case k.Name == "cached" && r.Entry.Code != cached.Code:
					t.Fatalf("cached: %+v, want code %d", r, cached.Code)
				case k.Name != "known" && k.Name != "cached":
					if c, ok := newCodes[k]; ok && c != r.Entry.Code {
						t.Fatalf("two codes for %v in one request: %d, %d", k, c, r.Entry.Code)
					}
					newCodes[k] = r.Entry.Code
				}
			}
			// All cached now: no round trip at all.
			c.Resolve(ctx, keys, out)
			if g, gm2, f := rec.counts(); g != gets || gm2 != gm || f != fills {
				t.Fatal("a second Resolve of cached keys went to the store")
			}

			// Mode warn: absent keys are answered as not found, and then from the cache.
			w := testCatalog(t, &recStore{Store: st}, func(c *Config) { c.Mode = ModeWarn })
			out = make([]Result, 2)
			w.Resolve(ctx, []Key{{"r", "unplanned"}, {"r", "known"}}, out)
			if out[0].Found || out[0].Err != nil || !out[1].Found {
				t.Fatalf("warn mode: %+v", out)
			}
		})
	}
}

// TestCacheBounded: the cache never holds more than its size; entries and
// known-absent keys expire after their TTLs.
func TestCacheBounded(t *testing.T) {
	st := boltKit(t).open(t)
	rec := &recStore{Store: st}
	c := testCatalog(t, rec, func(c *Config) { c.CacheSize = 10; c.CacheTTL = time.Minute; c.AbsentTTL = time.Second })
	ctx := context.Background()
	for i := range 100 {
		must(c.Lookup(ctx, keyN(i)))
		if n := c.hits.len(); n > 10 {
			t.Fatalf("cache holds %d entries after %d lookups, more than its size 10", n, i+1)
		}
	}
	if n := c.hits.len(); n != 10 {
		t.Fatalf("cache holds %d entries, want 10", n)
	}
	// The most recent ten are cached; an older one is not.
	gets, _, _ := rec.counts()
	must(c.Lookup(ctx, keyN(99)))
	if g, _, _ := rec.counts(); g != gets {
		t.Fatal("a recent key was not cached")
	}
	must(c.Lookup(ctx, keyN(0)))
	if g, _, _ := rec.counts(); g != gets+1 {
		t.Fatal("an evicted key was answered without the store")
	}

	// TTL: a fake clock.
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c.hits.now, c.absent.now = clock, clock
	k := Key{"ttl", "k"}
	must(c.Lookup(ctx, k))
	gets, _, _ = rec.counts()
	advance(59 * time.Second)
	must(c.Lookup(ctx, k))
	if g, _, _ := rec.counts(); g != gets {
		t.Fatal("an entry within its TTL went to the store")
	}
	advance(2 * time.Second)
	must(c.Lookup(ctx, k))
	if g, _, _ := rec.counts(); g != gets+1 {
		t.Fatal("an entry past its TTL was answered from the cache")
	}

	// Absent keys (mode warn), with their own, shorter TTL.
	w := testCatalog(t, rec, func(c *Config) { c.Mode = ModeWarn; c.CacheSize = 10; c.AbsentTTL = time.Second })
	w.hits.now, w.absent.now = clock, clock
	for i := range 50 {
		_, err := w.Lookup(ctx, Key{"absent", fmt.Sprint(i)})
		isErr(t, err, ErrNotFound)
		if n := w.absent.len(); n > 10 {
			t.Fatalf("absent cache holds %d keys, more than 10", n)
		}
	}
	a := Key{"absent", "49"}
	gets, _, _ = rec.counts()
	_, err := w.Lookup(ctx, a)
	isErr(t, err, ErrNotFound)
	if g, _, _ := rec.counts(); g != gets {
		t.Fatal("a key known absent went to the store")
	}
	advance(1100 * time.Millisecond)
	_, err = w.Lookup(ctx, a)
	isErr(t, err, ErrNotFound)
	if g, _, _ := rec.counts(); g != gets+1 {
		t.Fatal("a key past its absent TTL was answered from the cache")
	}
}

// TestInvalidation: an Upsert drops the entry from the local cache, and a
// Put through another instance's store from this one's (Redis watch).
func TestInvalidation(t *testing.T) {
	ctx := context.Background()
	t.Run("local", func(t *testing.T) {
		c := testCatalog(t, boltKit(t).open(t), func(c *Config) { c.CacheTTL = time.Hour; c.Mode = ModeWarn })
		k := Key{"inv", "local"}
		_, err := c.Lookup(ctx, k)
		isErr(t, err, ErrNotFound) // now known absent
		must(c.Upsert(ctx, Entry{Group: k.Group, Name: k.Name, DisplayName: "One"}))
		if e := must(c.Lookup(ctx, k)); e.DisplayName != "One" {
			t.Fatalf("after Upsert: %+v", e)
		}
		must(c.Upsert(ctx, Entry{Group: k.Group, Name: k.Name, DisplayName: "Two"}))
		if e := must(c.Lookup(ctx, k)); e.DisplayName != "Two" {
			t.Fatalf("after the second Upsert: %+v, want display name Two", e)
		}
		if e := must(c.Block(ctx, k)); e.Status != StatusBlocked || e.DisplayName != "Two" {
			t.Fatalf("Block: %+v", e)
		}
		if e := must(c.Lookup(ctx, k)); e.Status != StatusBlocked {
			t.Fatalf("after Block: %+v", e)
		}
	})
	t.Run("redis", func(t *testing.T) {
		kit := redisKit(t, testkit.Redis(t), time.Second, time.Second)
		a := testCatalog(t, kit.open(t), func(c *Config) { c.CacheTTL = time.Hour; c.AbsentTTL = time.Hour; c.Mode = ModeWarn })
		b := testCatalog(t, kit.open(t), nil)
		k := Key{"inv", "remote"}
		_, err := a.Lookup(ctx, k)
		isErr(t, err, ErrNotFound) // a: known absent for an hour
		must(b.Lookup(ctx, k))     // b fills it
		testkit.WaitFor(t, 5*time.Second, "a to see b's fill", func() bool {
			_, err := a.Lookup(ctx, k)
			return err == nil
		})
		must(b.Upsert(ctx, Entry{Group: k.Group, Name: k.Name, DisplayName: "Remote"}))
		testkit.WaitFor(t, 5*time.Second, "a to see b's Upsert", func() bool {
			e, err := a.Lookup(ctx, k)
			return err == nil && e.DisplayName == "Remote"
		})
		must(b.Block(ctx, k))
		testkit.WaitFor(t, 5*time.Second, "a to see b's Block", func() bool {
			e, err := a.Lookup(ctx, k)
			return err == nil && e.Status == StatusBlocked
		})
	})
}

// TestMetrics: the counters count, and register on a registry.
func TestMetrics(t *testing.T) {
	kit := redisKit(t, testkit.Redis(t), time.Second, time.Second)
	reg := prometheus.NewPedanticRegistry()
	cfg := DefaultConfig()
	c := New(kit.open(t), cfg, nil, reg)
	defer c.Close()
	ctx := context.Background()
	must(c.Lookup(ctx, Key{"m", "a"}))
	must(c.Lookup(ctx, Key{"m", "a"}))
	if h, m, f := testutil.ToFloat64(c.m.hits), testutil.ToFloat64(c.m.misses), testutil.ToFloat64(c.m.fills); h != 1 || m != 1 || f != 1 {
		t.Fatalf("hits %v misses %v fills %v, want 1 1 1", h, m, f)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n != 6 {
		t.Fatalf("gathered %d metrics (%v), want 6", n, err)
	}
}
