package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/bench/report"
	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestParseBenchKafka(t *testing.T) {
	t.Parallel()
	env, _, _ := testEnv(map[string]string{"INLET_BROKERS": "127.0.0.1:1,127.0.0.1:2", "INLET_ACKS": "1"})
	cfg, err := ParseBenchKafka([]string{"--records", "1000", "--warmup", "200", "--throughput", "500",
		"--compression", "zstd", "--linger", "0s", "--concurrency", "50", "--e2e"}, env)
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Kafka
	if len(k.Brokers) != 2 || k.Acks != "1" || k.Compression != "zstd" || k.Linger != 0 || !k.E2E || k.RecordBytes != 100 {
		t.Errorf("environment or flags not applied: %+v", k)
	}
	if cfg.Records != 1000 || cfg.WarmupRecords != 200 || cfg.Run.Warmup != 0 || cfg.Run.Rate != 500 || cfg.Run.Workers != 50 || k.InFlight != 50 {
		t.Errorf("run: %d records after %d (warmup time %v), rate %g, %d workers", cfg.Records, cfg.WarmupRecords, cfg.Run.Warmup, cfg.Run.Rate, cfg.Run.Workers)
	}

	env, _, _ = testEnv(nil)
	cfg, err = ParseBenchKafka([]string{"--brokers", "h:9092", "--warmup", "3s", "--duration", "7s"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Run.Warmup != 3*time.Second || cfg.WarmupRecords != 0 || cfg.Run.Duration != 7*time.Second || cfg.Run.Open() {
		t.Errorf("time run: %+v", cfg.Run)
	}
	d := loadclient.DefaultKafkaConfig()
	if d.Acks != "all" || d.RecordBytes != 100 || d.Linger != 5*time.Millisecond || d.Compression != "none" || d.Topic != "inlet-bench" {
		t.Errorf("documented defaults changed: %+v", d)
	}
}

func TestMainBenchKafkaErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"no brokers", []string{}, "--brokers is required"},
		{"records and duration", []string{"--brokers", "h:1", "--records", "10", "--duration", "1s"}, "not both"},
		{"zero records", []string{"--brokers", "h:1", "--records", "0"}, "--records must be positive"},
		{"bad warmup", []string{"--brokers", "h:1", "--warmup", "soon"}, "invalid warmup"},
		{"bad acks", []string{"--brokers", "h:1", "--acks", "2"}, `acks "2"`},
		{"bad compression", []string{"--brokers", "h:1", "--compression", "lzma"}, `compression "lzma"`},
		{"small e2e record", []string{"--brokers", "h:1", "--e2e", "--record-size", "8"}, "at least"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, out, errb := testEnv(nil)
			code := Main(context.Background(), append([]string{"bench", "kafka"}, tc.args...), env)
			if code != 2 || !strings.Contains(errb.String()+out.String(), tc.msg) {
				t.Fatalf("exit %d, output %q; want 2 with %q", code, errb.String()+out.String(), tc.msg)
			}
		})
	}
}

func TestBenchKafkaCommand(t *testing.T) {
	t.Parallel()
	brokers := strings.Join(testkit.Brokers(t), ",")
	dir := t.TempDir()
	files := map[string]string{"json": filepath.Join(dir, "r.json"), "hdr": filepath.Join(dir, "r.hgrm"), "html": filepath.Join(dir, "r.html")}

	env, out, errb := testEnv(nil)
	code := Main(context.Background(), []string{"bench", "kafka", "--brokers", brokers, "--topic", testkit.Unique(t, "t-"),
		"--records", "500", "--warmup", "100", "--concurrency", "20", "--linger", "1ms",
		"--json", files["json"], "--hdr", files["hdr"], "--html", files["html"]}, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"closed loop, 20 concurrent", "500 sent, 500 ok (100.00%)", "acked: 500", "500 records sent, ", " ms 99.9th."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	f, err := os.Open(files["json"])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := report.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 500 || rep.WarmupRequests != 100 || rep.BytesSent != 500*100 || !strings.Contains(rep.Target, "acks=all") || !strings.Contains(rep.Command, "--records 500") {
		t.Errorf("report: %d requests after %d, %d bytes, target %q, command %q", rep.Requests, rep.WarmupRequests, rep.BytesSent, rep.Target, rep.Command)
	}
	for _, name := range []string{files["hdr"], files["html"]} {
		if b, err := os.ReadFile(name); err != nil || len(b) < 500 {
			t.Errorf("%s: %d bytes, %v", name, len(b), err)
		}
	}

	// End to end, open loop, the JSON report on stdout.
	env, out, errb = testEnv(nil)
	code = Main(context.Background(), []string{"bench", "kafka", "--brokers", brokers, "--topic", testkit.Unique(t, "t-"), "--e2e",
		"--throughput", "200", "--duration", "500ms", "--warmup", "100ms", "--acks", "1", "--json", "-"}, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	rep, err = report.ReadJSON(strings.NewReader(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "open" || rep.OK != 100 || rep.Status[loadclient.StatusConsumed] != 100 || !strings.Contains(rep.Target, "end-to-end") {
		t.Errorf("e2e report: mode %s, %d ok, statuses %v, target %q", rep.Mode, rep.OK, rep.Status, rep.Target)
	}
	for _, want := range []string{"open loop at 200 records/s", "end-to-end latency", "consumer: 120 records of this run read"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}
