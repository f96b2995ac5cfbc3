package catalog

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"
)

// lru is a bounded least-recently-used map whose items expire after a TTL.
// It is safe for concurrent use. A key's epoch (one of epochShards, by the
// key's hash) changes whenever the key is removed, so a loader that read
// the store before an invalidation does not put back what the invalidation
// removed (addIfEpoch); sharding keeps one key's invalidations from
// spoiling every other key's loads.
type lru[K comparable, V any] struct {
	mu     sync.Mutex
	max    int
	ttl    time.Duration
	items  map[K]*list.Element
	order  list.List // front: most recently used
	epochs [epochShards]uint64
	seed   maphash.Seed
	now    func() time.Time
}

const epochShards = 256

type lruItem[K comparable, V any] struct {
	key     K
	val     V
	expires time.Time
}

func newLRU[K comparable, V any](max int, ttl time.Duration) *lru[K, V] {
	return &lru[K, V]{max: max, ttl: ttl, items: make(map[K]*list.Element), seed: maphash.MakeSeed(), now: time.Now}
}

// get returns k's value unless it is absent or expired.
func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	it := el.Value.(*lruItem[K, V])
	if !c.now().Before(it.expires) {
		c.order.Remove(el)
		delete(c.items, k)
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return it.val, true
}

func (c *lru[K, V]) shard(k K) int { return int(maphash.Comparable(c.seed, k) % epochShards) }

// epoch is k's epoch, to hand addIfEpoch.
func (c *lru[K, V]) epoch(k K) uint64 {
	i := c.shard(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epochs[i]
}

// add sets k to v, evicting the least recently used item past max.
func (c *lru[K, V]) add(k K, v V) { c.addIfEpoch(k, v, ^uint64(0)) }

// addIfEpoch adds k unless k may have been removed since epoch was read
// (^0: add regardless).
func (c *lru[K, V]) addIfEpoch(k K, v V, epoch uint64) {
	i := c.shard(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != ^uint64(0) && epoch != c.epochs[i] {
		return
	}
	exp := c.now().Add(c.ttl)
	if el, ok := c.items[k]; ok {
		it := el.Value.(*lruItem[K, V])
		it.val, it.expires = v, exp
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&lruItem[K, V]{key: k, val: v, expires: exp})
	for len(c.items) > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruItem[K, V]).key)
	}
}

// remove drops k.
func (c *lru[K, V]) remove(k K) {
	i := c.shard(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochs[i]++
	if el, ok := c.items[k]; ok {
		c.order.Remove(el)
		delete(c.items, k)
	}
}

// purge drops everything.
func (c *lru[K, V]) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.epochs {
		c.epochs[i]++
	}
	c.items = make(map[K]*list.Element)
	c.order.Init()
}

// len is the number of items, expired ones included.
func (c *lru[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}
