// Package enrichtest writes city databases in MaxMind's format for tests
// and benchmarks, with github.com/maxmind/mmdbwriter: nothing downloaded.
package enrichtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// City is one network's record, as GeoIP2/GeoLite2-City lay it out.
type City struct {
	Network            string // CIDR prefix, IPv4 or IPv6
	Country            string // ISO code
	Region, RegionCode string
	Name               string // the city's English name
	Lat, Lon           float64
}

// Build is the build time WriteCityDB stamps on its databases.
var Build = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// WriteCityDB writes a GeoIP2-City database of cities to path, built at
// build. Documentation ranges (192.0.2.0/24, 2001:db8::/32) are allowed.
func WriteCityDB(path string, build time.Time, cities []City) error {
	t, err := newTree(build)
	if err != nil {
		return err
	}
	for _, c := range cities {
		_, n, err := net.ParseCIDR(c.Network)
		if err != nil {
			return fmt.Errorf("city %s: %w", c.Name, err)
		}
		if err := t.Insert(n, record(c)); err != nil {
			return fmt.Errorf("inserting %s: %w", c.Network, err)
		}
	}
	return write(t, path)
}

// WriteRandomCityDB writes a database of n networks (/24 IPv4 and /48
// IPv6, in turn, at random places) of a few thousand made-up cities, as
// large as a real city database (GeoLite2-City has about 5 million
// networks): for benchmarks. The same seed writes the same database.
// It returns addresses that are in it. The documentation ranges hold
// Demo's places.
func WriteRandomCityDB(path string, n int, seed uint64) ([]netip.Addr, error) {
	t, err := newTree(Build)
	if err != nil {
		return nil, err
	}
	rnd := rand.New(rand.NewPCG(seed, seed))
	const cities = 5000
	recs := make([]mmdbtype.Map, cities)
	for i := range recs {
		recs[i] = record(City{Country: fmt.Sprintf("%c%c", 'A'+i%26, 'A'+i/26%26), Region: fmt.Sprintf("Region %d", i%400),
			RegionCode: fmt.Sprint(i % 400), Name: fmt.Sprintf("City %d", i), Lat: rnd.Float64()*180 - 90, Lon: rnd.Float64()*360 - 180})
	}
	var hits []netip.Addr
	for i := range n {
		var a netip.Addr
		bits := 24
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte{byte(1 + rnd.IntN(222)), byte(rnd.IntN(256)), byte(rnd.IntN(256)), 0})
		} else {
			var b [16]byte
			b[0], b[1] = 0x2a, byte(rnd.IntN(16)) // 2a00::/12: no 6to4 (2002::/16) alias
			for j := 2; j < 6; j++ {
				b[j] = byte(rnd.IntN(256))
			}
			a, bits = netip.AddrFrom16(b), 48
		}
		ip := net.IP(a.AsSlice())
		if err := t.Insert(&net.IPNet{IP: ip, Mask: net.CIDRMask(bits, len(ip)*8)}, recs[rnd.IntN(cities)]); err != nil {
			return nil, fmt.Errorf("inserting %s/%d: %w", a, bits, err)
		}
		if i < 1000 {
			hits = append(hits, a.Next())
		}
	}
	for _, c := range Demo { // last: no random network hides them
		_, nw, _ := net.ParseCIDR(c.Network)
		if err := t.Insert(nw, record(c)); err != nil {
			return nil, err
		}
	}
	return hits, write(t, path)
}

// Demo are the places WriteRandomCityDB puts on the documentation ranges,
// for docs/enrichment.md's examples.
var Demo = []City{
	{Network: "192.0.2.0/24", Country: "FR", Region: "Île-de-France", RegionCode: "IDF", Name: "Paris", Lat: 48.8566, Lon: 2.3522},
	{Network: "2001:db8::/32", Country: "JP", Region: "Tokyo", RegionCode: "13", Name: "Tokyo", Lat: 35.6895, Lon: 139.6917},
}

func newTree(build time.Time) (*mmdbwriter.Tree, error) {
	return mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            "GeoIP2-City",
		Description:             map[string]string{"en": "inlet test city database"},
		Languages:               []string{"en"},
		RecordSize:              28,
		IPVersion:               6,
		IncludeReservedNetworks: true,
		BuildEpoch:              build.Unix(),
	})
}

func record(c City) mmdbtype.Map {
	en := func(s string) mmdbtype.Map { return mmdbtype.Map{"en": mmdbtype.String(s)} }
	m := mmdbtype.Map{
		"country":  mmdbtype.Map{"iso_code": mmdbtype.String(c.Country), "names": en(c.Country)},
		"location": mmdbtype.Map{"latitude": mmdbtype.Float64(c.Lat), "longitude": mmdbtype.Float64(c.Lon), "accuracy_radius": mmdbtype.Uint16(20)},
	}
	if c.Name != "" {
		m["city"] = mmdbtype.Map{"names": en(c.Name), "geoname_id": mmdbtype.Uint32(1)}
	}
	if c.Region != "" {
		m["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String(c.RegionCode), "names": en(c.Region)}}
	}
	return m
}

// write writes t to path through a temporary file renamed over it, as an
// operator's update should, so that a reader never sees half a file.
func write(t *mmdbwriter.Tree, path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := t.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
