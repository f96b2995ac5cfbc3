package routes

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, file, want string }{
		{"too many routes", "routes:\n" + strings.Repeat("  - topic: a\n", MaxEntries+1), "at most 10000 of each"},
		{"unknown field", "routes:\n  - topic: a\n    tpoic: b\n", "line 3: field tpoic not found"},
		{"duplicate key", "routes:\n  - topic: a\n    topic: b\n", "already defined"},
		{"bad glob", "routes:\n  - topic: a\n  - match: {event: \"[a\"}\n    topic: b\n", "line 3: route 2 (route2): match.event: glob \"[a\""},
		{"unknown template field", "routes:\n  - name: web\n    topic: \"{team}.events\"\n", "line 2: route 1 (web): topic \"{team}.events\": unknown field {team}"},
		{"unbalanced template", "routes:\n  - topic: \"{group.events\"\n", "without its '}'"},
		{"bad topic", "routes:\n  - topic: \"a b\"\n", "Kafka takes only"},
		{"no topic", "routes:\n  - match: {client: web}\n", "topic: missing"},
		{"bad key", "routes:\n  - topic: a\n    key: email\n", "key \"email\""},
		{"rate out of range", "rules:\n  - action: sample\n    rate: 1.5\n", "line 2: rule 1 (rule1): rate"},
		{"sample without rate", "rules:\n  - action: sample\n", "rate"},
		{"bad action", "rules:\n  - action: delete\n", "action \"delete\""},
		{"option of another action", "rules:\n  - action: drop\n    topic: x\n", "topic: not an option of action \"drop\""},
		{"redirect bad topic", "rules:\n  - action: redirect\n    topic: \"x/y\"\n", "Kafka takes only"},
		{"overflow rate", "overflow: {rate: 0, topic: o}\n", "overflow: rate 0"},
		{"overflow key", "overflow: {key: email, rate: 1, topic: o}\n", "key \"email\""},
		{"overflow keys", "overflow: {rate: 1, topic: o, keys: 2000000}\n", "keys 2000000"},
		{"empty", "", "empty file"},
		{"not a map", "- a\n", "cannot unmarshal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v, want an error with %q", err, c.want)
			}
		})
	}
}

func mustTable(tb testing.TB, file string) *Table {
	tb.Helper()
	f, err := Parse([]byte(file))
	if err != nil {
		tb.Fatal(err)
	}
	return Compile(f, "events", "test", nil)
}

func TestDecideRoutes(t *testing.T) {
	t.Parallel()
	tb := mustTable(t, `
routes:
  - name: pay
    match: {header: {X-Team: pay*}}
    topic: payments
  - name: web
    match: {client: "web-*", event: "page_*"}
    topic: "{client}.pages"
    key: anon_id
    dead_letter: web.invalid
  - name: shop
    match: {group: shop}
    topic: "{group}.events"
  - name: bad
    match: {group: "bad*"}
    topic: "{event}"
`)
	hdr := func(v string) http.Header { return http.Header{"X-Team": {v}} }
	cases := []struct {
		name         string
		in           Input
		action       Action
		topic, route string
	}{
		{"header first", Input{Client: "web-1", Event: []byte("page_view"), Header: hdr("payments")}, Deliver, "payments", "pay"},
		{"client and event", Input{Client: "web-1", Event: []byte("page_view"), Group: "shop"}, Deliver, "web-1.pages", "web"},
		{"next route", Input{Client: "web-1", Event: []byte("click"), Group: "shop"}, Deliver, "shop.events", "shop"},
		{"default", Input{Client: "app", Event: []byte("click"), Group: "other"}, Deliver, "events", "default"},
		{"bad topic", Input{Event: []byte("a b"), Group: "bad"}, DeadLetter, "a b", "bad"},
	}
	for _, c := range cases {
		var d Decision
		tb.Decide(&c.in, &d)
		if d.Action != c.action || d.Topic != c.topic || d.Route != c.route {
			t.Errorf("%s: got %+v, want action %d topic %q route %q", c.name, d, c.action, c.topic, c.route)
		}
	}
	var d Decision
	tb.Decide(&Input{Client: "web-1", Event: []byte("page_view")}, &d)
	if d.Key != KeyAnonID || d.DeadLetter != "web.invalid" {
		t.Errorf("web route: key %d dead letter %q", d.Key, d.DeadLetter)
	}
	tb.Decide(&Input{Event: []byte("a b"), Group: "bad"}, &d)
	if d.Reason != ReasonBadTopic {
		t.Errorf("bad topic: reason %q", d.Reason)
	}
}

func TestDecideRules(t *testing.T) {
	t.Parallel()
	tb := mustTable(t, `
rules:
  - {name: bots, match: {event: "bot_*"}, action: drop}
  - {name: spam, match: {uid: "spammer"}, action: dead_letter, reason: abuse}
  - {name: move, match: {client: legacy}, action: redirect, topic: legacy.events}
`)
	for _, c := range []struct {
		in     Input
		action Action
		topic  string
	}{
		{Input{Event: []byte("bot_ping")}, Drop, ""},
		{Input{Event: []byte("x"), UID: []byte("spammer")}, DeadLetter, "events"},
		{Input{Event: []byte("x"), Client: "legacy"}, Deliver, "legacy.events"},
		{Input{Event: []byte("x"), Client: "app"}, Deliver, "events"},
	} {
		var d Decision
		tb.Decide(&c.in, &d)
		if d.Action != c.action || (c.topic != "" && d.Topic != c.topic) {
			t.Errorf("%+v: got %+v", c.in, d)
		}
	}
	st := tb.Stats()
	got := fmt.Sprint(st[0].Counts(), st[1].Counts(), st[2].Counts(), st[3].Counts())
	if want := "map[routed:1] map[dropped:1] map[dead_lettered:1] map[redirected:1]"; got != want {
		t.Errorf("stats %s, want %s", got, want)
	}
}

// Sampling 10% of 20,000 users keeps 10% ± 2% of them, all or none of
// each user's events.
func TestSampleByUser(t *testing.T) {
	t.Parallel()
	tb := mustTable(t, "rules:\n  - {name: tenth, action: sample, rate: 0.1, by: uid}\n")
	const users, perUser = 20000, 5
	kept := 0
	for u := range users {
		uid := []byte(fmt.Sprintf("user-%d", u))
		n := 0
		for range perUser {
			var d Decision
			tb.Decide(&Input{Event: []byte("e"), UID: uid}, &d)
			if d.Action == Deliver {
				n++
			}
		}
		if n != 0 && n != perUser {
			t.Fatalf("user %s: %d of %d events kept", uid, n, perUser)
		}
		if n == perUser {
			kept++
		}
	}
	if share := float64(kept) / users; share < 0.08 || share > 0.12 {
		t.Fatalf("kept %d of %d users (%.3f), want 0.10 ± 0.02", kept, users, share)
	}
}

// One key at 50x the others' rate goes to the overflow topic past its
// limit; the others never do.
func TestOverflow(t *testing.T) {
	t.Parallel()
	tb := mustTable(t, "overflow: {key: uid, rate: 10, burst: 10, topic: events.overflow, keys: 1000}\n")
	now := time.Unix(0, 0)
	tb.overflow.now = func() time.Time { return now }
	hot, others := 0, 0
	for tick := range 100 { // 10 s in steps of 100 ms
		now = time.Unix(0, 0).Add(time.Duration(tick) * 100 * time.Millisecond)
		for range 50 { // hot: 500 a second, 50x
			var d Decision
			tb.Decide(&Input{Event: []byte("e"), UID: []byte("hot")}, &d)
			if d.Topic == "events.overflow" {
				hot++
			}
		}
		for u := range 20 { // others: 10 a second each
			var d Decision
			tb.Decide(&Input{Event: []byte("e"), UID: []byte(fmt.Sprint("u", u))}, &d)
			if d.Topic != "events" {
				others++
			}
		}
	}
	// hot may pass its burst plus 10 a second: 10 + 100 of 5000.
	if hot < 5000-120 || hot > 5000-100 {
		t.Errorf("hot key: %d of 5000 to the overflow topic, want about 4890", hot)
	}
	if others != 0 {
		t.Errorf("%d events of keys within their rate went to the overflow topic", others)
	}
}

func TestOverflowBounded(t *testing.T) {
	t.Parallel()
	tb := mustTable(t, "overflow: {key: uid, rate: 1, topic: o, keys: 100}\n")
	for i := range 1000 {
		var d Decision
		tb.Decide(&Input{UID: []byte(fmt.Sprint(i))}, &d)
	}
	if n := tb.overflow.size(); n != 100 {
		t.Fatalf("table holds %d keys, want its bound 100", n)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("routes:\n  - topic: one\n")
	m := NewMetrics(nil)
	w, err := Open(p, "events", nil, m)
	if err != nil {
		t.Fatal(err)
	}
	topic := func() string {
		var d Decision
		w.Load().Decide(&Input{Event: []byte("e")}, &d)
		return d.Topic
	}
	if got := topic(); got != "one" {
		t.Fatalf("topic %q, want one", got)
	}
	write("routes:\n  - topic: two\n    bogus: 1\n")
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("bad file reloaded: %v", err)
	}
	if got := topic(); got != "one" {
		t.Fatalf("after a bad file: topic %q, want the old routes (one)", got)
	}
	write("routes:\n  - {name: three, topic: three}\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.events); n != 2*2 { // three and default: routed, dead_lettered
		t.Errorf("%d series of inlet_route_events_total after route1 became three, want 4", n)
	}
	if got := topic(); got != "three" {
		t.Fatalf("after a good file: topic %q, want three", got)
	}
	// Reload (SIGHUP) of a file whose contents did not change keeps the
	// table in use, with its counts and overflow state.
	before := w.Load()
	write("routes:\n  - {name: three, topic: three}\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if w.Load() != before {
		t.Error("a reload of the same contents replaced the table")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none"), "events", nil, nil); err == nil {
		t.Fatal("Open of a missing file: no error")
	}
}

// TestReloadSeesRename has a file renamed over the routes file with its
// size and modification time (a ConfigMap update): the poll loads it.
func TestReloadSeesRename(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte("routes:\n  - topic: one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Open(p, "events", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".new", []byte("routes:\n  - topic: two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p+".new", fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	if err := w.reload(false); err != nil {
		t.Fatal(err)
	}
	var d Decision
	w.Load().Decide(&Input{Event: []byte("e")}, &d)
	if d.Topic != "two" {
		t.Fatalf("after the rename: topic %q, want two", d.Topic)
	}
}

// BenchmarkDecide routes one event through 20 rules and routes (none
// matching until the last route), against no routes file.
func BenchmarkDecide(b *testing.B) {
	var file strings.Builder
	file.WriteString("rules:\n")
	for i := range 10 {
		fmt.Fprintf(&file, "  - {match: {event: \"bot_%d_*\"}, action: drop}\n", i)
	}
	file.WriteString("routes:\n")
	for i := range 9 {
		fmt.Fprintf(&file, "  - {match: {client: \"team%d-*\", group: g%d}, topic: \"t%d\"}\n", i, i, i)
	}
	file.WriteString("  - {match: {group: shop}, topic: shop.events, key: uid}\n")
	tb := mustTable(b, file.String())
	in := Input{Client: "web", Group: "shop", Event: []byte("page_view"), UID: []byte("user-1")}
	b.Run("rules=20", func(b *testing.B) {
		b.ReportAllocs()
		var d Decision
		for b.Loop() {
			tb.Decide(&in, &d)
		}
		if d.Topic != "shop.events" {
			b.Fatal(d.Topic)
		}
	})
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		var t *Table
		for b.Loop() {
			if t != nil {
				b.Fatal()
			}
		}
	})
}

// Decide is safe while the file reloads: each call sees one Table whole.
func TestConcurrentReload(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte("routes:\n  - topic: a\noverflow: {rate: 1, topic: o, keys: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Open(p, "events", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan string, 4)
	for g := range 4 {
		go func() {
			defer func() { errs <- "" }()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				var d Decision
				w.Load().Decide(&Input{UID: []byte(fmt.Sprint(g, i%50))}, &d)
				if d.Topic != "a" && d.Topic != "b" && d.Topic != "o" {
					errs <- d.Topic
					return
				}
			}
		}()
	}
	for i := range 50 {
		topic := []string{"a", "b"}[i%2]
		if err := os.WriteFile(p, []byte("routes:\n  - topic: "+topic+"\noverflow: {rate: 1, topic: o, keys: 10}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 4 {
		if e := <-errs; e != "" {
			t.Fatalf("a decision to topic %q", e)
		}
	}
}

// FuzzParse: any file is refused with an error or compiles into a Table
// that routes without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte("routes:\n  - {match: {client: \"web-*\", header: {X-A: b}}, topic: \"{group}.{event}\", key: props.id, dead_letter: \"{client}.dl\"}\n"))
	f.Add([]byte("rules:\n  - {action: sample, rate: 0.5, by: anon_id}\n  - {action: redirect, topic: x}\noverflow: {key: client, rate: 1, topic: o}\n"))
	f.Add([]byte("{\"routes\": [{\"topic\": \"a\"}]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			return
		}
		tb := Compile(file, "events", "fuzz", nil)
		var d Decision
		tb.Decide(&Input{Client: "web-1", Group: "g", Event: []byte("e"), UID: []byte("u"), Header: http.Header{"X-A": {"b"}}}, &d)
		if d.Action == Deliver && validTopic(d.Topic) != nil {
			t.Fatalf("delivered to topic %q, which Kafka refuses", d.Topic)
		}
	})
}

// The bench's routes file stays valid, and routes the bench's events to
// the default route after matching all 20 entries.
func TestBenchRoutesFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../bench/routes-20.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Routes) + len(f.Rules); n != 20 {
		t.Fatalf("%d routes and rules, want 20", n)
	}
	var d Decision
	Compile(f, "events", "", nil).Decide(&Input{Group: "default", Event: []byte("page_view"), UID: []byte("user-1"), Endpoint: "batch"}, &d)
	if d.Action != Deliver || d.Topic != "events" || d.Route != "default" {
		t.Fatalf("bench event: %+v, want the default route", d)
	}
}

// Prepare changes no decision: every event of every request is decided the
// same with the request prepared as without (the bench's file, the test
// file, and one of more entries than the plan's room).
func TestPrepareSameDecisions(t *testing.T) {
	t.Parallel()
	bench, err := os.ReadFile("../../bench/routes-20.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var big strings.Builder
	big.WriteString("rules:\n")
	// Every third entry names no client or header: past 16 of them match
	// every request, and the plan's lists leave their room.
	for i := range 60 {
		client := fmt.Sprintf("client: \"c%d\", ", i%7)
		if i%3 == 0 {
			client = ""
		}
		fmt.Fprintf(&big, "  - {match: {%sevent: \"e%d*\"}, action: redirect, topic: r%d}\n", client, i%5, i)
	}
	for i := range 24 { // event x23 is decided by the 44th entry of every plan
		fmt.Fprintf(&big, "  - {match: {event: \"x%d\"}, action: redirect, topic: x%d}\n", i, i)
	}
	big.WriteString("routes:\n")
	for i := range 60 {
		request := fmt.Sprintf("client: \"c%d*\", header: {X-App: \"a%d\"}, ", i%7, i%4)
		if i%3 == 0 {
			request = ""
		}
		fmt.Fprintf(&big, "  - {match: {%sgroup: \"g%d\"}, topic: \"t%d.{event}\"}\n", request, i%3, i)
	}
	for i := range 24 {
		fmt.Fprintf(&big, "  - {match: {group: \"h%d\"}, topic: h%d}\n", i, i)
	}
	clients := []string{"", "legacy", "spam-1", "team-a", "ads-x", "internal-y", "c1", "c3", "c6"}
	groups := []string{"", "payments", "shop-eu", "search", "mail", "g0", "g1", "g2", "h23"}
	evs := []string{"page_view", "bot_x", "scroll", "hover_a", "debug_1", "search_q", "e0", "e1x", "e4", "healthcheck", "x23"}
	uids := []string{"", "abuser-1", "u1", "u2"}
	anons := []string{"", "test-1", "a1"}
	headers := []http.Header{nil, {"X-App": {"ios-17"}}, {"X-App": {"android-14"}}, {"X-App": {"a1"}}, {"X-App": {"a3"}}}
	for _, file := range []string{string(bench), big.String()} {
		tb := mustTable(t, file)
		n := 0
		for _, c := range clients {
			for _, h := range headers {
				for _, ep := range []string{"batch", "pixel", "track"} {
					prepared := Input{Client: c, Header: h, Endpoint: ep}
					tb.Prepare(&prepared)
					for _, g := range groups {
						for _, e := range evs {
							for k := range len(uids) * len(anons) {
								in := Input{Client: c, Header: h, Endpoint: ep, Group: g, Event: []byte(e), UID: []byte(uids[k%len(uids)]), AnonID: []byte(anons[k/len(uids)])}
								prepared.Group, prepared.Event, prepared.UID, prepared.AnonID = in.Group, in.Event, in.UID, in.AnonID
								var want, got Decision
								tb.Decide(&in, &want)
								tb.Decide(&prepared, &got)
								if got != want {
									t.Fatalf("%+v: prepared %+v, want %+v", in, got, want)
								}
								n++
							}
						}
					}
				}
			}
		}
		if n == 0 {
			t.Fatal("no case")
		}
	}
}

// BenchmarkDecideBench is one event of make bench's load through
// bench/routes-20.yaml (no entry matches), with and without Prepare.
func BenchmarkDecideBench(b *testing.B) {
	file, err := os.ReadFile("../../bench/routes-20.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tb := mustTable(b, string(file))
	for _, prep := range []bool{false, true} {
		b.Run(fmt.Sprint("prepared=", prep), func(b *testing.B) {
			in := Input{Endpoint: "batch", Header: http.Header{"Content-Type": {"application/json"}}}
			if prep {
				tb.Prepare(&in)
			}
			in.Event, in.UID = []byte("page_view"), []byte("user-1")
			var d Decision
			for b.Loop() {
				tb.Decide(&in, &d)
			}
			if !d.Default {
				b.Fatal(d)
			}
		})
	}
}

// BenchmarkPrepareBench is Prepare of one request of make bench's load
// on bench/routes-20.yaml: once a request, before its events' Decide.
func BenchmarkPrepareBench(b *testing.B) {
	file, err := os.ReadFile("../../bench/routes-20.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tb := mustTable(b, string(file))
	in := Input{Endpoint: "batch", Header: http.Header{"Content-Type": {"application/json"}, "User-Agent": {"inlet-bench"}}}
	for b.Loop() {
		tb.Prepare(&in)
	}
	if in.plan.rules.n != 8 || in.plan.routes.n != 3 {
		b.Fatalf("plan of %d rules and %d routes, want 8 and 3", in.plan.rules.n, in.plan.routes.n)
	}
}
