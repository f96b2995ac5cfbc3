package enrich

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/inlet-dev/inlet/internal/enrich/enrichtest"
)

// benchGeoDB writes, once per run, a city database of
// $INLET_BENCH_GEO_NETWORKS networks (default 200000; GeoLite2-City has
// about 5 million, and a lookup's depth grows with their log) and returns
// its path and addresses in it.
func benchGeoDB(b *testing.B) (string, []netip.Addr) {
	b.Helper()
	n := 200_000
	if s := os.Getenv("INLET_BENCH_GEO_NETWORKS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("inlet-bench-city-%d.mmdb", n))
	hits, err := enrichtest.WriteRandomCityDB(path+".new", n, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		b.Fatal(err)
	}
	return path, hits
}

// BenchmarkRequest is the cost of each stage for one request (all the
// events of a request share it: divide by the events of a request for
// the cost per event), against no Enricher at all.
func BenchmarkRequest(b *testing.B) {
	cases := loadUACases(b)
	uas := make([]string, 0, len(cases))
	for _, c := range cases {
		uas = append(uas, c.UA)
	}
	const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	db, hits := benchGeoDB(b)
	log := slog.New(slog.DiscardHandler)
	run := func(b *testing.B, cfg Config, ua func(i int) string, ip func(i int) string) {
		e, err := New(cfg, log, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		r := request(chrome)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Header["User-Agent"][0] = ua(i)
			if e != nil {
				e.Request(r, ip(i))
			}
			i++
		}
	}
	one := func(int) string { return chrome }
	list := func(i int) string { return uas[i%len(uas)] }
	// uncached: a User-Agent never seen (the list's, made unique).
	fresh := func(i int) string { return uas[i%len(uas)] + " x/" + strconv.Itoa(i) }
	noIP := func(int) string { return "" }
	geoIP := func(i int) string { return hits[i%len(hits)].String() }
	off := DefaultConfig()
	ua := DefaultConfig()
	ua.ParseUA = true
	uaNoCache := ua
	uaNoCache.UACacheSize = 0
	geo := DefaultConfig()
	geo.GeoIPDB = db
	geoCoords := geo
	geoCoords.GeoIPPrecision = 2
	bots := DefaultConfig()
	bots.BotPatterns = docBotPatterns
	all := ua
	all.GeoIPDB, all.BotPatterns = db, docBotPatterns
	b.Run("off", func(b *testing.B) { run(b, off, one, noIP) })
	b.Run("ua/cached-one", func(b *testing.B) { run(b, ua, one, noIP) })
	b.Run("ua/cached-list", func(b *testing.B) { run(b, ua, list, noIP) })
	b.Run("ua/uncached", func(b *testing.B) { run(b, uaNoCache, list, noIP) })
	b.Run("ua/cache-miss", func(b *testing.B) { run(b, ua, fresh, noIP) })
	b.Run("geo", func(b *testing.B) { run(b, geo, one, geoIP) })
	b.Run("geo/coordinates", func(b *testing.B) { run(b, geoCoords, one, geoIP) })
	b.Run("bot-patterns", func(b *testing.B) { run(b, bots, list, noIP) })
	b.Run("all", func(b *testing.B) { run(b, all, list, geoIP) })
}
