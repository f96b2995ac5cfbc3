package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// The fleet of TestFleetRateLimit: one client at fleetRate events/s
// (burst fleetBurst), sent fleetLoad single-event requests/s round robin
// over three instances for fleetPhase: well over its rate on each.
const (
	fleetRate  = 100
	fleetBurst = 5
	fleetLoad  = 600
	fleetPhase = 2 * time.Second
)

// TestFleetRateLimit is the proof of shared rates: three gateways
// on one Redis hold one client to its rate together (within 10%), where
// three without it allow it three times over; with Redis stopped each
// instance's own limit applies (about three times the rate, never
// nothing), the fallback counted on every instance.
func TestFleetRateLimit(t *testing.T) {
	brokers := testkit.Brokers(t)
	rc := testkit.PrivateRedis(t)
	clients := filepath.Join(t.TempDir(), "clients.json")
	secret, err := auth.AddClient(clients, auth.Client{ID: "fleet", Rate: fleetRate, Burst: fleetBurst})
	if err != nil {
		t.Fatal(err)
	}
	topic := testkit.Unique(t, "t-")
	fleet := func(store string) []*fleetInstance {
		var fl []*fleetInstance
		for range 3 {
			cfg := gatewaytest.Config(t, brokers, topic)
			cfg.Ack = gateway.AckNone // the limiter, not the produce path, is under test
			cfg.Auth.ClientsFile, cfg.Auth.HTTP = clients, true
			cfg.RedisAddr, cfg.Auth.RateStore = rc.Addr, store
			// Not the default 5ms: on a loaded CI machine a call took longer
			// and the instance fell back for a second (310 accepted, not 205).
			// A stopped Redis refuses connections at once.
			cfg.Auth.RateTimeout = time.Second
			fl = append(fl, startFleetInstance(t, cfg))
		}
		return fl
	}
	// want is the events the rate allows in a run (tokens come in from
	// its start to its last request), the burst aside.
	want := func(r fleetResult) float64 { return fleetRate * r.took.Seconds() }

	shared := fleet("") // --redis alone: rates in Redis
	got := fleetLoadRun(t, shared, secret)
	t.Logf("shared (redis): %v", got)
	if lo, hi := 0.9*want(got), 1.1*want(got)+fleetBurst; float64(got.accepted) < lo || float64(got.accepted) > hi {
		t.Errorf("3 instances on one Redis accepted %d events in %v at rate %d/s: want %.0f to %.0f (the client's rate, within 10%%)",
			got.accepted, got.took, fleetRate, lo, hi)
	}
	for i, in := range shared {
		if n := in.metric(t, "inlet_auth_rate_limit_fallback_total"); n != 0 {
			t.Errorf("instance %d: %v requests fell back to the local limiter with Redis up", i, n)
		}
	}

	local := fleet(auth.RateStoreLocal)
	old := fleetLoadRun(t, local, secret)
	t.Logf("local (each instance its own, as before): %v", old)
	if lo := 2.5 * want(old); float64(old.accepted) < lo {
		t.Errorf("3 instances with local rates accepted %d: want about 3 times the rate (%.0f or more)", old.accepted, lo)
	}

	rc.Stop()
	down := fleetLoadRun(t, shared, secret)
	t.Logf("shared, redis stopped: %v", down)
	if lo, hi := 0.75*3*want(down), 1.1*3*want(down)+3*fleetBurst; float64(down.accepted) < lo || float64(down.accepted) > hi {
		t.Errorf("with Redis stopped the 3 instances accepted %d: want each instance's own rate, %.0f to %.0f in all", down.accepted, lo, hi)
	}
	for i, in := range shared {
		if n := in.metric(t, "inlet_auth_rate_limit_fallback_total"); n < 1 {
			t.Errorf("instance %d: inlet_auth_rate_limit_fallback_total %v with Redis stopped", i, n)
		}
		if r := testkit.Do(t, "GET", in.base+"/readyz", nil); r.Status != http.StatusOK {
			t.Errorf("instance %d: /readyz %d with Redis stopped: want 200 (rates fall back, nothing is down)", i, r.Status)
		}
	}
}

// fleetInstance is a gateway of the fleet and its logs, dumped if the
// test fails.
type fleetInstance struct {
	base string
	log  *testkit.LogBuffer
}

func startFleetInstance(t *testing.T, cfg gateway.Config) *fleetInstance {
	t.Helper()
	log, buf := testkit.NewLogBuffer()
	g, err := gateway.Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	in := &fleetInstance{base: "http://" + g.Addr(), log: buf}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = g.Shutdown(ctx)
		if t.Failed() {
			t.Logf("instance %s (rates %s) logs:\n%s", in.base, cfg.Auth.RateStore, buf)
		}
	})
	gatewaytest.Ready(t, g, 30*time.Second)
	return in
}

// metric reads an unlabelled metric's value from the instance's /metrics.
func (in *fleetInstance) metric(t *testing.T, name string) float64 {
	t.Helper()
	r := testkit.Do(t, "GET", in.base+"/metrics", nil)
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("%s: no %s in /metrics", in.base, name)
	return 0
}

// fleetResult is what one load run got: 202s and 429s.
type fleetResult struct {
	accepted, limited, other int64
	took                     time.Duration
}

func (r fleetResult) String() string {
	return fmt.Sprintf("%d accepted (%.0f/s), %d answered 429, %d other, in %v",
		r.accepted, float64(r.accepted)/r.took.Seconds(), r.limited, r.other, r.took.Round(time.Millisecond))
}

// fleetLoadRun sends fleetLoad single-event requests/s for fleetPhase,
// request i to instance i%3, from workers paced on a schedule (a late
// request goes at once).
func fleetLoadRun(t *testing.T, fl []*fleetInstance, secret string) fleetResult {
	t.Helper()
	const workers = 12
	total := int(fleetLoad * fleetPhase.Seconds())
	every := time.Second / fleetLoad
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	var res fleetResult
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
				req, _ := http.NewRequest("POST", fl[i%len(fl)].base+"/v1/batch", strings.NewReader(`[{"event":"rate"}]`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := hc.Do(req)
				if err != nil {
					atomic.AddInt64(&res.other, 1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode/100 == 2:
					atomic.AddInt64(&res.accepted, 1)
				case resp.StatusCode == http.StatusTooManyRequests:
					atomic.AddInt64(&res.limited, 1)
				default:
					atomic.AddInt64(&res.other, 1)
				}
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	if res.other > 0 {
		t.Errorf("%d requests neither accepted nor 429", res.other)
	}
	return res
}
