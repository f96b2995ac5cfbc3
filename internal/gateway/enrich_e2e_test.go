package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/enrich/enrichtest"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

const (
	e2eFirefox   = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0"
	e2eGooglebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
)

func e2eCities(city string) []enrichtest.City {
	return []enrichtest.City{
		{Network: "192.0.2.0/24", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: city, Lat: 48.8566, Lon: 2.3522},
		{Network: "2001:db8:1::/48", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: city, Lat: 48.8566, Lon: 2.3522},
	}
}

// TestEnrichKafka runs the enrichment on real Kafka: records of an IPv4
// and an IPv6 client (through a trusted proxy) carry their place and
// their parsed User-Agent, a bot's are tagged with --bots tag, and gone
// with --bots drop; the database is replaced under load with no failed
// request.
func TestEnrichKafka(t *testing.T) {
	brokers := testkit.Brokers(t)
	p := testkit.Unique(t, "enr-")
	testkit.CreateTopic(t, brokers, p, 1, nil)
	testkit.CreateTopic(t, brokers, p+".invalid", 1, nil)
	db := filepath.Join(t.TempDir(), "city.mmdb")
	if err := enrichtest.WriteCityDB(db, enrichtest.Build, e2eCities("Paris")); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { enrich.GeoReloadInterval = d }(enrich.GeoReloadInterval)
	enrich.GeoReloadInterval = 50 * time.Millisecond

	start := func(bots string) string {
		cfg := gatewaytest.Config(t, brokers, p)
		cfg.Ack = gateway.AckKafka
		cfg.Ingest.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		cfg.Enrich.ParseUA, cfg.Enrich.GeoIPDB, cfg.Enrich.GeoIPPrecision, cfg.Enrich.Bots = true, db, 1, bots
		g := gatewaytest.Start(t, cfg)
		gatewaytest.Ready(t, g, 30*time.Second)
		return "http://" + g.Addr()
	}
	post := func(base, event, from, ua string) {
		t.Helper()
		body := fmt.Sprintf(`[{"event":%q}]`, event)
		if r := testkit.Do(t, "POST", base+"/v1/batch", []byte(body), "Content-Type", "application/json", "X-Forwarded-For", from, "User-Agent", ua); r.Status != 200 {
			t.Fatalf("%s: %s", event, r)
		}
	}
	base := start(enrich.BotsTag)
	post(base, "v4", "192.0.2.10", e2eFirefox)
	post(base, "v6", "2001:db8:1::10", e2eFirefox)
	post(base, "tagged", "192.0.2.11", e2eGooglebot)
	recs := testkit.ConsumeN(t, brokers, p, 3, 0)
	want := map[string]string{
		"v4":     `{"ip":"192.0.2.10","geo":{"city":"Paris","country":"FR","lat":48.9,"lon":2.4,"region":"Île-de-France","region_code":"IDF"},"ua_parsed":{"browser":"Firefox","browser_version":"121.0","device":"desktop","os":"Windows","os_version":"10.0"}}`,
		"v6":     `{"ip":"2001:db8:1::10","geo":{"city":"Paris","country":"FR","lat":48.9,"lon":2.4,"region":"Île-de-France","region_code":"IDF"},"ua_parsed":{"browser":"Firefox","browser_version":"121.0","device":"desktop","os":"Windows","os_version":"10.0"}}`,
		"tagged": `{"bot":true,"ip":"192.0.2.11","geo":{"city":"Paris","country":"FR","lat":48.9,"lon":2.4,"region":"Île-de-France","region_code":"IDF"},"ua_parsed":{"browser":"Googlebot","browser_version":"2.1"}}`,
	}
	for _, r := range recs {
		sub := map[string]any{}
		for _, k := range []string{"ip", "geo", "ua_parsed", "bot"} {
			if v, ok := r.Fields[k]; ok {
				sub[k] = v
			}
		}
		var w map[string]any
		if err := json.Unmarshal([]byte(want[fmt.Sprint(r.Fields["event"])]), &w); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(sub)
		wantJSON, _ := json.Marshal(w)
		if string(got) != string(wantJSON) {
			t.Errorf("%v:\n got %s\nwant %s", r.Fields["event"], got, wantJSON)
		}
	}

	// The database replaced under load: no request fails, and the new
	// city shows.
	var stop atomic.Bool
	var failed, sent atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load() && n < 500; n++ {
				r := testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"load"}]`), "Content-Type", "application/json",
					"X-Forwarded-For", []string{"192.0.2.20", "2001:db8:1::20"}[i%2], "User-Agent", e2eFirefox)
				sent.Add(1)
				if r.Status != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // load under way before the swap
	if err := enrichtest.WriteCityDB(db, enrichtest.Build.Add(time.Hour), e2eCities("Lyon")); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, base, "inlet_geoip_reloads_total", 2)
	stop.Store(true)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed during the reload", failed.Load(), sent.Load())
	}
	t.Logf("%d requests during the reload, none failed", sent.Load())
	post(base, "after", "192.0.2.21", e2eFirefox)
	all := testkit.Consume(t, brokers, p, 30*time.Second, func(rs []testkit.Record) bool {
		return len(rs) > 0 && rs[len(rs)-1].Fields["event"] == "after"
	})
	last := all[len(all)-1].Fields["geo"].(map[string]any)
	if last["city"] != "Lyon" {
		t.Fatalf("after the reload: %v, want Lyon", last)
	}
	for _, r := range all[3:] {
		if g, _ := r.Fields["geo"].(map[string]any); g["city"] != "Paris" && g["city"] != "Lyon" {
			t.Fatalf("a record without its place during the reload: %s", r.Value)
		}
	}

	// --bots drop: the bot's request is answered, nothing is written.
	base = start(enrich.BotsDrop)
	post(base, "dropped", "192.0.2.12", e2eGooglebot)
	post(base, "kept", "192.0.2.13", e2eFirefox)
	all = testkit.Consume(t, brokers, p, 30*time.Second, func(rs []testkit.Record) bool {
		return len(rs) > 0 && rs[len(rs)-1].Fields["event"] == "kept"
	})
	for _, r := range all {
		if r.Fields["event"] == "dropped" {
			t.Fatalf("a dropped bot's event was written: %s", r.Value)
		}
	}
	if m := string(testkit.Do(t, "GET", base+"/metrics", nil).Body); !strings.Contains(m, `inlet_bot_requests_total{action="dropped"} 1`) {
		t.Errorf("the dropped request is not counted:\n%s", m)
	}
}
