package webui

import (
	"sync"
	"sync/atomic"
	"time"
)

// Item is one record the gateway acknowledged, as the live page shows it.
// Value is the record's value, not copied: the gateway's records are never
// changed after its sink took them (ingest.Sink), so Item only reads it.
type Item struct {
	Name  string // event name; "" for a rejected event
	Key   string // uid, else anon_id, else id
	ID    string
	Topic string
	// Value is the enriched event JSON; for a rejected event, what the
	// client sent, which the page shows only with
	// Config.ShowRejectedContent (nil is fine then).
	Value  []byte
	At     time.Time
	Reject *Rejection // set for a dead-lettered event
	// Delivery says what the ack mode knows of the record's place in
	// Kafka when the page sees it (e.g. "in the spool; forwarded later").
	Delivery string
	// Partition and Offset are the record's place in Kafka; Offset is -1
	// when it is not known (yet).
	Partition int32
	Offset    int64
}

// Rejection is why an event was dead-lettered.
type Rejection struct{ Reason, Error string }

// Live fans the gateway's acknowledged records out to the live pages open
// now. Publish never blocks and costs one atomic load while no page is
// open. Each page has a queue of its own, bounded (Config.ViewerBuffer):
// when a page reads too slowly, the records that do not fit are skipped
// and counted, and the page is told how many it missed, so it sees a
// sample; at most Config.MaxViewers pages are open at once. Counters and
// rates per event name are kept while a page is open. It is safe for
// concurrent use.
type Live struct {
	cfg     Config
	viewers atomic.Int32 // len(subs), read without mu by Publish

	mu   sync.RWMutex // guards subs
	subs map[*viewer]struct{}

	statsMu sync.Mutex // guards stats; never held with mu
	stats   map[string]*counter
	since   time.Time
}

// maxNames bounds the event names counted; more share the name "(other)".
const maxNames = 200

// rateWindow is the seconds of the sparkline.
const rateWindow = 60

// counter is one event name's total and its per-second counts.
type counter struct {
	total    uint64
	rejected bool
	buckets  [rateWindow]uint32
	sec      int64 // the second of buckets[sec%rateWindow]
}

func (c *counter) add(sec int64, n uint32) {
	c.advance(sec)
	c.buckets[sec%rateWindow] += n
	c.total += uint64(n)
}

// advance clears the buckets of the seconds between c.sec and sec.
func (c *counter) advance(sec int64) {
	if sec <= c.sec {
		return
	}
	for s := c.sec + 1; s <= sec && s <= c.sec+rateWindow; s++ {
		c.buckets[s%rateWindow] = 0
	}
	c.sec = sec
}

// viewer is one open live page.
type viewer struct {
	ch      chan Item
	skipped atomic.Uint64
	name    string // filter: event name, "" for all
	user    string // filter: key (uid or anon_id), "" for all
}

// NewLive returns a hub with cfg's bounds.
func NewLive(cfg Config) *Live {
	return &Live{cfg: cfg, subs: map[*viewer]struct{}{}, stats: map[string]*counter{}}
}

// Watching reports whether a live page is open: without one, Publish does
// nothing, and a caller can skip building items.
func (l *Live) Watching() bool { return l.viewers.Load() > 0 }

// Publish hands items to every open page whose filter they pass, without
// blocking: a page whose queue is full misses them (counted). Items must
// not change afterwards.
func (l *Live) Publish(items []Item) {
	if !l.Watching() || len(items) == 0 {
		return
	}
	l.count(items)
	l.mu.RLock()
	defer l.mu.RUnlock()
	for v := range l.subs {
		for i := range items {
			it := &items[i]
			if (v.name != "" && v.name != it.Name) || (v.user != "" && v.user != it.Key) {
				continue
			}
			select {
			case v.ch <- *it:
			default:
				v.skipped.Add(1)
			}
		}
	}
}

func (l *Live) count(items []Item) {
	sec := time.Now().Unix()
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	for i := range items {
		name, rej := items[i].Name, items[i].Reject != nil
		if rej {
			name = "rejected: " + items[i].Reject.Reason
		}
		c := l.stats[name]
		if c == nil {
			if len(l.stats) >= maxNames {
				name = "(other)"
				c = l.stats[name]
			}
			if c == nil {
				c = &counter{sec: sec, rejected: rej}
				l.stats[name] = c
			}
		}
		c.add(sec, 1)
	}
}

// errTooManyViewers is returned by subscribe past Config.MaxViewers.
type tooManyViewers struct{ max int }

func (e tooManyViewers) Error() string { return "too many live pages are open" }

// subscribe opens a page's queue, or fails past MaxViewers. The first
// page starts the counters afresh.
func (l *Live) subscribe(name, user string) (*viewer, error) {
	v := &viewer{ch: make(chan Item, l.cfg.ViewerBuffer), name: name, user: user}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.subs) >= l.cfg.MaxViewers {
		return nil, tooManyViewers{l.cfg.MaxViewers}
	}
	if len(l.subs) == 0 {
		l.statsMu.Lock()
		l.stats, l.since = map[string]*counter{}, time.Now()
		l.statsMu.Unlock()
	}
	l.subs[v] = struct{}{}
	l.viewers.Store(int32(len(l.subs)))
	return v, nil
}

// unsubscribe closes a page's queue.
func (l *Live) unsubscribe(v *viewer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs, v)
	l.viewers.Store(int32(len(l.subs)))
}

// NameStats is one event name's counters, for the page.
type NameStats struct {
	Name     string   `json:"name"`
	Total    uint64   `json:"total"`
	Rejected bool     `json:"rejected,omitempty"`
	Rate     []uint32 `json:"rate"` // per second, oldest first, the last rateWindow seconds
}

// Stats returns the counters since the first open page, and when that was.
func (l *Live) Stats() ([]NameStats, time.Time) {
	sec := time.Now().Unix()
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	out := make([]NameStats, 0, len(l.stats))
	for name, c := range l.stats {
		c.advance(sec)
		ns := NameStats{Name: name, Total: c.total, Rejected: c.rejected, Rate: make([]uint32, rateWindow)}
		for i := range rateWindow {
			ns.Rate[i] = c.buckets[(sec+1+int64(i))%rateWindow]
		}
		out = append(out, ns)
	}
	return out, l.since
}
