package ingest

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/enrich/enrichtest"
	"github.com/inlet-dev/inlet/internal/event"
)

const (
	testFirefox   = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
	testGooglebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
)

func newEnricher(tb testing.TB, edit func(*enrich.Config)) *enrich.Enricher {
	tb.Helper()
	cfg := enrich.DefaultConfig()
	edit(&cfg)
	e, err := enrich.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

func recordValue(tb testing.TB, r event.Record) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Value, &m); err != nil {
		tb.Fatalf("%s: %v", r.Value, err)
	}
	return m
}

// TestEnrichedRecords: every record of a request, batch and pixel, gets
// the enrichment of its address (through a trusted proxy's
// X-Forwarded-For) and User-Agent, after the fields it had.
func TestEnrichedRecords(t *testing.T) {
	db := filepath.Join(t.TempDir(), "city.mmdb")
	if err := enrichtest.WriteCityDB(db, enrichtest.Build, []enrichtest.City{
		{Network: "192.0.2.0/24", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: "Paris", Lat: 48.8566, Lon: 2.3522},
		{Network: "2001:db8:1::/48", Country: "JP", Region: "Tokyo", RegionCode: "13", Name: "Tokyo", Lat: 35.6895, Lon: 139.6917},
	}); err != nil {
		t.Fatal(err)
	}
	e := newEnricher(t, func(c *enrich.Config) { c.ParseUA, c.GeoIPDB = true, db })
	h := newHarness(t, func(c *Config) { c.TrustedProxies = loopback }, WithEnricher(e))

	if res := h.do(t, http.MethodPost, "/v1/batch", []byte(`[{"event":"a"},{"event":"b"}]`),
		"Content-Type", "application/json", "User-Agent", testFirefox, "X-Forwarded-For", "192.0.2.7"); res.status != http.StatusOK {
		t.Fatal(res)
	}
	if res := h.do(t, http.MethodGet, "/i?e=c", nil, "User-Agent", testFirefox, "X-Forwarded-For", "2001:db8:1::5"); res.status != http.StatusOK {
		t.Fatal(res)
	}
	recs := h.sink.records()
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for i, want := range []string{"Paris", "Paris", "Tokyo"} {
		v := recordValue(t, recs[i])
		geo, _ := v["geo"].(map[string]any)
		ua, _ := v["ua_parsed"].(map[string]any)
		if geo["city"] != want || ua["browser"] != "Firefox" || ua["os"] != "Linux" || ua["device"] != "desktop" || v["bot"] != nil {
			t.Errorf("record %d: %s", i, recs[i].Value)
		}
		if _, ok := geo["lat"]; ok {
			t.Errorf("record %d has coordinates without --geoip-precision: %s", i, recs[i].Value)
		}
	}
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func TestBotActions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bots  string
		ua    string
		topic string // of the records; "" none written
	}{
		{"tag", enrich.BotsTag, testGooglebot, "events"},
		{"drop", enrich.BotsDrop, testGooglebot, ""},
		{"route", enrich.BotsRoute, testGooglebot, "bots"},
		{"a person, drop", enrich.BotsDrop, testFirefox, "events"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnricher(t, func(c *enrich.Config) { c.ParseUA, c.Bots, c.BotTopic = true, tc.bots, "bots" })
			h := newHarness(t, nil, WithEnricher(e))
			res := h.do(t, http.MethodPost, "/v1/batch", []byte(`[{"event":"a"},{"event":"b"}]`), "Content-Type", "application/json", "User-Agent", tc.ua)
			if res.status != http.StatusOK || string(res.body) != "{\"accepted\":2,\"rejected\":[]}\n" {
				t.Fatalf("answer %s", res)
			}
			if res := h.do(t, http.MethodGet, "/i?e=c", nil, "User-Agent", tc.ua); res.status != http.StatusOK {
				t.Fatalf("pixel: %s", res)
			}
			recs := h.sink.records()
			if tc.topic == "" {
				if len(recs) != 0 {
					t.Fatalf("dropped, yet %d records written", len(recs))
				}
				return
			}
			if len(recs) != 3 {
				t.Fatalf("%d records, want 3", len(recs))
			}
			for _, r := range recs {
				bot := recordValue(t, r)["bot"] == true
				if r.Topic != tc.topic || bot != (tc.ua == testGooglebot) {
					t.Errorf("record to %s, bot %v: %s", r.Topic, bot, r.Value)
				}
			}
		})
	}
}

// BenchmarkIngestEnriched is BenchmarkIngest with every enrichment stage
// on: UA parsing (cached), geo-IP (httptest's client, 192.0.2.1, is in
// the database) and --bot-patterns.
func BenchmarkIngestEnriched(b *testing.B) {
	db := filepath.Join(b.TempDir(), "city.mmdb")
	if err := enrichtest.WriteCityDB(db, enrichtest.Build, []enrichtest.City{
		{Network: "192.0.2.0/24", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: "Paris", Lat: 48.8566, Lon: 2.3522},
	}); err != nil {
		b.Fatal(err)
	}
	e := newEnricher(b, func(c *enrich.Config) {
		c.ParseUA, c.GeoIPDB, c.GeoIPPrecision, c.BotPatterns = true, db, 2, []string{"bot", "crawler", "spider", "curl/"}
	})
	benchIngest(b, WithEnricher(e))
}
