package bench

import (
	"fmt"
	"math"
	"time"
)

// Pacer says when each request of an open-loop run is meant to be sent: at
// From requests per second until Hold, then at a rate that changes linearly
// from From to To over Ramp, then at To. With From == To it is a constant
// rate, and request n is due at exactly n/rate.
//
// A Pacer is a value without state, safe for concurrent use.
type Pacer struct {
	From, To float64 // requests per second
	Hold     time.Duration
	Ramp     time.Duration
}

// ConstantPacer paces requests at rate per second.
func ConstantPacer(rate float64) Pacer { return Pacer{From: rate, To: rate} }

// Validate reports a pacer that cannot pace.
func (p Pacer) Validate() error {
	switch {
	case math.IsNaN(p.From) || math.IsNaN(p.To) || math.IsInf(p.From, 0) || math.IsInf(p.To, 0):
		return fmt.Errorf("bench: rate must be a finite number")
	case p.From < 0 || p.To <= 0:
		return fmt.Errorf("bench: rate must be positive (start %g, end %g)", p.From, p.To)
	case p.Hold > 0 && p.From == 0:
		return fmt.Errorf("bench: a start rate of 0 cannot be held for %v", p.Hold)
	case p.Hold < 0 || p.Ramp < 0:
		return fmt.Errorf("bench: negative pacer durations")
	}
	return nil
}

// Offset is the time after the start at which request n (counting from 0) is
// due. A pacer that never reaches n answers math.MaxInt64.
func (p Pacer) Offset(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	if p.From == p.To && p.From > 0 {
		// n·1e9 is exact well past any run's length, so one rounding.
		return nanos(float64(n) * 1e9 / p.To)
	}
	x := float64(n)
	held := p.From * p.Hold.Seconds()
	if x < held {
		return seconds(x / p.From)
	}
	x -= held
	r := p.Ramp.Seconds()
	ramped := (p.From + p.To) / 2 * r
	if r > 0 && x < ramped {
		// Requests sent t seconds into the ramp: From·t + a·t², a = (To−From)/2r.
		// This form of the root is stable for a near 0 and for a < 0.
		a := (p.To - p.From) / (2 * r)
		d := p.From*p.From + 4*a*x
		if d < 0 {
			d = 0
		}
		return p.Hold + seconds(2*x/(p.From+math.Sqrt(d)))
	}
	return p.Hold + p.Ramp + seconds((x-ramped)/p.To)
}

// Count is the number of requests due before t after the start: the n with
// Offset(n) < t, so Count and Offset agree exactly.
func (p Pacer) Count(t time.Duration) int64 {
	if t <= 0 {
		return 0
	}
	s := t.Seconds()
	var est float64
	switch hold, ramp := p.Hold.Seconds(), p.Ramp.Seconds(); {
	case s <= hold:
		est = p.From * s
	case s <= hold+ramp:
		u := s - hold
		est = p.From*hold + p.From*u + (p.To-p.From)/(2*ramp)*u*u
	default:
		est = p.From*hold + (p.From+p.To)/2*ramp + p.To*(s-hold-ramp)
	}
	n := int64(math.Ceil(est))
	for n > 0 && p.Offset(n-1) >= t {
		n--
	}
	for p.Offset(n) < t {
		n++
	}
	return n
}

func seconds(s float64) time.Duration { return nanos(s * 1e9) }

func nanos(ns float64) time.Duration {
	if ns >= math.MaxInt64 || math.IsNaN(ns) {
		return math.MaxInt64
	}
	return time.Duration(math.Round(ns))
}
