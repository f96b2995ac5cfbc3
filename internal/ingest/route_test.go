package ingest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/routes"
)

// fixedRoutes serves one Table.
type fixedRoutes struct{ t *routes.Table }

func (f fixedRoutes) Load() *routes.Table { return f.t }

func routesOf(tb testing.TB, file string) fixedRoutes {
	tb.Helper()
	f, err := routes.Parse([]byte(file))
	if err != nil {
		tb.Fatal(err)
	}
	return fixedRoutes{routes.Compile(f, "events", "test", nil)}
}

const testRoutes = `
rules:
  - {name: bots, match: {event: "bot_*"}, action: drop}
routes:
  - name: pixel
    match: {endpoint: pixel}
    topic: pixels
  - name: team
    match: {header: {X-Team: "*"}, event: "team_*"}
    topic: "{event}"
    dead_letter: team.invalid
  - name: shop
    match: {group: shop}
    topic: "{group}.events"
    key: props.order
  - name: web
    match: {client: web}
    topic: web.events
    key: anon_id
`

func TestRoutesBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithRoutes(routesOf(t, testRoutes)), WithAuth(newFakeAuth()))
	body := `[{"event":"buy","uid":"u1","props":{"order":"o-7"},"context":{"group":"shop"}},` +
		`{"event":"bot_ping"},` +
		`{"event":"view","uid":"u2","anon_id":"a2"},` +
		`{"event":"team_a b"},` +
		`{"event":"other","context":{"group":"x"}}]`
	r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", basic("web", "web-secret-0123456789"), "X-Team", "t1")
	if r.status != http.StatusOK {
		t.Fatalf("answer %s", r)
	}
	a := decodeAnswer(t, r)
	// bot_ping is dropped: accepted, with no record; "team_a b" makes a topic Kafka refuses.
	if a.Accepted != 4 || len(a.Rejected) != 1 || a.Rejected[0].Index != 3 || !strings.Contains(a.Rejected[0].Error, `"team_a b"`) {
		t.Fatalf("answer %s: want 4 accepted, event 3 rejected for its topic", r)
	}
	recs := h.sink.records()
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4 (the dropped event has none)", len(recs))
	}
	want := []struct{ topic, key, route string }{
		{"shop.events", "o-7", "shop"},
		{"web.events", "a2", "web"},
		{"team.invalid", "", ""},
		{"web.events", "", "web"},
	}
	for i, w := range want {
		rec := recs[i]
		if rec.Topic != w.topic {
			t.Errorf("record %d: topic %q, want %q", i, rec.Topic, w.topic)
		}
		if w.key != "" && string(rec.Key) != w.key {
			t.Errorf("record %d: key %q, want %q", i, rec.Key, w.key)
		}
		if got, _ := header(rec, event.HeaderRoute); got != w.route {
			t.Errorf("record %d: %s %q, want %q", i, event.HeaderRoute, got, w.route)
		}
		if w.route != "" {
			if got, _ := header(rec, event.HeaderTopic); got != w.topic {
				t.Errorf("record %d: %s %q, want %q", i, event.HeaderTopic, got, w.topic)
			}
		}
	}
	if got, _ := header(recs[2], event.HeaderReason); got != string(event.ReasonBadTopic) {
		t.Errorf("dead letter reason %q, want %s", got, event.ReasonBadTopic)
	}
}

func TestRoutesTrackAndPixel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithRoutes(routesOf(t, testRoutes+"  - {name: track, match: {endpoint: track}, topic: tracked}\n")))
	r := h.do(t, "POST", "/v1/track", []byte(`{"event":"view","uid":"u1"}`), "Content-Type", "application/json")
	if r.status != http.StatusOK {
		t.Fatalf("track: %s", r)
	}
	r = h.do(t, "GET", "/i?e=pixel_view&uid=u1", nil)
	if r.status != http.StatusOK {
		t.Fatalf("pixel: %s", r)
	}
	r = h.do(t, "POST", "/v1/track", []byte(`{"event":"bot_x"}`), "Content-Type", "application/json")
	if a := decodeAnswer(t, r); r.status != http.StatusOK || a.Accepted != 1 {
		t.Fatalf("dropped event: %s, want 200 and accepted", r)
	}
	recs := h.sink.records()
	if len(recs) != 2 || recs[0].Topic != "tracked" || recs[1].Topic != "pixels" {
		t.Fatalf("records %v, want one to tracked, one to pixels", topics(recs))
	}
}

// A client limited to its topics has each event routed elsewhere rejected
// (forbidden_topic) and dead-lettered; its others are stored.
func TestRoutesForbiddenTopic(t *testing.T) {
	t.Parallel()
	fa := newFakeAuth()
	fa.clients["shop"].client.Topics = []string{"shop.*"}
	h := newHarness(t, nil, WithAuth(fa), WithRoutes(routesOf(t, "routes:\n  - {topic: \"{group}.events\", dead_letter: \"{client}.invalid\"}\n")))
	body := `[{"event":"a","context":{"group":"shop"}},{"event":"b","context":{"group":"payments"}}]`
	r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "Authorization", basic("shop", "shop-secret-0123456789"))
	a := decodeAnswer(t, r)
	if r.status != http.StatusOK || a.Accepted != 1 || len(a.Rejected) != 1 || a.Rejected[0].Index != 1 ||
		!strings.Contains(unquote(r.body), `may not send events to topic "payments.events"`) || a.Rejected[0].Reason != "forbidden_topic" {
		t.Fatalf("answer %s: want event 1 rejected for its topic", r)
	}
	recs := h.sink.records()
	if len(recs) != 2 || recs[0].Topic != "shop.events" || recs[1].Topic != "shop.invalid" {
		t.Fatalf("records %v, want shop.events and the dead letter in shop.invalid", topics(recs))
	}
	if got, _ := header(recs[1], event.HeaderReason); got != string(event.ReasonForbiddenTopic) {
		t.Errorf("dead letter reason %q, want forbidden_topic", got)
	}
}

// Without routes, records carry no route header.
func TestNoRoutesNoHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.do(t, "POST", "/v1/track", []byte(`{"event":"view"}`), "Content-Type", "application/json")
	recs := h.sink.records()
	if len(recs) != 1 || recs[0].Topic != "events" || len(recs[0].Headers) != 3 {
		t.Fatalf("records %v", recs)
	}
}

func topics(recs []event.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Topic)
	}
	return out
}

// BenchmarkIngestRoutes is BenchmarkIngest with a routes file of 20 rules
// and routes, the last route matching every event, against none in the
// same run.
func BenchmarkIngestRoutes(b *testing.B) {
	var file strings.Builder
	file.WriteString("rules:\n")
	for i := range 10 {
		fmt.Fprintf(&file, "  - {match: {event: \"bot_%d_*\"}, action: drop}\n", i)
	}
	file.WriteString("routes:\n")
	for i := range 9 {
		fmt.Fprintf(&file, "  - {match: {client: \"team%d-*\", group: g%d}, topic: \"t%d\"}\n", i, i, i)
	}
	file.WriteString("  - {match: {event: \"page_view_*\"}, topic: pages, key: uid}\n")
	b.Run("routes=none", func(b *testing.B) { benchIngest(b) })
	b.Run("routes=empty", func(b *testing.B) { benchIngest(b, WithRoutes(routesOf(b, "routes: []\n"))) })
	b.Run("routes=20", func(b *testing.B) { benchIngest(b, WithRoutes(routesOf(b, file.String()))) })
	bench, err := os.ReadFile("../../bench/routes-20.yaml") // make bench's: no entry matches
	if err != nil {
		b.Fatal(err)
	}
	b.Run("routes=bench", func(b *testing.B) { benchIngest(b, WithRoutes(routesOf(b, string(bench)))) })
}

// An event no rule or route acts on is written as without a routes file:
// the batch's topic and key, the same headers (no inlet-route, no
// inlet-topic); one a redirect rule sent to the default route's topic
// still says so in its headers.
func TestRoutesDefaultUnchanged(t *testing.T) {
	t.Parallel()
	file := "rules:\n  - {name: moved, match: {event: moved}, action: redirect, topic: events}\n" + testRoutes[strings.Index(testRoutes, "routes:"):]
	body := []byte(`[{"event":"view","id":"e1","uid":"u1"},{"event":"moved","id":"e2","uid":"u2"}]`)
	headersOf := func(rec event.Record) []string {
		var ks []string
		for _, h := range rec.Headers {
			ks = append(ks, h.Key)
		}
		return ks
	}
	plain := newHarness(t, nil)
	if r := plain.do(t, "POST", "/v1/batch", body, "Content-Type", "application/json"); r.status != http.StatusOK {
		t.Fatalf("without routes: %d %s", r.status, r.body)
	}
	routed := newHarness(t, nil, WithRoutes(routesOf(t, file)))
	if r := routed.do(t, "POST", "/v1/batch", body, "Content-Type", "application/json"); r.status != http.StatusOK {
		t.Fatalf("with routes: %d %s", r.status, r.body)
	}
	want, got := plain.sink.records(), routed.sink.records()
	if len(want) != 2 || len(got) != 2 {
		t.Fatalf("%d and %d records, want 2 each", len(want), len(got))
	}
	if got[0].Topic != want[0].Topic || string(got[0].Key) != string(want[0].Key) ||
		fmt.Sprint(headersOf(got[0])) != fmt.Sprint(headersOf(want[0])) {
		t.Errorf("unrouted event: %s %q %v, want %s %q %v as without a routes file",
			got[0].Topic, got[0].Key, headersOf(got[0]), want[0].Topic, want[0].Key, headersOf(want[0]))
	}
	// The values too, but for the time they were received.
	value := func(rec event.Record) string {
		var v map[string]any
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			t.Fatalf("record value %s: %v", rec.Value, err)
		}
		delete(v, "received_at")
		b, _ := json.Marshal(v)
		return string(b)
	}
	if g, w := value(got[0]), value(want[0]); g != w {
		t.Errorf("unrouted event's value %s, want %s as without a routes file", g, w)
	}
	if r, _ := header(got[1], event.HeaderRoute); r != "default" {
		t.Errorf("redirected event: %s %q, want default (its headers %v)", event.HeaderRoute, r, headersOf(got[1]))
	}
}
