package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/routes"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestRoutesKafka routes on real Kafka: three routes to three topics by
// client and group; a client limited to its topics has each event routed
// to another's rejected with its reason and dead-lettered; a routes file
// with an error is refused on reload and the old routes keep serving, a
// good one replaces them.
func TestRoutesKafka(t *testing.T) {
	for _, ack := range []string{gateway.AckSpool, gateway.AckKafka} {
		t.Run(ack, func(t *testing.T) { testRoutesKafka(t, ack) })
	}
}

func testRoutesKafka(t *testing.T, ack string) {
	brokers := testkit.Brokers(t)
	p := testkit.Unique(t, "rt-")
	web, shop, pay, dead, moved := p+".web", p+".shop", p+".payments", p+".invalid", p+".moved"
	for _, topic := range []string{web, shop, pay, dead, moved} {
		testkit.CreateTopic(t, brokers, topic, 1, nil)
	}
	dir := t.TempDir()
	clients := filepath.Join(dir, "clients.json")
	webSecret, err := auth.AddClient(clients, auth.Client{ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	// shop may write its own topic only.
	shopSecret, err := auth.AddClient(clients, auth.Client{ID: "shop", Topics: []string{p + ".shop*"}})
	if err != nil {
		t.Fatal(err)
	}
	routesFile := filepath.Join(dir, "routes.yaml")
	file := fmt.Sprintf(`rules:
  - {match: {event: "bot_*"}, action: drop}
routes:
  - name: payments
    match: {group: payments}
    topic: %s
    dead_letter: %s
  - name: web
    match: {client: web}
    topic: %s
  - name: shop
    match: {client: shop}
    topic: "%s.{client}"
`, pay, dead, web, p)
	if err := os.WriteFile(routesFile, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.Config(t, brokers, p+".default")
	cfg.Auth.ClientsFile, cfg.Auth.HTTP = clients, true
	cfg.Ingest.Routes = routesFile
	cfg.Ack = ack
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	base := "http://" + g.Addr()

	post := func(client, secret, body string) testkit.Response {
		t.Helper()
		return testkit.Do(t, "POST", base+"/v1/batch", []byte(body), "Content-Type", "application/json",
			"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(client+":"+secret)))
	}
	type answer struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			Index  int    `json:"index"`
			Error  string `json:"error"`
			Reason string `json:"reason"`
		} `json:"rejected"`
	}
	decode := func(r testkit.Response) answer {
		t.Helper()
		var a answer
		if err := json.Unmarshal(r.Body, &a); err != nil {
			t.Fatalf("answer %s: %v", r, err)
		}
		return a
	}
	r := post("web", webSecret, `[{"event":"w1","uid":"u1"},{"event":"p1","uid":"u1","context":{"group":"payments"}}]`)
	if a := decode(r); r.Status != 200 || a.Accepted != 2 {
		t.Fatalf("web: %s", r)
	}
	r = post("shop", shopSecret, `[{"event":"s1","uid":"u2"},{"event":"p2","uid":"u2","context":{"group":"payments"}},{"event":"s2","uid":"u2"}]`)
	a := decode(r)
	if r.Status != 200 || a.Accepted != 2 || len(a.Rejected) != 1 || a.Rejected[0].Index != 1 || a.Rejected[0].Reason != "forbidden_topic" || !strings.Contains(a.Rejected[0].Error, pay) {
		t.Fatalf("shop: %s, want event 1 rejected: shop may not write %s", r, pay)
	}

	// A request whose every event is dropped: accepted, nothing stored.
	if r := post("web", webSecret, `[{"event":"bot_1"},{"event":"bot_2"}]`); r.Status != 200 || decode(r).Accepted != 2 {
		t.Fatalf("all dropped: %s, want 200 and 2 accepted", r)
	}

	names := func(recs []testkit.Record) string {
		var out []string
		for _, r := range recs {
			out = append(out, fmt.Sprint(r.Fields["event"], "/", r.Headers["inlet-route"], "/", r.Headers["inlet-topic"]))
		}
		return strings.Join(out, " ")
	}
	for topic, want := range map[string]string{
		web:  "w1/web/" + web,
		pay:  "p1/payments/" + pay,
		shop: fmt.Sprintf("s1/shop/%s s2/shop/%s", shop, shop),
	} {
		recs := testkit.ConsumeN(t, brokers, topic, strings.Count(want, " ")+1, 0)
		if got := names(recs); got != want {
			t.Errorf("topic %s: %s, want %s", topic, got, want)
		}
	}
	dl := testkit.ConsumeN(t, brokers, dead, 1, 0)
	if dl[0].Headers["inlet-reason"] != "forbidden_topic" || !strings.Contains(string(dl[0].Value), `"p2"`) {
		t.Fatalf("dead letter %+v, want p2 with reason forbidden_topic", dl[0])
	}

	// A bad file on reload is refused: the routes loaded keep serving.
	if err := os.WriteFile(routesFile, []byte(file+"    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, base, "inlet_routes_reload_errors_total", 1)
	if r := post("web", webSecret, `[{"event":"w2"}]`); r.Status != 200 {
		t.Fatalf("after a bad file: %s", r)
	}
	testkit.ConsumeN(t, brokers, web, 2, 0)
	// A good one replaces them.
	good := fmt.Sprintf("routes:\n  - {match: {client: web}, topic: %s}\n", moved)
	if err := os.WriteFile(routesFile, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, base, "inlet_routes_reloads_total", 2)
	if r := post("web", webSecret, `[{"event":"w3"}]`); r.Status != 200 {
		t.Fatalf("after a good file: %s", r)
	}
	if got := names(testkit.ConsumeN(t, brokers, moved, 1, 0)); got != "w3/route1/"+moved {
		t.Fatalf("after the reload: %s, want w3 routed to %s", got, moved)
	}
	var rd gateway.Readiness
	if err := json.Unmarshal(testkit.Do(t, "GET", base+"/readyz", nil).Body, &rd); err != nil || rd.Routes == nil || len(rd.Routes.Counts) == 0 {
		t.Fatalf("/readyz routes: %+v %v", rd.Routes, err)
	}
}

// waitMetric waits until base's metric name (without labels) is at least
// want, for up to 20 s (the file is polled every 2 s).
func waitMetric(t *testing.T, base, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := metricValue(t, base, name)
		if v >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after 20 s, want %v", name, v, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRoutesOverflowKafka: one uid sending 50 times the others' events
// goes to the overflow topic past its burst; the others' events never do.
// The others stay within the burst, whatever the time it takes on a loaded
// machine; the hot uid's burst plus its rate over the test is far below
// its events.
func TestRoutesOverflowKafka(t *testing.T) {
	brokers := testkit.Brokers(t)
	p := testkit.Unique(t, "ov-")
	events, over := p+".events", p+".overflow"
	for _, topic := range []string{events, over} {
		testkit.CreateTopic(t, brokers, topic, 1, nil)
	}
	routesFile := filepath.Join(t.TempDir(), "routes.yaml")
	file := fmt.Sprintf("overflow: {key: uid, rate: 1, burst: 20, topic: %s}\n", over)
	if err := os.WriteFile(routesFile, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.Config(t, brokers, events)
	cfg.Ingest.Routes = routesFile
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	base := "http://" + g.Addr()

	const others, each, hot = 10, 20, 50 * 20
	var body strings.Builder
	start := time.Now()
	for round := range each {
		body.Reset()
		body.WriteByte('[')
		for u := range others {
			fmt.Fprintf(&body, `{"event":"e","uid":"user-%d"},`, u)
		}
		for i := range hot / each {
			if i > 0 {
				body.WriteByte(',')
			}
			body.WriteString(`{"event":"e","uid":"hot"}`)
		}
		body.WriteByte(']')
		r := testkit.Do(t, "POST", base+"/v1/batch", []byte(body.String()), "Content-Type", "application/json")
		if r.Status != 200 {
			t.Fatalf("round %d: %s", round, r)
		}
	}
	took := time.Since(start)
	// The hot uid gets its burst and 1 a second in the main topic.
	maxHot := 20 + int(took.Seconds()) + 1
	recs := testkit.Consume(t, brokers, over, 30*time.Second, func(r []testkit.Record) bool { return len(r) >= hot-maxHot })
	for _, r := range recs {
		if r.Fields["uid"] != "hot" {
			t.Fatalf("an event of %v in the overflow topic: only hot's may be", r.Fields["uid"])
		}
	}
	mainRecs := testkit.Consume(t, brokers, events, 30*time.Second, func(r []testkit.Record) bool { return len(r) >= others*each+20 })
	byUID := map[any]int{}
	for _, r := range mainRecs {
		byUID[r.Fields["uid"]]++
	}
	for u := range others {
		if n := byUID[fmt.Sprintf("user-%d", u)]; n != each {
			t.Errorf("user-%d: %d events in the main topic, want all %d", u, n, each)
		}
	}
	if n := byUID["hot"]; n < 20 || n > maxHot {
		t.Errorf("hot: %d events in the main topic in %v, want its burst (20) to %d", n, took, maxHot)
	}
	t.Logf("in %v: hot %d in the main topic, %d+ in the overflow topic", took, byUID["hot"], len(recs))
}

// TestRoutesSampleKafka: a rule sampling 10% by uid keeps 10% ± 2% of
// 20,000 users, with all or none of each user's events, in Kafka.
func TestRoutesSampleKafka(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "sa-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	routesFile := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routesFile, []byte("rules:\n  - {name: tenth, action: sample, rate: 0.1, by: uid}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ingest.Routes = routesFile
	g := gatewaytest.Start(t, cfg)
	gatewaytest.Ready(t, g, 30*time.Second)
	base := "http://" + g.Addr()

	const users, perUser, batch = 20000, 2, 500
	var body strings.Builder
	for first := 0; first < users; first += batch / perUser {
		body.Reset()
		body.WriteByte('[')
		for u := first; u < first+batch/perUser; u++ {
			for e := range perUser {
				if body.Len() > 1 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"event":"e%d","uid":"user-%d"}`, e, u)
			}
		}
		body.WriteByte(']')
		r := testkit.Do(t, "POST", base+"/v1/batch", []byte(body.String()), "Content-Type", "application/json")
		if r.Status != 200 || !strings.Contains(string(r.Body), fmt.Sprintf(`"accepted":%d`, batch)) {
			t.Fatalf("users from %d: %s", first, r)
		}
	}
	// How many users the rule keeps, by the same decision: then read exactly
	// their events (and make sure no more arrive).
	f, err := routes.Parse([]byte("rules:\n  - {name: tenth, action: sample, rate: 0.1, by: uid}\n"))
	if err != nil {
		t.Fatal(err)
	}
	table, kept := routes.Compile(f, topic, "", nil), 0
	for u := range users {
		var d routes.Decision
		table.Decide(&routes.Input{UID: []byte(fmt.Sprintf("user-%d", u))}, &d)
		if d.Action == routes.Deliver {
			kept++
		}
	}
	recs := testkit.ConsumeN(t, brokers, topic, kept*perUser, 2*time.Second)
	byUser := map[any]int{}
	for _, r := range recs {
		byUser[r.Fields["uid"]]++
	}
	for u, n := range byUser {
		if n != perUser {
			t.Fatalf("%v: %d of %d events kept", u, n, perUser)
		}
	}
	if share := float64(len(byUser)) / users; share < 0.08 || share > 0.12 {
		t.Fatalf("kept %d of %d users (%.3f), want 0.10 ± 0.02", len(byUser), users, share)
	}
	t.Logf("kept %d of %d users, %d events", len(byUser), users, len(recs))
}
