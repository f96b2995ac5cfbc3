// Command mkcitydb writes a city database in MaxMind's format of made-up
// places, as large as a real one, for benchmarks (see docs/enrichment.md):
//
//	go run ./internal/enrich/enrichtest/mkcitydb -n 1000000 -o /tmp/city.mmdb
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/inlet-dev/inlet/internal/enrich/enrichtest"
)

func main() {
	n := flag.Int("n", 1_000_000, "networks (half /24 IPv4, half /48 IPv6)")
	out := flag.String("o", "city.mmdb", "database file written")
	seed := flag.Uint64("seed", 1, "random seed: the same seed writes the same database")
	flag.Parse()
	start := time.Now()
	if _, err := enrichtest.WriteRandomCityDB(*out, *n, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "mkcitydb:", err)
		os.Exit(1)
	}
	fi, _ := os.Stat(*out)
	fmt.Printf("%s: %d networks, %d bytes, in %s\n", *out, *n, fi.Size(), time.Since(start).Round(time.Millisecond))
}
