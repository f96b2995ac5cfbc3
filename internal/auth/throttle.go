package auth

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"
)

// ErrThrottled is a request refused, before its credentials are looked
// at, because its source address presented bad credentials too often
// lately (HTTP 429 with Retry-After, gRPC ResourceExhausted).
// errors.Is(err, ErrRateLimited) holds for it too; RetryAfter says how
// long to wait.
var ErrThrottled error = &kindError{"auth: too many failed attempts from this address", ErrRateLimited}

// throttleError is ErrThrottled with the time until the address may try
// again.
type throttleError struct{ wait time.Duration }

func (e *throttleError) Error() string {
	return fmt.Sprintf("%v; retry in %v", ErrThrottled, e.wait.Round(time.Second))
}
func (e *throttleError) Unwrap() error { return ErrThrottled }

// RetryAfter is how long a caller refused with err should wait: for
// ErrThrottled, until its address may try again; 0 for other errors.
func RetryAfter(err error) time.Duration {
	var te *throttleError
	if errors.As(err, &te) {
		return te.wait
	}
	return 0
}

// RetryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}

// throttleShards splits the failure table so that failures from many
// addresses do not queue on one lock.
const throttleShards = 16

// failures throttles the source addresses that present bad credentials:
// each address may fail burst times at once, then once per every; past
// that its requests are refused with ErrThrottled (whatever their
// credentials, so that a guess cannot be told right from wrong) until its
// failures have aged out. A GCRA per address: one time each (when its
// failures will all have aged out), nothing for an address in good
// standing. An IPv6 address counts by its /64, which one host usually
// holds whole.
//
// The table is bounded (maxSources addresses in all): an address failing
// while its shard is full takes the place of an address whose failures
// have aged out, else of an arbitrary one, which is forgotten (counted by
// inlet_auth_throttle_evictions_total). An attacker with more addresses
// than the table holds gets some attempts more, never memory. It is safe
// for concurrent use.
type failures struct {
	burst    int
	every    time.Duration
	perShard int
	onEvict  func()
	shards   [throttleShards]failureShard
}

type failureShard struct {
	mu sync.Mutex
	// at is when each address's failures will all have aged out, in
	// unix nanoseconds.
	at map[[16]byte]int64
}

// newFailures returns a table, or nil (no throttling) for burst 0.
func newFailures(burst int, every time.Duration, maxSources int, onEvict func()) *failures {
	if burst <= 0 || every <= 0 {
		return nil
	}
	f := &failures{burst: burst, every: every, perShard: max(1, maxSources/throttleShards), onEvict: onEvict}
	for i := range f.shards {
		f.shards[i].at = make(map[[16]byte]int64)
	}
	return f
}

// key is source's entry, and its shard; ok false for a source that is
// not an IP address (it is not throttled).
func (f *failures) key(source string) (k [16]byte, sh *failureShard, ok bool) {
	a, err := netip.ParseAddr(source)
	if err != nil {
		return k, nil, false
	}
	a = a.Unmap()
	k = a.As16()
	if a.Is6() {
		clear(k[8:]) // the /64
	}
	var h uint32 = 2166136261 // FNV-1a
	for _, b := range k {
		h = (h ^ uint32(b)) * 16777619
	}
	return k, &f.shards[h%throttleShards], true
}

// wait is how long source must wait before it may present credentials
// again: 0 if it may now.
func (f *failures) wait(source string, now time.Time) time.Duration {
	if f == nil {
		return 0
	}
	k, sh, ok := f.key(source)
	if !ok {
		return 0
	}
	sh.mu.Lock()
	at, found := sh.at[k]
	sh.mu.Unlock()
	if !found {
		return 0
	}
	// burst failures at once are allowed: refused past (burst-1)*every of
	// failures still to age out.
	if d := time.Duration(at-now.UnixNano()) - time.Duration(f.burst-1)*f.every; d > 0 {
		return d
	}
	return 0
}

// fail counts one failure of source.
func (f *failures) fail(source string, now time.Time) {
	if f == nil {
		return
	}
	k, sh, ok := f.key(source)
	if !ok {
		return
	}
	n := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	at, found := sh.at[k]
	if !found && len(sh.at) >= f.perShard && sh.evict(n) && f.onEvict != nil {
		f.onEvict()
	}
	sh.at[k] = max(at, n) + int64(f.every)
}

// evict makes room for one address: the first of a few (in the map's
// random order) whose failures have aged out, else the first of them; it
// reports whether that one still had failures to age out.
// sh.mu must be held.
func (sh *failureShard) evict(now int64) bool {
	var first [16]byte
	seen := 0
	for k, at := range sh.at {
		if at <= now {
			delete(sh.at, k)
			return false
		}
		if seen == 0 {
			first = k
		}
		if seen++; seen == 8 {
			break
		}
	}
	delete(sh.at, first)
	return true
}

// len is the addresses in the table (tests, metrics).
func (f *failures) len() int {
	if f == nil {
		return 0
	}
	n := 0
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		n += len(sh.at)
		sh.mu.Unlock()
	}
	return n
}
