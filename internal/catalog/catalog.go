package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
)

// Catalog is the event catalog as ingest and the RPC services use it: a
// Store behind a bounded in-memory cache of entries (and, in modes warn
// and block, of keys known to be absent), with one store round trip per
// key at a time in the process (singleflight). It is safe for concurrent
// use.
type Catalog struct {
	store Store
	cfg   Config
	log   *slog.Logger
	now   func() time.Time

	hits    *lru[Key, Entry]
	absent  *lru[Key, struct{}]
	schemas *lru[schemaKey, *compiled]
	flight  singleflight.Group

	stopWatch func()
	closeOnce sync.Once
	closeErr  error

	m        metrics
	compiles atomic.Int64 // schemas compiled, for tests
}

type metrics struct {
	hits, misses, fills, storeErrors prometheus.Counter
}

// Result is one key's answer of Resolve.
type Result struct {
	// Entry is the key's entry when Found.
	Entry Entry
	// Found: the catalog has (or, in mode open, now has) the key.
	Found bool
	// Err is why the key could not be looked up (ErrUnavailable,
	// ErrInvalid); nil when the key was looked up, found or not.
	Err error
}

// New returns a Catalog on store with cfg's cache, mode and timeouts; it
// takes store over (Close closes it). log and reg may be nil. When the
// store is a Watcher, entries other instances change are dropped from the
// cache as the store announces them.
func New(store Store, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Catalog {
	def := DefaultConfig()
	if cfg.Mode == "" {
		cfg.Mode = def.Mode
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = def.CacheSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = def.CacheTTL
	}
	if cfg.AbsentTTL <= 0 {
		cfg.AbsentTTL = def.AbsentTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.LockWait <= 0 {
		cfg.LockWait = def.LockWait
	}
	if cfg.FillConcurrency <= 0 {
		cfg.FillConcurrency = def.FillConcurrency
	}
	if cfg.DefaultGroup == "" {
		cfg.DefaultGroup = def.DefaultGroup
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Catalog{
		store:   store,
		cfg:     cfg,
		log:     log,
		now:     time.Now,
		hits:    newLRU[Key, Entry](cfg.CacheSize, cfg.CacheTTL),
		absent:  newLRU[Key, struct{}](cfg.CacheSize, cfg.AbsentTTL),
		schemas: newLRU[schemaKey, *compiled](schemaCacheSize, 24*time.Hour),
		m: metrics{
			hits: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "inlet_catalog_cache_hits_total",
				Help: "Catalog lookups answered from the in-memory cache (entries and known-absent keys).",
			}),
			misses: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "inlet_catalog_cache_misses_total",
				Help: "Catalog lookups the cache could not answer, which went to the store.",
			}),
			fills: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "inlet_catalog_fills_total",
				Help: "First-sight fills this instance asked the store for (mode open).",
			}),
			storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "inlet_catalog_store_errors_total",
				Help: "Catalog store calls that failed (unreachable, timed out, lock wait over).",
			}),
		},
	}
	if reg != nil {
		reg.MustRegister(c.m.hits, c.m.misses, c.m.fills, c.m.storeErrors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "inlet_catalog_cache_entries",
				Help: "Catalog entries in the in-memory cache.",
			}, func() float64 { return float64(c.hits.len()) }))
		if lw, ok := store.(interface{ LockWaits() uint64 }); ok {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "inlet_catalog_lock_waits_total",
				Help: "First-sight fills that found another instance holding the fill lock and waited for it.",
			}, func() float64 { return float64(lw.LockWaits()) }))
		}
	}
	if w, ok := store.(Watcher); ok {
		c.stopWatch = w.Watch(c.invalidate)
	}
	return c
}

// Mode is the catalog's mode.
func (c *Catalog) Mode() Mode { return c.cfg.Mode }

// DefaultGroup is the group of events that name none.
func (c *Catalog) DefaultGroup() string { return c.cfg.DefaultGroup }

// Store is the catalog's store.
func (c *Catalog) Store() Store { return c.store }

// invalidate drops k (the zero Key: everything) from the caches.
func (c *Catalog) invalidate(k Key) {
	if k == (Key{}) {
		c.hits.purge()
		c.absent.purge()
		return
	}
	c.hits.remove(k)
	c.absent.remove(k)
}

// cached answers k from the cache: found, or known absent (modes warn and
// block), or neither (ok false).
func (c *Catalog) cached(k Key) (e Entry, found, ok bool) {
	if e, hit := c.hits.get(k); hit {
		c.m.hits.Inc()
		return e, true, true
	}
	if c.cfg.Mode != ModeOpen {
		if _, hit := c.absent.get(k); hit {
			c.m.hits.Inc()
			return Entry{}, false, true
		}
	}
	return Entry{}, false, false
}

func (c *Catalog) countErr(err error) error {
	if err != nil && !errors.Is(err, ErrNotFound) {
		c.m.storeErrors.Inc()
	}
	return err
}

// storeCtx is a context for one store call on behalf of ctx: its values,
// not its cancellation (other callers may share the call), and at most d.
func storeCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

func (c *Catalog) fillTimeout() time.Duration { return c.cfg.LockWait + 3*c.cfg.Timeout }

// Lookup returns k's entry: from the cache, else from the store (one call
// per key at a time in the process). When the store has none, mode open
// fills it (the next code, status observed); modes warn and block return
// ErrNotFound. ErrUnavailable when the store cannot answer within the
// timeout (a fill: within the lock wait too).
func (c *Catalog) Lookup(ctx context.Context, k Key) (Entry, error) {
	return c.lookup(ctx, k, c.cfg.Mode == ModeOpen)
}

// Get is Lookup without a fill in any mode: ErrNotFound when absent.
func (c *Catalog) Get(ctx context.Context, k Key) (Entry, error) {
	return c.lookup(ctx, k, false)
}

func (c *Catalog) lookup(ctx context.Context, k Key, fill bool) (Entry, error) {
	if err := ValidateKey(k); err != nil {
		return Entry{}, err
	}
	if e, found, ok := c.cached(k); ok {
		if !found {
			return Entry{}, fmt.Errorf("%w: %s/%s", ErrNotFound, k.Group, k.Name)
		}
		return e, nil
	}
	c.m.misses.Inc()
	flightKey := "g\x00" + member(k)
	if fill {
		flightKey = "f\x00" + member(k)
	}
	ch := c.flight.DoChan(flightKey, func() (any, error) {
		hitEpoch, absentEpoch := c.hits.epoch(k), c.absent.epoch(k)
		// A flight that just ended may have cached k: no second round trip.
		if e, found, ok := c.cached(k); ok {
			if !found {
				return Entry{}, fmt.Errorf("%w: %s/%s", ErrNotFound, k.Group, k.Name)
			}
			return e, nil
		}
		sctx, cancel := storeCtx(ctx, c.cfg.Timeout)
		e, err := c.store.Get(sctx, k)
		cancel()
		if errors.Is(err, ErrNotFound) && fill {
			return c.fill(ctx, k, hitEpoch)
		}
		if errors.Is(err, ErrNotFound) && c.cfg.Mode != ModeOpen {
			c.absent.addIfEpoch(k, struct{}{}, absentEpoch)
		}
		if err != nil {
			return Entry{}, c.countErr(err)
		}
		c.hits.addIfEpoch(k, e, hitEpoch)
		return e, nil
	})
	select {
	case r := <-ch:
		return r.Val.(Entry), r.Err
	case <-ctx.Done():
		return Entry{}, fmt.Errorf("%w: looking up %s/%s: %v", ErrUnavailable, k.Group, k.Name, ctx.Err())
	}
}

// fill asks the store to fill k and caches the answer.
func (c *Catalog) fill(ctx context.Context, k Key, epoch uint64) (Entry, error) {
	c.m.fills.Inc()
	sctx, cancel := storeCtx(ctx, c.fillTimeout())
	defer cancel()
	e, err := c.store.Fill(sctx, k, c.now().UTC())
	if err != nil {
		return Entry{}, c.countErr(err)
	}
	c.hits.addIfEpoch(k, e, epoch)
	return e, nil
}

// Resolve looks up a request's keys at once and writes keys[i]'s answer to
// out[i] (out must be at least as long as keys): cache hits first, then all
// misses in ONE store GetMany, then, in mode open, one fill per distinct
// new key (a few at a time, shared with concurrent Lookups of the same
// key). A store that cannot answer sets Err (ErrUnavailable) on the keys it
// could not answer; an invalid key gets ErrInvalid.
func (c *Catalog) Resolve(ctx context.Context, keys []Key, out []Result) {
	out = out[:len(keys)]
	var (
		miss []Key
		at   map[Key][]int
	)
	for i, k := range keys {
		if err := ValidateKey(k); err != nil {
			out[i] = Result{Err: err}
			continue
		}
		if e, found, ok := c.cached(k); ok {
			out[i] = Result{Entry: e, Found: found}
			continue
		}
		if at == nil {
			at = make(map[Key][]int)
		}
		if _, seen := at[k]; !seen {
			miss = append(miss, k)
			c.m.misses.Inc()
		}
		at[k] = append(at[k], i)
	}
	if len(miss) == 0 {
		return
	}
	set := func(k Key, r Result) {
		for _, i := range at[k] {
			out[i] = r
		}
	}
	hitEpochs, absentEpochs := make([]uint64, len(miss)), make([]uint64, len(miss))
	for i, k := range miss {
		hitEpochs[i], absentEpochs[i] = c.hits.epoch(k), c.absent.epoch(k)
	}
	sctx, cancel := storeCtx(ctx, c.cfg.Timeout)
	entries, found, err := c.store.GetMany(sctx, miss)
	cancel()
	if err != nil {
		c.countErr(err)
		for _, k := range miss {
			set(k, Result{Err: err})
		}
		return
	}
	var toFill []int
	for i, k := range miss {
		switch {
		case found[i]:
			c.hits.addIfEpoch(k, entries[i], hitEpochs[i])
			set(k, Result{Entry: entries[i], Found: true})
		case c.cfg.Mode == ModeOpen:
			toFill = append(toFill, i)
		default:
			c.absent.addIfEpoch(k, struct{}{}, absentEpochs[i])
			set(k, Result{})
		}
	}
	if len(toFill) == 0 {
		return
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, c.cfg.FillConcurrency)
	)
	for _, i := range toFill {
		k, epoch := miss[i], hitEpochs[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var r Result
			ch := c.flight.DoChan("f\x00"+member(k), func() (any, error) { return c.fill(ctx, k, epoch) })
			select {
			case v := <-ch:
				r = Result{Entry: v.Val.(Entry), Found: v.Err == nil, Err: v.Err}
			case <-ctx.Done():
				r = Result{Err: fmt.Errorf("%w: filling %s/%s: %v", ErrUnavailable, k.Group, k.Name, ctx.Err())}
			}
			mu.Lock()
			set(k, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// List returns up to limit entries after the key after, in (group, name)
// order, from the store; group "" lists every group. limit is clamped to
// 1..10000 (0: 100).
func (c *Catalog) List(ctx context.Context, group string, after Key, limit int) ([]Entry, error) {
	switch {
	case limit <= 0:
		limit = 100
	case limit > 10_000:
		limit = 10_000
	}
	sctx, cancel := storeCtx(ctx, c.cfg.Timeout)
	defer cancel()
	es, err := c.store.List(sctx, group, after, limit)
	return es, c.countErr(err)
}

// Upsert writes e to the catalog: an existing key keeps its code and
// created time, a new one gets the next code. Status "" means planned. The
// group, name, status and schema (which must compile) are checked first
// (ErrInvalid). The entry is dropped from every instance's cache.
func (c *Catalog) Upsert(ctx context.Context, e Entry) (Entry, error) {
	e, err := c.prepare(e)
	if err != nil {
		return Entry{}, err
	}
	sctx, cancel := storeCtx(ctx, c.cfg.Timeout)
	defer cancel()
	out, err := c.store.Put(sctx, e)
	c.invalidate(e.Key())
	if err != nil {
		return Entry{}, c.countErr(err)
	}
	return out, nil
}

// prepare checks e for Upsert and Update, and stamps it updated now.
func (c *Catalog) prepare(e Entry) (Entry, error) {
	if err := ValidateKey(e.Key()); err != nil {
		return Entry{}, err
	}
	if e.Status == "" {
		e.Status = StatusPlanned
	}
	if !validStatus(e.Status) {
		return Entry{}, fmt.Errorf("%w: status %q: want planned, observed or blocked", ErrInvalid, e.Status)
	}
	if isNullSchema(e.Schema) {
		e.Schema = nil
	}
	if e.Schema != nil {
		if _, err := compileSchema(e.Schema); err != nil {
			return Entry{}, fmt.Errorf("%w: the schema of %s/%s: %v", ErrInvalid, e.Group, e.Name, err)
		}
	}
	e.Updated = c.now().UTC()
	e.Code, e.Created = 0, time.Time{}
	return e, nil
}

// Update changes k's entry with fn in one atomic read-modify-write of the
// store, so that two changes of different fields made at once both hold:
// fn gets the entry as stored (found false: none, and e holds only k) and
// returns it changed, checked as Upsert checks it. fn may run more than
// once (when another write to k came in between) and must have no side
// effects; its error is returned as it is. The entry is dropped from every
// instance's cache.
func (c *Catalog) Update(ctx context.Context, k Key, fn func(e Entry, found bool) (Entry, error)) (Entry, error) {
	if err := ValidateKey(k); err != nil {
		return Entry{}, err
	}
	var own error // an error of fn or prepare, not of the store
	sctx, cancel := storeCtx(ctx, c.cfg.Timeout)
	defer cancel()
	out, err := c.store.Update(sctx, k, func(old Entry, found bool) (Entry, error) {
		e, err := fn(old, found)
		if err == nil {
			e, err = c.prepare(e)
		}
		own = err
		return e, err
	})
	c.invalidate(k)
	switch {
	case err != nil && own != nil && errors.Is(err, own):
		return Entry{}, err
	case err != nil:
		return Entry{}, c.countErr(err)
	}
	return out, nil
}

// Block sets k's status to blocked (creating the entry when the catalog
// has none): ingest rejects its events in every mode. Its other fields are
// kept, whatever is written at the same time.
func (c *Catalog) Block(ctx context.Context, k Key) (Entry, error) {
	return c.Update(ctx, k, func(e Entry, _ bool) (Entry, error) {
		e.Status = StatusBlocked
		return e, nil
	})
}

// Close stops watching the store and closes it.
func (c *Catalog) Close() error {
	c.closeOnce.Do(func() {
		if c.stopWatch != nil {
			c.stopWatch()
		}
		c.closeErr = c.store.Close()
	})
	return c.closeErr
}

// Cached returns k's entry when the in-memory cache has it: the answer
// Lookup and Get would give at once, without waiting on anything (so the
// caller needs no deadline for it). A miss (or an invalid key) is false:
// ask Lookup or Get.
func (c *Catalog) Cached(k Key) (Entry, bool) {
	if ValidateKey(k) != nil {
		return Entry{}, false
	}
	e, hit := c.hits.get(k)
	if hit {
		c.m.hits.Inc()
	}
	return e, hit
}
