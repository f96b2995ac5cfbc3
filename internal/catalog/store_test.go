package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStoreContract runs the Store contract against both stores.
func TestStoreContract(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			st := kit.open(t)
			defer st.Close()
			ctx := context.Background()
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			a, b := Key{"shop", "purchase"}, Key{"shop", "view"}

			_, err := st.Get(ctx, a)
			isErr(t, err, ErrNotFound)

			e := must(st.Fill(ctx, a, now))
			if e.Code != 1 || e.Status != StatusObserved || !e.Created.Equal(now) || !e.Updated.Equal(now) || e.Key() != a {
				t.Fatalf("first fill: %+v, want code 1, observed, created/updated %v", e, now)
			}
			again := must(st.Fill(ctx, a, now.Add(time.Hour)))
			if again.Code != 1 || !again.Created.Equal(now) {
				t.Fatalf("second fill of the same key: %+v, want the first entry", again)
			}
			got := must(st.Get(ctx, a))
			if got.Code != 1 || got.Status != StatusObserved {
				t.Fatalf("get after fill: %+v", got)
			}

			// Put of a new key: the next code; of an existing one: keeps code and created.
			schema := json.RawMessage(`{"type":"object","required":["x"]}`)
			pb := must(st.Put(ctx, Entry{Group: b.Group, Name: b.Name, DisplayName: "View", Status: StatusPlanned,
				Schema: schema, Updated: now.Add(time.Minute)}))
			if pb.Code != 2 || !pb.Created.Equal(now.Add(time.Minute)) {
				t.Fatalf("put of a new key: %+v, want code 2, created = updated", pb)
			}
			pa := must(st.Put(ctx, Entry{Group: a.Group, Name: a.Name, Code: 99, DisplayName: "Purchase",
				Status: StatusPlanned, Created: now.Add(48 * time.Hour), Updated: now.Add(2 * time.Minute)}))
			if pa.Code != 1 || !pa.Created.Equal(now) || pa.DisplayName != "Purchase" || pa.Status != StatusPlanned {
				t.Fatalf("put of an existing key: %+v, want code 1 and created %v kept, display name and status changed", pa, now)
			}
			got = must(st.Get(ctx, b))
			if string(got.Schema) != string(schema) || got.DisplayName != "View" {
				t.Fatalf("get b: %+v", got)
			}

			// GetMany: mixed.
			c := Key{"other", "x"}
			es, found, err := st.GetMany(ctx, []Key{b, c, a})
			if err != nil {
				t.Fatal(err)
			}
			if !found[0] || found[1] || !found[2] || es[0].Code != 2 || es[2].Code != 1 {
				t.Fatalf("GetMany: %+v %v", es, found)
			}
			if es, found, err := st.GetMany(ctx, nil); err != nil || len(es) != 0 || len(found) != 0 {
				t.Fatalf("GetMany(nil): %v %v %v", es, found, err)
			}

			// List: (group, name) order, paging, group filter; names that
			// are prefixes of others and groups that are prefixes of others.
			for _, k := range []Key{{"shop", "add"}, {"shopx", "a"}, {"sho", "z"}, {"a", "b"}, {"shop", "pur"}} {
				must(st.Fill(ctx, k, now))
			}
			all := must(st.List(ctx, "", Key{}, 100))
			want := []string{"a/b", "sho/z", "shop/add", "shop/pur", "shop/purchase", "shop/view", "shopx/a"}
			if g := names(all); strings.Join(g, " ") != strings.Join(want, " ") {
				t.Fatalf("List all: %v, want %v", g, want)
			}
			var paged []Entry
			after := Key{}
			for {
				page := must(st.List(ctx, "", after, 3))
				paged = append(paged, page...)
				if len(page) < 3 {
					break
				}
				after = page[len(page)-1].Key()
			}
			if g := names(paged); strings.Join(g, " ") != strings.Join(want, " ") {
				t.Fatalf("List in pages of 3: %v, want %v", g, want)
			}
			shop := must(st.List(ctx, "shop", Key{}, 100))
			if g := strings.Join(names(shop), " "); g != "shop/add shop/pur shop/purchase shop/view" {
				t.Fatalf("List shop: %s", g)
			}
			shop = must(st.List(ctx, "shop", Key{"shop", "pur"}, 1))
			if g := strings.Join(names(shop), " "); g != "shop/purchase" {
				t.Fatalf("List shop after shop/pur, 1: %s", g)
			}
			if l := must(st.List(ctx, "shop", Key{"zzz", "a"}, 10)); len(l) != 0 {
				t.Fatalf("List shop after a later group: %v", names(l))
			}
			if l := must(st.List(ctx, "shop", Key{"a", "a"}, 1)); strings.Join(names(l), " ") != "shop/add" {
				t.Fatalf("List shop after an earlier group: %v", names(l))
			}
			// Codes are unique.
			codes := map[int64]string{}
			for _, e := range all {
				if o, dup := codes[e.Code]; dup {
					t.Fatalf("code %d of both %s and %s/%s", e.Code, o, e.Group, e.Name)
				}
				codes[e.Code] = e.Group + "/" + e.Name
			}
			if len(codes) != 7 {
				t.Fatalf("codes: %v", codes)
			}
		})
	}
}

func names(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Group + "/" + e.Name
	}
	return out
}

// TestConcurrentFirstSight: two inlet instances (two Catalogs, for Redis on
// two clients) and 1,000 concurrent first-sight lookups of the same 50 new
// keys spread over both end with exactly 50 codes, all callers agreeing.
func TestConcurrentFirstSight(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			cats := []*Catalog{testCatalog(t, kit.open(t), nil), testCatalog(t, kit.open(t), nil)}
			const callers, nkeys = 1000, 50
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				codes = map[Key]map[int64]int{}
				errs  []error
				start = make(chan struct{})
			)
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := Key{Group: "race", Name: fmt.Sprintf("new-%02d", i%nkeys)}
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					var e Entry
					var err error
					// Every key is asked of both instances.
					if i%4 == 3 {
						// Some through Resolve, the way ingest asks.
						out := make([]Result, 1)
						cats[(i/nkeys)%2].Resolve(ctx, []Key{k}, out)
						e, err = out[0].Entry, out[0].Err
					} else {
						e, err = cats[(i/nkeys)%2].Lookup(ctx, k)
					}
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					if codes[k] == nil {
						codes[k] = map[int64]int{}
					}
					codes[k][e.Code]++
				}()
			}
			close(start)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%d lookups failed, first: %v", len(errs), errs[0])
			}
			distinct := map[int64]Key{}
			for k, cs := range codes {
				if len(cs) != 1 {
					t.Fatalf("callers disagree on the code of %v: %v", k, cs)
				}
				for code := range cs {
					if o, dup := distinct[code]; dup {
						t.Fatalf("code %d given to both %v and %v", code, o, k)
					}
					distinct[code] = k
				}
			}
			if len(codes) != nkeys || len(distinct) != nkeys {
				t.Fatalf("%d keys got %d distinct codes, want %d and %d", len(codes), len(distinct), nkeys, nkeys)
			}
			// The store agrees, and no code was taken and dropped.
			all := must(cats[0].List(context.Background(), "race", Key{}, 1000))
			var got []int64
			for _, e := range all {
				if cs := codes[e.Key()]; cs[e.Code] == 0 {
					t.Fatalf("store has %v = %d, callers got %v", e.Key(), e.Code, cs)
				}
				got = append(got, e.Code)
			}
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			if len(got) != nkeys || got[0] != 1 || got[nkeys-1] != nkeys {
				t.Fatalf("stored codes %v, want 1..%d", got, nkeys)
			}
			if r := kit.redis; r != nil {
				if seq := must(r().rdb.Get(context.Background(), r().seqKey()).Int64()); seq != nkeys {
					t.Fatalf("counter at %d after %d fills, want %d", seq, nkeys, nkeys)
				}
			}
		})
	}
}
