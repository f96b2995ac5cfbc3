package catalog

import (
	"fmt"
	"testing"
	"time"
)

// TestLRUEpoch: a load that read the store before an invalidation of its
// key is not cached; loads of keys of other shards are.
func TestLRUEpoch(t *testing.T) {
	c := newLRU[Key, int](100, time.Minute)
	k := Key{"e", "k"}
	e := c.epoch(k)
	c.remove(k)
	c.addIfEpoch(k, 1, e)
	if _, ok := c.get(k); ok {
		t.Fatal("a load from before an invalidation was cached")
	}
	var other Key
	for i := 0; ; i++ {
		other = Key{"e", fmt.Sprint(i)}
		if c.shard(other) != c.shard(k) {
			break
		}
	}
	e, eo := c.epoch(k), c.epoch(other)
	c.remove(k)
	c.addIfEpoch(other, 2, eo)
	if v, ok := c.get(other); !ok || v != 2 {
		t.Fatal("an invalidation of one key spoiled the load of another shard's key")
	}
	c.addIfEpoch(k, 3, c.epoch(k))
	if v, ok := c.get(k); !ok || v != 3 {
		t.Fatal("a load after the invalidation was not cached")
	}
	_ = e
	eo = c.epoch(other)
	c.purge()
	c.addIfEpoch(other, 4, eo)
	if c.len() != 0 {
		t.Fatal("a load from before a purge was cached")
	}
}
