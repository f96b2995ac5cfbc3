package privacy

import (
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// cpuPerOp reports the process's CPU time per op from cpu0 on: ns/op is
// wall time, which other processes on a loaded machine stretch.
func cpuPerOp(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkIP is the policy's cost on one address (once per request).
func BenchmarkIP(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    Policy
		addr string
	}{
		{"keep", Keep, "203.0.113.77"},
		{"truncate/v4", Truncate, "203.0.113.77"},
		{"truncate/v6", Truncate, "2001:db8:abcd:12:3:4:5:6"},
		{"drop", Drop, "203.0.113.77"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := testkit.CPUTime(b)
			for b.Loop() {
				_ = defIP.Apply(tc.p, tc.addr)
			}
			cpuPerOp(b, cpu0)
		})
	}
}

// BenchmarkRedact is 3 rules (two hits, one absent path) on an enriched
// event of 330 bytes: Apply (dead letters) and ApplyValid (records).
func BenchmarkRedact(b *testing.B) {
	rs, err := Compile([]Rule{
		{Path: "props.user.email", Action: ActionHash},
		{Path: "props.card", Action: ActionDrop},
		{Path: "context.traits.phone", Action: ActionHash},
	})
	if err != nil {
		b.Fatal(err)
	}
	ev := []byte(`{"event":"checkout","uid":"user-0042","props":{"path":"/pricing","user":{"email":"ann@example.com","plan":"pro"},"card":"4111111111111111"},"context":{"page":{"title":"Pricing"}},"id":"01a2485a-bd05-79c4-9b6f-6ebc1d54c6a1","received_at":"2026-12-05T22:30:13.457747498Z","ip":"203.0.113.77","ua":"Mozilla/5.0","client":"web"}`)
	for _, tc := range []struct {
		name  string
		apply func(dst, v, key []byte) ([]byte, error)
	}{{"Apply", rs.Apply}, {"ApplyValid", rs.ApplyValid}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			out := make([]byte, 0, len(ev))
			cpu0 := testkit.CPUTime(b)
			for b.Loop() {
				if out, err = tc.apply(out[:0], ev, testKey); err != nil {
					b.Fatal(err)
				}
			}
			cpuPerOp(b, cpu0)
		})
	}
}

// BenchmarkMayApply is the check that spares an event no rule names the
// pass: 3 rules, on the same event without those fields.
func BenchmarkMayApply(b *testing.B) {
	rs, _ := Compile([]Rule{{Path: "props.user.phone", Action: ActionHash}, {Path: "props.ssn", Action: ActionDrop}, {Path: "context.traits.birthday", Action: ActionHash}})
	ev := []byte(`{"event":"checkout","uid":"user-0042","props":{"path":"/pricing","user":{"email":"ann@example.com","plan":"pro"},"card":"4111111111111111"},"context":{"page":{"title":"Pricing"}},"id":"01a2485a-bd05-79c4-9b6f-6ebc1d54c6a1","received_at":"2026-12-05T22:30:13.457747498Z","ip":"203.0.113.77","ua":"Mozilla/5.0","client":"web"}`)
	b.ReportAllocs()
	cpu0 := testkit.CPUTime(b)
	for b.Loop() {
		if rs.MayApply(ev) {
			b.Fatal("a rule may apply")
		}
	}
	cpuPerOp(b, cpu0)
}
