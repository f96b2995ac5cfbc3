package event

import (
	"math/rand/v2"
	"testing"
	"time"
)

// AppendTime writes what AppendFormat(TimeLayout) writes, for times of
// every year, zone and fraction.
func TestAppendTime(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -11*3600)}
	cases := []time.Time{time.Unix(0, 0), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(-5, 3, 1, 0, 0, 0, 0, time.UTC)}
	for range 20000 {
		cases = append(cases, time.Unix(r.Int64N(400*365*86400)-100*365*86400, r.Int64N(1e9)).In(zones[r.IntN(len(zones))]))
	}
	for _, c := range cases {
		if got, want := string(AppendTime(nil, c)), c.UTC().Format(TimeLayout); got != want {
			t.Fatalf("AppendTime(%v) = %s, want %s", c, got, want)
		}
	}
}

func BenchmarkAppendTime(b *testing.B) {
	t := time.Date(2026, 12, 5, 23, 10, 11, 123456789, time.UTC)
	buf := make([]byte, 0, 64)
	b.Run("AppendTime", func(b *testing.B) {
		for b.Loop() {
			buf = AppendTime(buf[:0], t)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = t.UTC().AppendFormat(buf[:0], TimeLayout)
		}
	})
}
