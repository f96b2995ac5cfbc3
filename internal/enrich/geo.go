package enrich

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/oschwald/maxminddb-golang/v2"

	"github.com/inlet-dev/inlet/internal/filewatch"
)

// Place is what a city database tells of an address; "" when unknown.
type Place struct {
	Country    string // ISO 3166-1 alpha-2 code
	Region     string // the first subdivision's English name
	RegionCode string // its ISO 3166-2 code (without the country)
	City       string // English name
	Lat, Lon   float64
	HasCoords  bool
}

// cityRecord is what is decoded of a GeoIP2/GeoLite2/DB-IP City record:
// English names only, so that a lookup makes no map.
type cityRecord struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Subdivisions []struct {
		ISOCode string `maxminddb:"iso_code"`
		Names   struct {
			En string `maxminddb:"en"`
		} `maxminddb:"names"`
	} `maxminddb:"subdivisions"`
	City struct {
		Names struct {
			En string `maxminddb:"en"`
		} `maxminddb:"names"`
	} `maxminddb:"city"`
	Location struct {
		Latitude  *float64 `maxminddb:"latitude"`
		Longitude *float64 `maxminddb:"longitude"`
	} `maxminddb:"location"`
}

// GeoDB holds a city database read from a file and reloads it when the
// file changes. Lookup is safe for concurrent use and never waits for a
// reload: the new database replaces the old one at once (the database is
// read into memory, not mapped, so an old one in use stays valid until its
// last lookup returns). A file missing or unreadable at a reload keeps the
// old database, logged and counted.
type GeoDB struct {
	path      string
	precision int // of the "geo" members appendPlace makes
	log       *slog.Logger
	m         *Metrics
	cur       atomic.Pointer[geoState]

	mu   sync.Mutex // one reload at a time; guards file
	file *filewatch.File

	poll filewatch.Poller
}

// geoState is a database loaded, with the "geo" members made of its
// records, by record (many networks share one: a city's), at most
// maxGeoMembers; past it, members are made for each lookup.
type geoState struct {
	r       *maxminddb.Reader
	mu      sync.RWMutex
	members map[uintptr][]byte
}

// maxGeoMembers bounds a database's members kept: about 100 bytes each.
// GeoLite2-City has about 150,000 distinct records.
const maxGeoMembers = 1 << 16

// OpenGeoDB reads the database at path (an error if it cannot be used).
// Its "geo" members have the coordinates rounded to precision decimals
// (negative: none).
func OpenGeoDB(path string, precision int, log *slog.Logger, m *Metrics) (*GeoDB, error) {
	if m == nil {
		m = NewMetrics(nil)
	}
	g := &GeoDB{path: path, precision: precision, log: log, m: m, file: filewatch.NewFile(path)}
	if err := g.Reload(); err != nil {
		return nil, err
	}
	return g, nil
}

// Reload reads the file now; on an error the database loaded before (if
// any) keeps serving.
func (g *GeoDB) Reload() error { return g.reload(true) }

// Check looks at the file now, as the poll does, and reloads it if it
// changed.
func (g *GeoDB) Check() error { return g.reload(false) }

func (g *GeoDB) reload(force bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.file.Changed(force) {
		return nil
	}
	err := g.load()
	if err != nil {
		g.m.geoReloadErrors.Inc()
		if g.cur.Load() != nil {
			g.log.Error("geo-IP database not reloaded: the one loaded before keeps serving", "file", g.path, "err", err)
		}
	}
	return err
}

// load reads and checks the file, and swaps it in.
// g.mu must be held.
func (g *GeoDB) load() error {
	b, err := os.ReadFile(g.path)
	if err != nil {
		return fmt.Errorf("reading geo-IP database: %w", err)
	}
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return fmt.Errorf("opening geo-IP database %s: %w", g.path, err)
	}
	if err := r.Verify(); err != nil {
		return fmt.Errorf("checking geo-IP database %s: %w", g.path, err)
	}
	g.cur.Store(&geoState{r: r, members: map[uintptr][]byte{}})
	md := r.Metadata
	g.m.geoBuild.Set(float64(md.BuildEpoch))
	g.m.geoReloads.Inc()
	g.log.Info("geo-IP database loaded", "file", g.path, "type", md.DatabaseType, "built", md.BuildTime().UTC().Format(time.RFC3339), "nodes", md.NodeCount)
	return nil
}

// Start polls the file every interval until Close.
func (g *GeoDB) Start(interval time.Duration) {
	g.poll.Start(interval, func() { _ = g.Check() })
}

// Close stops the poll and waits for it.
func (g *GeoDB) Close() { g.poll.Close() }

// Lookup returns the place of a; ok is false when the database has none.
func (g *GeoDB) Lookup(a netip.Addr) (p Place, ok bool) {
	res := g.cur.Load().r.Lookup(a.Unmap())
	if !res.Found() {
		return p, false
	}
	return decodePlace(res)
}

// appendPlace appends the "geo" member of a to dst (with its comma), and
// reports whether the database has a place for a.
func (g *GeoDB) appendPlace(dst []byte, a netip.Addr) ([]byte, bool) {
	st := g.cur.Load()
	res := st.r.Lookup(a.Unmap())
	if !res.Found() {
		return dst, false
	}
	off := res.Offset()
	st.mu.RLock()
	m, ok := st.members[off]
	st.mu.RUnlock()
	if ok {
		return append(dst, m...), true
	}
	p, ok := decodePlace(res)
	if !ok {
		return dst, false
	}
	m = appendGeo(nil, p, g.precision)
	st.mu.Lock()
	if len(st.members) < maxGeoMembers {
		st.members[off] = m
	}
	st.mu.Unlock()
	return append(dst, m...), true
}

func decodePlace(res maxminddb.Result) (p Place, ok bool) {
	var rec cityRecord
	if err := res.Decode(&rec); err != nil {
		return p, false
	}
	p.Country, p.City = rec.Country.ISOCode, rec.City.Names.En
	if len(rec.Subdivisions) > 0 {
		p.Region, p.RegionCode = rec.Subdivisions[0].Names.En, rec.Subdivisions[0].ISOCode
	}
	if rec.Location.Latitude != nil && rec.Location.Longitude != nil {
		p.Lat, p.Lon, p.HasCoords = *rec.Location.Latitude, *rec.Location.Longitude, true
	}
	return p, true
}

// appendGeo appends p as the record's "geo" member (with its comma), with
// the coordinates rounded to precision decimals (negative: none).
func appendGeo(dst []byte, p Place, precision int) []byte {
	dst = append(dst, `,"geo":{`...)
	n := len(dst)
	for _, f := range [...]struct{ k, v string }{
		{"country", p.Country}, {"region", p.Region}, {"region_code", p.RegionCode}, {"city", p.City},
	} {
		if f.v == "" {
			continue
		}
		if len(dst) > n {
			dst = append(dst, ',')
		}
		dst, _ = jsontext.AppendQuote(append(dst, `"`+f.k+`":`...), f.v)
	}
	if p.HasCoords && precision >= 0 {
		if len(dst) > n {
			dst = append(dst, ',')
		}
		dst = append(dst, `"lat":`...)
		dst = appendRounded(dst, p.Lat, precision)
		dst = append(dst, `,"lon":`...)
		dst = appendRounded(dst, p.Lon, precision)
	}
	return append(dst, '}')
}

func appendRounded(dst []byte, f float64, precision int) []byte {
	s := math.Pow10(precision)
	return strconv.AppendFloat(dst, math.Round(f*s)/s, 'f', -1, 64)
}
