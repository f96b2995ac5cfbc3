package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestRedisUpdateBoundedRetries: an entry written by another client
// between every read and write of Update makes it give up after
// maxUpdateTries runs of fn with ErrUnavailable, not loop for ever, and
// it writes nothing of its own.
func TestRedisUpdateBoundedRetries(t *testing.T) {
	kit := redisKit(t, testkit.Redis(t), 2*time.Second, 10*time.Second)
	st := kit.open(t)
	defer st.Close()
	other := kit.open(t)
	defer other.Close()
	ctx := context.Background()
	k := Key{"shop", "contended"}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := other.Put(ctx, Entry{Group: k.Group, Name: k.Name, Status: StatusPlanned, Updated: now}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err := st.Update(ctx, k, func(e Entry, _ bool) (Entry, error) {
		calls++
		if _, err := other.Put(ctx, Entry{Group: k.Group, Name: k.Name, Status: StatusPlanned, DisplayName: "other", Updated: now}); err != nil {
			t.Fatal(err)
		}
		e.Status, e.Updated = StatusBlocked, now
		return e, nil
	})
	if !errors.Is(err, ErrUnavailable) || calls != maxUpdateTries {
		t.Fatalf("Update under constant contention: %v after %d runs of fn; want ErrUnavailable after %d", err, calls, maxUpdateTries)
	}
	e, err := other.Get(ctx, k)
	if err != nil || e.Status != StatusPlanned || e.DisplayName != "other" {
		t.Fatalf("entry after the failed update: %+v %v; want the other client's", e, err)
	}
}

// TestRedisUpdateRedisDiesMidTransaction: Redis killed while fn
// holds the entry it read: Update fails with ErrUnavailable within the
// store's timeouts (no retry loop of 100 dials), and works again once
// Redis is back.
func TestRedisUpdateRedisDiesMidTransaction(t *testing.T) {
	rc := testkit.PrivateRedis(t)
	st, err := NewRedisStore(RedisOptions{Addr: rc.Addr, Prefix: "review:", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	k := Key{"shop", "dies"}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := st.Put(ctx, Entry{Group: k.Group, Name: k.Name, Status: StatusPlanned, Updated: now}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	start := time.Now()
	_, err = st.Update(ctx, k, func(e Entry, _ bool) (Entry, error) {
		calls++
		if calls == 1 {
			rc.Stop()
		}
		e.Status, e.Updated = StatusBlocked, now
		return e, nil
	})
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || calls != 1 || took > 5*time.Second {
		t.Fatalf("Update with Redis killed mid-transaction: %v after %d runs of fn in %v; want ErrUnavailable after 1, within 5s", err, calls, took)
	}
	rc.Start()
	testkit.WaitFor(t, 20*time.Second, "Update works again", func() bool {
		_, err := st.Update(ctx, k, func(e Entry, _ bool) (Entry, error) {
			e.Status, e.Updated = StatusBlocked, now
			return e, nil
		})
		return err == nil
	})
}
