package bench

import (
	"math"
	"math/big"
	"testing"
	"time"
)

func TestBenchPacerConstantSpacing(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1, 3, 100, 1000, 12345.6, 250000} {
		p := ConstantPacer(rate)
		step := 1e9 / rate
		for _, n := range []int64{1, 2, 3, 1000, 999_999, 10_000_000, int64(rate * 86400)} {
			if n > int64(rate*86400) {
				continue // past the longest run (24 h)
			}
			got := p.Offset(n)
			// Exactly n/rate, to the nanosecond.
			exact := new(big.Rat).Quo(new(big.Rat).Mul(big.NewRat(n, 1), big.NewRat(1e9, 1)), new(big.Rat).SetFloat64(rate))
			if diff, _ := new(big.Rat).Sub(exact, new(big.Rat).SetInt64(int64(got))).Float64(); math.Abs(diff) > 0.5+1e-9 {
				t.Fatalf("rate %g: request %d due at %v, want %sns", rate, n, got, exact.FloatString(1))
			}
			if gap := float64(got - p.Offset(n-1)); math.Abs(gap-step) > 1 {
				t.Fatalf("rate %g: gap before request %d is %vns, want %vns", rate, n, gap, step)
			}
		}
		if p.Offset(0) != 0 {
			t.Fatalf("rate %g: the first request is due at %v, want 0", rate, p.Offset(0))
		}
	}
}

func TestBenchPacerRamp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		p    Pacer
	}{
		{"up with hold", Pacer{From: 100, To: 300, Hold: 2 * time.Second, Ramp: 10 * time.Second}},
		{"down", Pacer{From: 300, To: 100, Ramp: 10 * time.Second}},
		{"up from zero", Pacer{From: 0, To: 200, Ramp: 10 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.p
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			// Requests due by the end of the hold and of the ramp: the areas
			// under the rate.
			held := int64(p.From * p.Hold.Seconds())
			ramped := held + int64((p.From+p.To)/2*p.Ramp.Seconds())
			if got := p.Count(p.Hold); got != held {
				t.Errorf("%d requests due during the hold, want %d", got, held)
			}
			if got := p.Count(p.Hold + p.Ramp); got < ramped || got > ramped+1 {
				t.Errorf("%d requests due by the end of the ramp, want %d", got, ramped)
			}
			// The gap between requests is 1/rate at their time, and times rise.
			prev := time.Duration(-1)
			for n := int64(1); n < ramped+500; n++ {
				at := p.Offset(n)
				if at <= prev {
					t.Fatalf("request %d due at %v, not after request %d at %v", n, at, n-1, prev)
				}
				prev = at
				if n%97 != 0 {
					continue
				}
				gap := (at - p.Offset(n-1)).Seconds()
				want := 1 / intendedRate(p, at)
				if math.Abs(gap-want) > 0.02*want+1e-6 {
					t.Fatalf("request %d at %v: gap %.6fs, want 1/%.1f = %.6fs", n, at, gap, intendedRate(p, at), want)
				}
			}
			// Count and Offset agree exactly.
			for ms := int64(0); ms < 14000; ms += 37 {
				at := time.Duration(ms) * time.Millisecond
				c := p.Count(at)
				if c > 0 && p.Offset(c-1) >= at || p.Offset(c) < at {
					t.Fatalf("Count(%v) = %d, but Offset(%d) = %v, Offset(%d) = %v", at, c, c-1, p.Offset(c-1), c, p.Offset(c))
				}
			}
		})
	}
}

func TestBenchPacerValidate(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]Pacer{
		"zero":          {},
		"negative":      {From: -1, To: 10},
		"NaN":           {From: math.NaN(), To: 10},
		"held zero":     {From: 0, To: 10, Hold: time.Second, Ramp: time.Second},
		"ramp to zero":  {From: 10, To: 0, Ramp: time.Second},
		"negative hold": {From: 1, To: 1, Hold: -1},
	} {
		if p.Validate() == nil {
			t.Errorf("%s: %+v accepted", name, p)
		}
	}
}

// intendedRate is the rate p intends at t after the start.
func intendedRate(p Pacer, t time.Duration) float64 {
	switch {
	case t < p.Hold:
		return p.From
	case t >= p.Hold+p.Ramp || p.Ramp == 0:
		return p.To
	}
	f := (t - p.Hold).Seconds() / p.Ramp.Seconds()
	return p.From + (p.To-p.From)*f
}
