package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestStoreUpdate: Update is one read-modify-write on both stores: a new
// key gets the next code, an existing one keeps its code and created; an
// error of fn writes nothing and is returned as it is; a change of the key
// is refused; and another update of a different field that lands between
// Update's read and its write is not lost: fn runs again on it (Redis:
// WATCH), or the other waits (bbolt: one transaction).
func TestStoreUpdate(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			st := kit.open(t)
			defer st.Close()
			ctx := context.Background()
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			a := Key{"shop", "purchase"}

			e, err := st.Update(ctx, a, func(e Entry, found bool) (Entry, error) {
				if found || e.Key() != a || e.Code != 0 {
					t.Errorf("fn of an absent key got %+v, found %v", e, found)
				}
				e.DisplayName, e.Status, e.Updated = "Purchase", StatusPlanned, now
				return e, nil
			})
			if err != nil || e.Code != 1 || !e.Created.Equal(now) || e.DisplayName != "Purchase" {
				t.Fatalf("update of an absent key: %+v, %v; want code 1, created now", e, err)
			}
			boom := errors.New("boom")
			if _, err := st.Update(ctx, a, func(e Entry, _ bool) (Entry, error) { return e, boom }); err != boom {
				t.Fatalf("fn's error came back as %v", err)
			}
			if _, err := st.Update(ctx, a, func(e Entry, _ bool) (Entry, error) { e.Name = "other"; return e, nil }); !errors.Is(err, ErrInvalid) {
				t.Fatalf("an update changing the key: %v, want ErrInvalid", err)
			}

			// An update of another field lands while fn holds the entry it read.
			var (
				once  sync.Once
				calls int
				put   = make(chan error, 1)
			)
			e, err = st.Update(ctx, a, func(e Entry, found bool) (Entry, error) {
				calls++
				once.Do(func() {
					go func() {
						_, err := st.Update(ctx, a, func(e Entry, _ bool) (Entry, error) {
							e.Status, e.Updated = StatusBlocked, now.Add(time.Minute)
							return e, nil
						})
						put <- err
					}()
					if kit.name != "bbolt" { // bbolt: the other update waits for this transaction
						if err := <-put; err != nil {
							t.Errorf("the concurrent update: %v", err)
						}
					}
				})
				e.DisplayName, e.Updated = "Purchase v2", now.Add(2*time.Minute)
				return e, nil
			})
			if err != nil || e.Code != 1 || !e.Created.Equal(now) {
				t.Fatalf("update with a concurrent one: %+v, %v", e, err)
			}
			if kit.name == "bbolt" {
				if err := <-put; err != nil {
					t.Fatal(err)
				}
			}
			got := must(st.Get(ctx, a))
			if got.Status != StatusBlocked || got.DisplayName != "Purchase v2" {
				t.Fatalf("after two concurrent updates of different fields: %+v (fn ran %d times); want both changes", got, calls)
			}
			if kit.name != "bbolt" && calls != 2 {
				t.Errorf("fn ran %d times, want 2: once more after the concurrent update", calls)
			}
		})
	}
}

// TestCatalogUpdateConcurrent: changes of different fields of one entry
// made at once, by many callers, all hold (Catalog.Update), on both stores.
func TestCatalogUpdateConcurrent(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			st := kit.open(t)
			c := testCatalog(t, st, nil)
			ctx := context.Background()
			k := Key{"shop", "view"}
			const n = 20
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					_, err := c.Update(ctx, k, func(e Entry, _ bool) (Entry, error) {
						// Each caller appends its mark to the display name.
						e.DisplayName += fmt.Sprintf("[%d]", i)
						return e, nil
					})
					if err != nil {
						t.Errorf("update %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			got := must(c.Get(ctx, k))
			for i := range n {
				if !containsMark(got.DisplayName, i) {
					t.Fatalf("update %d was lost: display name %q", i, got.DisplayName)
				}
			}
			if got.Status != StatusPlanned || got.Code == 0 {
				t.Errorf("entry %+v: want planned with a code", got)
			}
		})
	}
}

func containsMark(s string, i int) bool {
	m := fmt.Sprintf("[%d]", i)
	for j := 0; j+len(m) <= len(s); j++ {
		if s[j:j+len(m)] == m {
			return true
		}
	}
	return false
}
