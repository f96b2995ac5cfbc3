package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// storeKit opens instances of one store kind on the same data: for Redis,
// each a client of its own (another inlet instance); for bbolt, the one
// store of the process.
type storeKit struct {
	name string
	open func(t *testing.T) Store
	// redis is the first Redis instance (nil for bbolt).
	redis func() *RedisStore
}

// kits returns a Redis kit (a fresh key prefix on the shared Redis) and a
// bbolt kit (a file in t.TempDir()).
func kits(t *testing.T) []storeKit {
	return []storeKit{redisKit(t, testkit.Redis(t), 2*time.Second, 10*time.Second), boltKit(t)}
}

func redisKit(t *testing.T, addr string, lockTTL, lockWait time.Duration) storeKit {
	prefix := testkit.Unique(t, "inlet-test:catalog:") + ":"
	var first *RedisStore
	t.Cleanup(func() { cleanRedis(t, addr, prefix) })
	return storeKit{
		name: "redis",
		open: func(t *testing.T) Store {
			// Timeouts with a wide margin: the machine may be busy; the
			// tests of timeouts set their own.
			s, err := NewRedisStore(RedisOptions{Addr: addr, Prefix: prefix, Timeout: 3 * time.Second,
				LockTTL: lockTTL, LockWait: lockWait})
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = s
			}
			return s
		},
		redis: func() *RedisStore { return first },
	}
}

// cleanRedis deletes the keys under prefix from the shared Redis.
func cleanRedis(t *testing.T, addr, prefix string) {
	s, err := NewRedisStore(RedisOptions{Addr: addr, Prefix: prefix})
	if err != nil {
		return
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	it := s.rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		s.rdb.Del(ctx, it.Val())
	}
}

type nopClose struct{ Store }

func (nopClose) Close() error { return nil }

func boltKit(t *testing.T) storeKit {
	path := t.TempDir() + "/catalog.db"
	var (
		mu sync.Mutex
		st *BoltStore
	)
	return storeKit{
		name: "bbolt",
		open: func(*testing.T) Store {
			mu.Lock()
			defer mu.Unlock()
			if st == nil {
				s, err := OpenBolt(path)
				if err != nil {
					t.Fatal(err)
				}
				st = s
				t.Cleanup(func() { s.Close() })
			}
			return nopClose{st}
		},
	}
}

// testCatalog returns a Catalog on st, closed at the end of the test.
func testCatalog(t *testing.T, st Store, mod func(*Config)) *Catalog {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Timeout = 3 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	c := New(st, cfg, testkit.Logger(t), nil)
	t.Cleanup(func() { c.Close() })
	return c
}

// recStore counts a store's calls; when gate is set, Get waits for it.
type recStore struct {
	Store
	mu                 sync.Mutex
	gets, getManys     int
	fills, puts, lists int
	getManyKeys        [][]Key
	gate               chan struct{}
}

func (r *recStore) Get(ctx context.Context, k Key) (Entry, error) {
	r.mu.Lock()
	r.gets++
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return r.Store.Get(ctx, k)
}

func (r *recStore) GetMany(ctx context.Context, keys []Key) ([]Entry, []bool, error) {
	r.mu.Lock()
	r.getManys++
	r.getManyKeys = append(r.getManyKeys, append([]Key(nil), keys...))
	r.mu.Unlock()
	return r.Store.GetMany(ctx, keys)
}

func (r *recStore) Fill(ctx context.Context, k Key, now time.Time) (Entry, error) {
	r.mu.Lock()
	r.fills++
	r.mu.Unlock()
	return r.Store.Fill(ctx, k, now)
}

func (r *recStore) Put(ctx context.Context, e Entry) (Entry, error) {
	r.mu.Lock()
	r.puts++
	r.mu.Unlock()
	return r.Store.Put(ctx, e)
}

func (r *recStore) counts() (gets, getManys, fills int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets, r.getManys, r.fills
}

func (r *recStore) Watch(fn func(Key)) func() {
	if w, ok := r.Store.(Watcher); ok {
		return w.Watch(fn)
	}
	return func() {}
}

// must returns v, panicking (failing the test, with the stack) on err. Only
// for the test's own goroutine.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func isErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func keyN(i int) Key { return Key{Group: "g" + fmt.Sprint(i%3), Name: fmt.Sprintf("ev-%03d", i)} }

var _ = os.Getenv
