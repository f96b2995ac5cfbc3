package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestFullDiskOutageHeals: the spool on a small tmpfs, Kafka stopped
// until the disk is full, then back, under load (issue #27: the backlog
// was delivered but no segment ever deleted, so 98% of requests got 503,
// also after a restart, while /readyz said ready). The disk full, /readyz
// is 503 saying why; a shutdown in that state exits cleanly; a gateway
// started on the same full spool takes load (503 while the disk is full)
// and, once Kafka is back, within 10 s of the backlog's delivery answers
// almost every request 200 again, and /readyz 200. No acknowledged event
// is lost.
func TestFullDiskOutageHeals(t *testing.T) {
	spoolDir := testkit.Tmpfs(t, "1m") // registered first: unmounted after the gateways stopped
	ctl := testkit.HaltableKafka(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, ctl.Brokers, topic)
	cfg.Spool.Dir = spoolDir
	cfg.Spool.SegmentBytes = 64 << 10
	cfg.Spool.MaxBytes = 1 << 30 // far more than the disk: the disk fills first
	cfg.ShutdownTimeout = 3 * time.Second

	start := func() (*gateway.Gateway, *testkit.LogBuffer) {
		t.Helper()
		log, logs := testkit.NewLogBuffer()
		g, err := gateway.Start(cfg, log)
		if err != nil {
			t.Fatalf("starting on the spool of %s: %v", spoolDir, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			g.Shutdown(ctx)
		})
		return g, logs
	}
	shutdown := func(g *gateway.Gateway, logs *testkit.LogBuffer) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil || strings.Contains(logs.String(), "closing the spool") || strings.Contains(logs.String(), "cursor") {
			t.Fatalf("shutdown: %v\n%s", err, logs)
		}
	}
	// fill puts load on until the disk is full: 503, and /readyz says so.
	fill := func(base string) *loader {
		t.Helper()
		l := startLoader(base, 4, 2*time.Millisecond)
		testkit.WaitFor(t, 30*time.Second, "the disk full", func() bool {
			status, rd := getReady(t, base)
			return status == 503 && strings.Contains(rd.Error, "the spool's disk is full") &&
				strings.Contains(rd.Error, "no space left on device")
		})
		if m := testkit.Do(t, "GET", base+"/metrics", nil); !strings.Contains(string(m.Body), "inlet_spool_disk_full 1") {
			t.Errorf("/metrics with the disk full: no inlet_spool_disk_full 1")
		}
		return l
	}
	// heals waits for the backlog (what the spool held when Kafka came
	// back) to be delivered, then for a second of answers, within 10 s of
	// it, at least 95% of them 200, and /readyz 200.
	heals := func(base string, l *loader, logs *testkit.LogBuffer) {
		t.Helper()
		_, rd := getReady(t, base)
		backlog := rd.Spool.Unforwarded
		forwarded := func() float64 { return metricValue(t, base, "inlet_forwarder_records_total") }
		from := forwarded()
		testkit.WaitFor(t, 60*time.Second, "the backlog delivered", func() bool { return forwarded()-from >= float64(backlog) })
		delivered := time.Now()
		counts := func() (ok, all int) {
			l.mu.Lock()
			defer l.mu.Unlock()
			for s, n := range l.statuses {
				all += n
				if s == "200" {
					ok += n
				}
			}
			return ok, all
		}
		var ratio []string
		for ok0, all0 := counts(); ; {
			time.Sleep(time.Second)
			ok, all := counts()
			status, _ := getReady(t, base)
			ratio = append(ratio, fmt.Sprintf("%d/%d readyz %d", ok-ok0, all-all0, status))
			if all-all0 >= 20 && (ok-ok0)*100 >= 95*(all-all0) && status == 200 {
				t.Logf("backlog of %d records delivered; 200s a second after: %v", backlog, ratio)
				return
			}
			if time.Since(delivered) > 10*time.Second {
				t.Fatalf("10 s after the backlog of %d was delivered, answers 200/all each second: %v\n%s", backlog, ratio, logs)
			}
			ok0, all0 = ok, all
		}
	}

	g, logs := start()
	base := "http://" + g.Addr()
	gatewaytest.Ready(t, g, 30*time.Second)

	// Kafka down until the disk is full, then a shutdown in that state.
	ctl.Halt()
	l1 := fill(base)
	statuses1 := l1.Stop()
	shutdown(g, logs)

	// A gateway on the same full spool starts, and under load heals once
	// Kafka is back, without another restart.
	g, logs = start()
	base = "http://" + g.Addr()
	l2 := fill(base)
	ctl.Resume()
	heals(base, l2, logs)
	statuses2 := l2.Stop()
	shutdown(g, logs)
	if !strings.Contains(logs.String(), "every acknowledged event is in kafka") {
		t.Errorf("the shutdown did not drain the spool:\n%s", logs)
	}
	l1.check(t, ctl.Brokers, topic)
	l2.check(t, ctl.Brokers, topic)
	t.Logf("answers before the restart %v, after it %v", statuses1, statuses2)
}

// metricValue is the value of the metric name (without labels) on base's
// /metrics; the test fails if there is none.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	r := testkit.Do(t, "GET", base+"/metrics", nil)
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}
