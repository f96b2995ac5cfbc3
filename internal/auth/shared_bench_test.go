package auth

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// BenchmarkAllow is what a rate-limited request pays for its client's
// rate: local (the process's limiter) against redis (a round trip to a
// Redis of the benchmark's own on loopback, GCRA in its Lua script).
// ns/op, p50-ns and p99-ns are one caller's latency; cpu-ns/op this
// process's CPU, redis-cpu-ns/op Redis's (from INFO). The client's rate
// is high enough that every call is allowed: a refusal costs the same.
// Then the same from 32 goroutines (parallel: ns/op is then the
// throughput's inverse, latency not measured). Sub-benchmarks alternate,
// so -count N interleaves the rounds.
func BenchmarkAllow(b *testing.B) {
	rc := testkit.PrivateRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: rc.Addr})
	defer rdb.Close()
	for _, store := range []string{RateStoreLocal, RateStoreRedis} {
		b.Run(store, func(b *testing.B) {
			f := newSharedFixture(b, 1, store, rc.Addr, Client{Rate: 1e9, Burst: 1e6}, nil)
			a, p := f.as[0], f.principal(b)
			lat := make([]time.Duration, 0, b.N)
			rcpu0, cpu0 := redisCPU(b, rdb), testkit.CPUTime(b)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := a.Allow(p, 1); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			cpu, rcpu := testkit.CPUTime(b)-cpu0, redisCPU(b, rdb)-rcpu0
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(rcpu)/float64(b.N), "redis-cpu-ns/op")
			if a.m.fallbacks != nil {
				b.ReportMetric(testutil.ToFloat64(a.m.fallbacks), "fallbacks")
			}
		})
	}
	for _, store := range []string{RateStoreLocal, RateStoreRedis} {
		b.Run(store+"-parallel", func(b *testing.B) {
			f := newSharedFixture(b, 1, store, rc.Addr, Client{Rate: 1e9, Burst: 1e6}, nil)
			a, p := f.as[0], f.principal(b)
			rcpu0, cpu0 := redisCPU(b, rdb), testkit.CPUTime(b)
			b.SetParallelism(16) // 32 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := a.Allow(p, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			cpu, rcpu := testkit.CPUTime(b)-cpu0, redisCPU(b, rdb)-rcpu0
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(rcpu)/float64(b.N), "redis-cpu-ns/op")
			if a.m.fallbacks != nil {
				b.ReportMetric(testutil.ToFloat64(a.m.fallbacks), "fallbacks")
			}
		})
	}
}

// redisCPU is the CPU time Redis has used (INFO cpu: used_cpu_sys and
// used_cpu_user, its main thread and others).
func redisCPU(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var s float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			s += f
		}
	}
	return time.Duration(s * float64(time.Second))
}
