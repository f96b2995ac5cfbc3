package routes

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// overflow limits each key to a rate; events of a key over it go to the
// overflow topic. Its table holds at most Keys keys: a new key past that
// evicts the least recently seen one (which starts afresh, with a full
// burst, if it comes back). Safe for concurrent use.
type overflow struct {
	Overflow
	field field
	stats *Stats
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element // of *limiter
	lru  list.List                // front: most recently seen
}

type limiter struct {
	key string
	lim *rate.Limiter
}

func newOverflow(o *Overflow, s *Stats, now func() time.Time) *overflow {
	ov := &overflow{Overflow: *o, stats: s, now: now, keys: map[string]*list.Element{}}
	ov.field, _ = fieldOf(o.Key, fUID)
	if ov.Burst == 0 {
		ov.Burst = max(1, int(ov.Rate))
	}
	if ov.Keys == 0 {
		ov.Keys = DefaultOverflowKeys
	}
	return ov
}

// over reports whether in's key is over its rate, charging it one event.
// An event without the key is never over.
func (o *overflow) over(in *Input) bool {
	var k []byte
	if o.field == fClient {
		k = []byte(in.Client)
	} else {
		k = in.field(o.field)
	}
	if len(k) == 0 {
		return false
	}
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.keys[string(k)]
	if ok {
		o.lru.MoveToFront(e)
	} else {
		if o.lru.Len() >= o.Keys {
			old := o.lru.Back()
			delete(o.keys, old.Value.(*limiter).key)
			o.lru.Remove(old)
		}
		l := &limiter{key: string(k), lim: rate.NewLimiter(rate.Limit(o.Rate), o.Burst)}
		e = o.lru.PushFront(l)
		o.keys[l.key] = e
	}
	return !e.Value.(*limiter).lim.AllowN(now, 1)
}

// size is how many keys the table holds.
func (o *overflow) size() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lru.Len()
}
