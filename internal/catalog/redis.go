package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configure a RedisStore.
type RedisOptions struct {
	// Addr is Redis's host:port.
	Addr string
	// Prefix starts every key the store uses (default "inlet:catalog:").
	Prefix string
	// Timeout bounds dialing, reading and writing one command (default
	// 500ms); with one retry, an unreachable Redis fails a command within
	// about twice it rather than after go-redis's long default retries.
	Timeout time.Duration
	// LockTTL is the fill lock's lifetime (default 5s).
	LockTTL time.Duration
	// LockWait bounds how long Fill waits for another holder's lock
	// (default 10s).
	LockWait time.Duration
}

// RedisStore is the catalog in Redis, shared by every inlet instance that
// names the same Redis and prefix. Under the prefix:
//
//	e:<len(group)>:<group>:<name>  an entry: a JSON document
//	seq                            the code counter (INCR: codes start at 1)
//	idx                            a sorted set of "<group>\x00<name>", all score 0: List's order
//	lock:<...>                     a fill lock (SET NX PX, random token)
//	events                         a pub/sub channel: "<origin>\x00<member>" of every entry put or filled
//
// An entry and its index member are written by one Lua script, which also
// takes the code from the counter, so no crash leaves half an entry or two
// codes for one key; a crash between INCR and the write is impossible for
// the same reason (a code a script took and never wrote would only be
// skipped, never reused).
type RedisStore struct {
	rdb      *redis.Client
	prefix   string
	lockTTL  time.Duration
	lockWait time.Duration

	origin    string // announcements of this store start with it
	ps        *redis.PubSub
	subDone   chan struct{}
	lockWaits atomic.Uint64

	mu       sync.Mutex
	waiters  map[string]map[chan struct{}]struct{}
	watchers map[int]func(Key)
	nextW    int
}

// afterLock, when set (by tests), is called once Fill holds the lock and
// before it writes: the seam where a test kills the holder.
var afterLock func(Key)

// putScript writes an entry and its index member and announces it.
// KEYS: entry, seq, idx. ARGV: mode ("fill": leave an existing entry
// alone; "put": replace it, keeping its code and created), created (a JSON
// string), the rest of the document (a JSON object without code and
// created), the index member, the channel, the announcement.
var putScript = redis.NewScript(`
local old = redis.call('GET', KEYS[1])
local code, created
if old then
  if ARGV[1] == 'fill' then return old end
  code, created = string.match(old, '^{"code":(%d+),"created":("[^"]*"),')
  if not code then return redis.error_reply('catalog entry ' .. KEYS[1] .. ' is malformed') end
else
  code = string.format('%d', redis.call('INCR', KEYS[2]))
  created = ARGV[2]
end
local v = '{"code":' .. code .. ',"created":' .. created .. ',' .. string.sub(ARGV[3], 2)
redis.call('SET', KEYS[1], v)
redis.call('ZADD', KEYS[3], 0, ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return v
`)

// unlockScript deletes the lock KEYS[1] only while it holds our token ARGV[1].
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// NewRedisStore returns a store on the Redis at o.Addr. It does not wait
// for Redis: while Redis is unreachable, calls fail with ErrUnavailable.
func NewRedisStore(o RedisOptions) (*RedisStore, error) {
	if o.Addr == "" {
		return nil, errors.New("catalog: the redis store needs an address")
	}
	if o.Prefix == "" {
		o.Prefix = "inlet:catalog:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 5 * time.Second
	}
	if o.LockWait <= 0 {
		o.LockWait = 10 * time.Second
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                  o.Addr,
		DialTimeout:           o.Timeout,
		ReadTimeout:           o.Timeout,
		WriteTimeout:          o.Timeout,
		PoolTimeout:           o.Timeout,
		MaxRetries:            1,
		DialerRetries:         1,
		DialerRetryTimeout:    50 * time.Millisecond,
		MinRetryBackoff:       8 * time.Millisecond,
		MaxRetryBackoff:       64 * time.Millisecond,
		ContextTimeoutEnabled: true,
	})
	var id [8]byte
	_, _ = rand.Read(id[:])
	s := &RedisStore{
		rdb:      rdb,
		origin:   hex.EncodeToString(id[:]),
		prefix:   o.Prefix,
		lockTTL:  o.LockTTL,
		lockWait: o.LockWait,
		subDone:  make(chan struct{}),
		waiters:  map[string]map[chan struct{}]struct{}{},
		watchers: map[int]func(Key){},
	}
	s.ps = rdb.Subscribe(context.Background(), s.channel())
	go s.receive(s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)))
	return s, nil
}

// Client is the store's Redis client (for tests and tools).
func (s *RedisStore) Client() *redis.Client { return s.rdb }

func (s *RedisStore) channel() string { return s.prefix + "events" }
func (s *RedisStore) seqKey() string  { return s.prefix + "seq" }
func (s *RedisStore) idxKey() string  { return s.prefix + "idx" }

func (s *RedisStore) entryKey(k Key) string {
	return s.prefix + "e:" + strconv.Itoa(len(k.Group)) + ":" + k.Group + ":" + k.Name
}

func (s *RedisStore) lockKey(k Key) string {
	return s.prefix + "lock:" + strconv.Itoa(len(k.Group)) + ":" + k.Group + ":" + k.Name
}

// member is k's index member: "\x00" sorts below every character a valid
// group may hold, so members sort in (group, name) order.
func member(k Key) string { return k.Group + "\x00" + k.Name }

func parseMember(m string) (Key, bool) {
	g, n, ok := strings.Cut(m, "\x00")
	return Key{Group: g, Name: n}, ok && g != "" && n != ""
}

// receive dispatches the events channel to fill waiters and watchers.
func (s *RedisStore) receive(ch <-chan any) {
	defer close(s.subDone)
	subscribed := false
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			// The first confirmation is the subscription NewRedisStore
			// asked for; later ones follow a reconnection, across which
			// announcements may have been missed.
			if m.Kind == "subscribe" && subscribed {
				s.notify(Key{}, "", false)
			}
			subscribed = subscribed || m.Kind == "subscribe"
		case *redis.Message:
			origin, mem, _ := strings.Cut(m.Payload, "\x00")
			if k, ok := parseMember(mem); ok {
				s.notify(k, mem, origin == s.origin)
			}
		}
	}
}

func (s *RedisStore) notify(k Key, mem string, own bool) {
	s.mu.Lock()
	var fns []func(Key)
	if !own {
		for _, fn := range s.watchers {
			fns = append(fns, fn)
		}
	}
	for ch := range s.waiters[mem] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(k)
	}
}

// Watch implements Watcher: changed is called with every key put or filled
// through another RedisStore (another instance), and with the zero Key on
// each resubscription after a lost connection. The store's own writes are
// not announced to its watchers: the Catalog drops those itself.
func (s *RedisStore) Watch(changed func(Key)) (stop func()) {
	s.mu.Lock()
	id := s.nextW
	s.nextW++
	s.watchers[id] = changed
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.watchers, id)
		s.mu.Unlock()
	}
}

// LockWaits is how many fills found another holder's lock and waited.
func (s *RedisStore) LockWaits() uint64 { return s.lockWaits.Load() }

func decodeEntry(v string) (Entry, error) {
	var e Entry
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return Entry{}, fmt.Errorf("catalog: a stored entry is malformed: %v", err)
	}
	return e, nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, k Key) (Entry, error) {
	v, err := s.rdb.Get(ctx, s.entryKey(k)).Result()
	if errors.Is(err, redis.Nil) {
		return Entry{}, fmt.Errorf("%w: %s/%s", ErrNotFound, k.Group, k.Name)
	}
	if err != nil {
		return Entry{}, storeErr("redis GET", err)
	}
	return decodeEntry(v)
}

// GetMany implements Store with one MGET.
func (s *RedisStore) GetMany(ctx context.Context, keys []Key) ([]Entry, []bool, error) {
	entries, found := make([]Entry, len(keys)), make([]bool, len(keys))
	if len(keys) == 0 {
		return entries, found, nil
	}
	rk := make([]string, len(keys))
	for i, k := range keys {
		rk[i] = s.entryKey(k)
	}
	vals, err := s.rdb.MGet(ctx, rk...).Result()
	if err != nil {
		return nil, nil, storeErr("redis MGET", err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		e, err := decodeEntry(str)
		if err != nil {
			return nil, nil, err
		}
		entries[i], found[i] = e, true
	}
	return entries, found, nil
}

// restDoc is an entry's document but its code and created, which the put
// script prepends.
type restDoc struct {
	Group       string          `json:"group"`
	Name        string          `json:"name"`
	DisplayName string          `json:"display_name,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Status      Status          `json:"status"`
	Updated     time.Time       `json:"updated"`
}

// putArgs are putScript's keys and arguments for e in mode.
func (s *RedisStore) putArgs(mode string, e Entry) (keys []string, args []any, err error) {
	created, err := json.Marshal(e.Created)
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: encoding created: %v", err)
	}
	rest, err := json.Marshal(restDoc{Group: e.Group, Name: e.Name, DisplayName: e.DisplayName,
		Schema: e.Schema, Status: e.Status, Updated: e.Updated})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: encoding the entry: %v", ErrInvalid, err)
	}
	k := e.Key()
	return []string{s.entryKey(k), s.seqKey(), s.idxKey()},
		[]any{mode, string(created), string(rest), member(k), s.channel(), s.origin + "\x00" + member(k)}, nil
}

func (s *RedisStore) put(ctx context.Context, mode string, e Entry) (Entry, error) {
	keys, args, err := s.putArgs(mode, e)
	if err != nil {
		return Entry{}, err
	}
	v, err := putScript.Run(ctx, s.rdb, keys, args...).Text()
	if err != nil {
		return Entry{}, storeErr("redis put script", err)
	}
	return decodeEntry(v)
}

// maxUpdateTries bounds how often Update reads again after another write
// to its key came in between.
const maxUpdateTries = 100

// Update implements Store as an optimistic transaction: WATCH the entry,
// read it, run fn, and write it with the put script in MULTI/EXEC, which
// fails when the entry was written since the read; then again, up to
// maxUpdateTries times.
func (s *RedisStore) Update(ctx context.Context, k Key, fn func(Entry, bool) (Entry, error)) (Entry, error) {
	key := s.entryKey(k)
	for range maxUpdateTries {
		var (
			out Entry
			own error // an error of fn, or of the store already said as such
		)
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			out, own = s.updateOnce(ctx, tx, k, fn)
			if own != nil {
				return own
			}
			return nil
		}, key)
		switch {
		case own != nil:
			if errors.Is(own, redis.TxFailedErr) {
				continue // written meanwhile: read it again
			}
			return Entry{}, own
		case err != nil:
			return Entry{}, storeErr("redis WATCH", err)
		}
		return out, nil
	}
	return Entry{}, fmt.Errorf("%w: %s/%s was written by others %d times while this update read it", ErrUnavailable, k.Group, k.Name, maxUpdateTries)
}

// updateOnce is one try of Update in the WATCH of tx. Its error is
// redis.TxFailedErr when k was written since the read.
func (s *RedisStore) updateOnce(ctx context.Context, tx *redis.Tx, k Key, fn func(Entry, bool) (Entry, error)) (Entry, error) {
	old, found := Entry{Group: k.Group, Name: k.Name}, false
	v, err := tx.Get(ctx, s.entryKey(k)).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return Entry{}, storeErr("redis GET", err)
	default:
		if old, err = decodeEntry(v); err != nil {
			return Entry{}, err
		}
		found = true
	}
	e, err := fn(old, found)
	if err != nil {
		return Entry{}, err
	}
	if e.Key() != k {
		return Entry{}, fmt.Errorf("%w: an update of %s/%s may not change its key", ErrInvalid, k.Group, k.Name)
	}
	if e.Created.IsZero() {
		e.Created = e.Updated
	}
	keys, args, err := s.putArgs("put", e)
	if err != nil {
		return Entry{}, err
	}
	var put *redis.Cmd
	if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		put = putScript.Eval(ctx, p, keys, args...) // EVAL: a NOSCRIPT inside MULTI could not be retried
		return nil
	}); err != nil {
		if errors.Is(err, redis.TxFailedErr) {
			return Entry{}, err
		}
		return Entry{}, storeErr("redis MULTI/EXEC", err)
	}
	if v, err = put.Text(); err != nil {
		return Entry{}, storeErr("redis put script", err)
	}
	return decodeEntry(v)
}

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, e Entry) (Entry, error) {
	if e.Created.IsZero() {
		e.Created = e.Updated
	}
	return s.put(ctx, "put", e)
}

// Fill implements Store: the entry if it is there; else, holding the fill
// lock of k (SET NX PX, a random token), it reads again and writes the new
// entry. A caller that finds the lock taken waits for the holder's
// announcement on the events channel, or a backoff with jitter, and reads
// again; it takes the lock itself once the holder's expires. Past LockWait
// it fails with ErrUnavailable.
func (s *RedisStore) Fill(ctx context.Context, k Key, now time.Time) (Entry, error) {
	if e, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
		return e, err
	}
	mem := member(k)
	wake := make(chan struct{}, 1)
	s.mu.Lock()
	if s.waiters[mem] == nil {
		s.waiters[mem] = map[chan struct{}]struct{}{}
	}
	s.waiters[mem][wake] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters[mem], wake)
		if len(s.waiters[mem]) == 0 {
			delete(s.waiters, mem)
		}
		s.mu.Unlock()
	}()

	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	lockKey := s.lockKey(k)
	deadline := time.Now().Add(s.lockWait)
	backoff := 5 * time.Millisecond
	waited := false
	for {
		ok, err := s.rdb.SetNX(ctx, lockKey, token, s.lockTTL).Result()
		if err != nil {
			return Entry{}, storeErr("redis SET NX (fill lock)", err)
		}
		if ok {
			return s.fillLocked(ctx, k, now, lockKey, token)
		}
		if !waited {
			waited = true
			s.lockWaits.Add(1)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Entry{}, fmt.Errorf("%w: the fill lock of %s/%s was held by another instance for longer than the lock wait (%v)",
				ErrUnavailable, k.Group, k.Name, s.lockWait)
		}
		d := backoff/2 + mrand.N(backoff)
		if d > left {
			d = left
		}
		t := time.NewTimer(d)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Entry{}, fmt.Errorf("%w: waiting for the fill lock of %s/%s: %v", ErrUnavailable, k.Group, k.Name, ctx.Err())
		}
		t.Stop()
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
		if e, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			return e, err
		}
	}
}

func (s *RedisStore) fillLocked(ctx context.Context, k Key, now time.Time, lockKey, token string) (Entry, error) {
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = unlockScript.Run(uctx, s.rdb, []string{lockKey}, token).Err()
	}()
	if afterLock != nil {
		afterLock(k)
	}
	// Another instance may have filled it between our read and the lock.
	if e, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
		return e, err
	}
	return s.put(ctx, "fill", Entry{Group: k.Group, Name: k.Name, Status: StatusObserved, Created: now, Updated: now})
}

// List implements Store.
func (s *RedisStore) List(ctx context.Context, group string, after Key, limit int) ([]Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	lo, hi := "-", "+"
	if group != "" {
		lo, hi = "["+group+"\x00", "("+group+"\x01"
	}
	if after != (Key{}) {
		a := member(after)
		if group == "" || a >= group+"\x00" {
			lo = "(" + a
		}
	}
	mems, err := s.rdb.ZRangeByLex(ctx, s.idxKey(), &redis.ZRangeBy{Min: lo, Max: hi, Count: int64(limit)}).Result()
	if err != nil {
		return nil, storeErr("redis ZRANGEBYLEX", err)
	}
	keys := make([]Key, 0, len(mems))
	for _, m := range mems {
		if k, ok := parseMember(m); ok {
			keys = append(keys, k)
		}
	}
	entries, found, err := s.GetMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := entries[:0]
	for i, e := range entries {
		if found[i] {
			out = append(out, e)
		}
	}
	return out, nil
}

// Close implements Store.
func (s *RedisStore) Close() error {
	err := s.ps.Close()
	<-s.subDone
	if cerr := s.rdb.Close(); err == nil {
		err = cerr
	}
	return err
}
