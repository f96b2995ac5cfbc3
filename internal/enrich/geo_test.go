package enrich

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/enrich/enrichtest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// The test databases: Paris on a documentation IPv4 and IPv6 network; the
// second database moves both to Lyon.
var (
	paris = []enrichtest.City{
		{Network: "192.0.2.0/24", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: "Paris", Lat: 48.856614, Lon: 2.352222},
		{Network: "2001:db8:1::/48", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: "Paris", Lat: 48.856614, Lon: 2.352222},
	}
	lyon = []enrichtest.City{
		{Network: "192.0.2.0/24", Country: "FR", Region: "Auvergne-Rhône-Alpes", RegionCode: "ARA", Name: "Lyon", Lat: 45.764043, Lon: 4.835659},
		{Network: "2001:db8:1::/48", Country: "FR", Region: "Auvergne-Rhône-Alpes", RegionCode: "ARA", Name: "Lyon", Lat: 45.764043, Lon: 4.835659},
	}
)

func writeDB(tb testing.TB, path string, build time.Time, cities []enrichtest.City) {
	tb.Helper()
	if err := enrichtest.WriteCityDB(path, build, cities); err != nil {
		tb.Fatal(err)
	}
}

// fields decodes an Outcome's members as the record has them.
func fields(tb testing.TB, o Outcome) map[string]any {
	tb.Helper()
	m := map[string]any{}
	if err := json.Unmarshal([]byte("{"+strings.TrimPrefix(string(o.Fields), ",")+"}"), &m); err != nil {
		tb.Fatalf("%s: %v", o.Fields, err)
	}
	return m
}

func request(ua string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://inlet/v1/batch", nil)
	r.Header.Set("User-Agent", ua)
	return r
}

func TestGeoIPv4AndIPv6(t *testing.T) {
	path := filepath.Join(t.TempDir(), "city.mmdb")
	writeDB(t, path, enrichtest.Build, paris)
	log, _ := testkit.NewLogBuffer()
	for _, tc := range []struct {
		name      string
		precision int
		ip        string
		want      string
	}{
		{"IPv4", -1, "192.0.2.7", `{"geo":{"country":"FR","region":"Île-de-France","region_code":"IDF","city":"Paris"}}`},
		{"IPv6", -1, "2001:db8:1::42", `{"geo":{"country":"FR","region":"Île-de-France","region_code":"IDF","city":"Paris"}}`},
		{"IPv4-mapped IPv6", -1, "::ffff:192.0.2.7", `{"geo":{"country":"FR","region":"Île-de-France","region_code":"IDF","city":"Paris"}}`},
		{"coordinates to 2 decimals", 2, "192.0.2.7", `{"geo":{"country":"FR","region":"Île-de-France","region_code":"IDF","city":"Paris","lat":48.86,"lon":2.35}}`},
		{"coordinates to 0 decimals", 0, "2001:db8:1::42", `{"geo":{"country":"FR","region":"Île-de-France","region_code":"IDF","city":"Paris","lat":49,"lon":2}}`},
		{"not in the database", -1, "198.51.100.1", `{}`},
		{"no address", -1, "", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GeoIPDB, cfg.GeoIPPrecision = path, tc.precision
			e, err := New(cfg, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			o := e.Request(request("x"), tc.ip)
			if got := "{" + strings.TrimPrefix(string(o.Fields), ",") + "}"; got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNoDatabaseSaysSoOnce(t *testing.T) {
	log, logs := testkit.NewLogBuffer()
	e, err := New(DefaultConfig(), log, nil)
	if err != nil || e != nil {
		t.Fatalf("every stage off: got %v, %v; want no Enricher", e, err)
	}
	if n := strings.Count(logs.String(), "no geo-IP database"); n != 1 {
		t.Errorf("said %d times: %s", n, logs.String())
	}
}

// TestGeoReload swaps the database under concurrent lookups: every lookup
// finds a city (Paris, then Lyon, never nothing), a corrupt or missing
// file keeps the database loaded before, logged and counted, and the build
// time metric follows the database serving.
func TestGeoReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "city.mmdb")
	writeDB(t, path, enrichtest.Build, paris)
	log, logs := testkit.NewLogBuffer()
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.GeoIPDB = path
	e, err := New(cfg, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	city := func(ip string) string {
		g, _ := fields(t, e.Request(request("x"), ip))["geo"].(map[string]any)
		s, _ := g["city"].(string)
		return s
	}

	var stop atomic.Bool
	var failed, done atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := []string{"192.0.2.9", "2001:db8:1::9"}[i%2]
			for !stop.Load() {
				if c := city(ip); c != "Paris" && c != "Lyon" {
					failed.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	later := enrichtest.Build.Add(24 * time.Hour)
	for i := range 6 { // Paris and Lyon in turn, each a new file renamed over the old
		db, build := lyon, later
		if i%2 == 1 {
			db, build = paris, enrichtest.Build
		}
		writeDB(t, path, build, db)
		if err := e.GeoDB().Reload(); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() > 0 || done.Load() == 0 {
		t.Fatalf("%d of %d lookups during reloads found no city", failed.Load(), done.Load())
	}
	if c := city("192.0.2.9"); c != "Paris" {
		t.Fatalf("after the reloads: %q, want Paris", c)
	}
	if got := testutil.ToFloat64(e.m.geoBuild); got != float64(enrichtest.Build.Unix()) {
		t.Errorf("build time metric %v, want %v", got, enrichtest.Build.Unix())
	}

	// A corrupt file, then a missing one: Paris keeps serving.
	if err := os.WriteFile(path, []byte("not a database"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.GeoDB().Reload(); err == nil {
		t.Error("a corrupt file was loaded")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := e.GeoDB().reload(false); err == nil {
		t.Error("a missing file was loaded")
	}
	if c := city("2001:db8:1::1"); c != "Paris" {
		t.Errorf("after a bad reload: %q, want Paris", c)
	}
	if got := testutil.ToFloat64(e.m.geoReloadErrors); got != 2 {
		t.Errorf("reload errors %v, want 2", got)
	}
	if n := strings.Count(logs.String(), "geo-IP database not reloaded"); n != 2 {
		t.Errorf("%d reload failures logged, want 2:\n%s", n, logs.String())
	}

	// The poll sees a new file by itself.
	writeDB(t, path, later, lyon)
	e.GeoDB().Close()
	e.GeoDB().Start(10 * time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for city("192.0.2.9") != "Lyon" {
		if time.Now().After(deadline) {
			t.Fatalf("the poll did not load the new file in 10 s:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOpenRefusesBadDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.mmdb")
	if err := os.WriteFile(path, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GeoIPDB = path
	if _, err := New(cfg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("a corrupt database at start was taken")
	}
	cfg.GeoIPDB = path + ".missing"
	if _, err := New(cfg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("a missing database at start was taken")
	}
}

func TestBots(t *testing.T) {
	const googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
	const firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
	for _, tc := range []struct {
		name    string
		cfg     func(*Config)
		ua      string
		want    string // the fields
		drop    bool
		topic   string
		counted string
	}{
		{"parser's flag, tagged", func(c *Config) { c.ParseUA = true }, googlebot, `"bot":true`, false, "", "tagged"},
		{"pattern, tagged", func(c *Config) { c.BotPatterns = []string{"MyMonitor"} }, "mymonitor/1.0", `,"bot":true`, false, "", "tagged"},
		{"pattern, dropped", func(c *Config) { c.BotPatterns = []string{"curl/"}; c.Bots = BotsDrop }, "curl/8.5.0", `,"bot":true`, true, "", "dropped"},
		{"parser's flag, routed", func(c *Config) { c.ParseUA = true; c.Bots = BotsRoute; c.BotTopic = "bots" }, googlebot, `"bot":true`, false, "bots", "routed"},
		{"a person", func(c *Config) { c.ParseUA = true; c.BotPatterns = []string{"bot"}; c.Bots = BotsDrop }, firefox, `"ua_parsed":{"browser":"Firefox","browser_version":"120.0","os":"Linux","device":"desktop"}`, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			e, err := New(cfg, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			before := testutil.ToFloat64(e.m.bots.WithLabelValues(tc.counted))
			o := e.Request(request(tc.ua), "")
			if !strings.HasSuffix(string(o.Fields), tc.want) || o.Drop != tc.drop || o.Topic != tc.topic || o.Bot != (tc.counted != "") {
				t.Errorf("got %+v (%s)", o, o.Fields)
			}
			if tc.counted != "" && testutil.ToFloat64(e.m.bots.WithLabelValues(tc.counted))-before != 1 {
				t.Errorf("not counted as %s", tc.counted)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{Bots: "block"},
		{Bots: BotsRoute},
		{Bots: BotsTag, GeoIPPrecision: 7},
		{Bots: BotsTag, BotPatterns: []string{" "}},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v taken", c)
		}
	}
}
