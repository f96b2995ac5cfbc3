package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// The operators' files whose metric names TestOpsMetricsExist checks.
var (
	opsRulesFile     = filepath.Join("..", "..", "deploy", "prometheus", "inlet.rules.yml")
	opsDashboardFile = filepath.Join("..", "..", "deploy", "grafana", "inlet.json")
)

// TestOpsMetricsExist: every metric the alerting rules and the Grafana
// dashboard read is served on /metrics by a gateway started with what
// registers every metric an operator watches (the development broker,
// --ack spool, request-reply, client credentials with a rate, a routes file), after the
// requests that create the labelled series (a 2xx, a 429 over a client's
// rate, a request-reply call). A metric renamed in the code and not in
// deploy/ (or the reverse) fails it; so does a recording rule read but not
// defined. It also checks inlet_ready, and inlet_last_ack_timestamp_seconds
// after an acknowledgement.
func TestOpsMetricsExist(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Broker.Listen = "127.0.0.1:0"
	cfg.Broker.SyncWrites = false
	cfg.Ack = AckSpool
	cfg.ReadyInterval = 200 * time.Millisecond
	cfg.ShutdownTimeout = 20 * time.Second
	cfg.RPC.Services = []string{"echo"}
	cfg.Auth.HTTP = true
	cfg.Auth.ClientsFile = filepath.Join(t.TempDir(), "clients.json")
	// A routes file: the routing row's metrics.
	cfg.Ingest.Routes = filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(cfg.Ingest.Routes, []byte("rules:\n  - {name: bots, match: {event: \"bot_*\"}, action: drop}\nroutes:\n  - {name: shop, match: {group: shop}, topic: shop.events}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// shop may send one event, then is over its rate for 1000 s; app has no
	// rate.
	secret, err := auth.AddClient(cfg.Auth.ClientsFile, auth.Client{ID: "shop", Rate: 0.001, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	appSecret, err := auth.AddClient(cfg.Auth.ClientsFile, auth.Client{ID: "app"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Start(cfg, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	base := "http://" + g.Addr()
	testkit.WaitReady(t, base, 60*time.Second)

	creds := []string{"Authorization", "Bearer " + secret, "Content-Type", "application/json"}
	if r := testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"ops"}]`), creds...); r.Status != 200 {
		t.Fatalf("batch: %s", r)
	}
	if r := testkit.Do(t, "POST", base+"/v1/batch", []byte(`[{"event":"ops"}]`), creds...); r.Status != 429 {
		t.Fatalf("batch over the client's rate: %s, want 429", r)
	}
	// No worker answers: a 5xx (504 once the call's timeout passes),
	// counted all the same.
	if r := testkit.Do(t, "POST", base+"/v1/rpc/echo", []byte("hi"), "Authorization", "Bearer "+appSecret, "Inlet-Timeout", "100ms"); r.Status < 500 {
		t.Fatalf("request-reply call: %s, want 504 (no worker answers)", r)
	}

	served := scrape(t, base)
	if got := served["inlet_ready"]; got != 1 {
		t.Errorf("inlet_ready %v on a ready gateway, want 1", got)
	}
	if ack := served["inlet_last_ack_timestamp_seconds"]; time.Since(time.Unix(int64(ack), 0)) > time.Minute {
		t.Errorf("inlet_last_ack_timestamp_seconds %v, want the time of the batch's 200", ack)
	}

	rules, err := os.ReadFile(opsRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile(opsDashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs, err := dashboardQueries(dash)
	if err != nil {
		t.Fatalf("%s: %v", opsDashboardFile, err)
	}
	recorded := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- record:\s*(\S+)\s*$`).FindAllSubmatch(rules, -1) {
		recorded[string(m[1])] = true
	}
	for file, text := range map[string]string{opsRulesFile: string(rules), opsDashboardFile: strings.Join(exprs, "\n")} {
		metrics, records := referencedNames(text)
		if len(metrics) < 10 {
			t.Errorf("%s: only %d metric names found (%v): is the file read right?", file, len(metrics), metrics)
		}
		for _, name := range metrics {
			if _, ok := served[name]; !ok {
				t.Errorf("%s reads %s, which /metrics does not serve", file, name)
			}
		}
		for _, name := range records {
			if !recorded[name] {
				t.Errorf("%s reads %s, which no recording rule of %s defines", file, name, opsRulesFile)
			}
		}
	}

	g.stopping.Store(true) // shutting down: unready
	if got := scrape(t, base)["inlet_ready"]; got != 0 {
		t.Errorf("inlet_ready %v on a gateway shutting down, want 0", got)
	}
}

// scrape returns the samples /metrics serves, by name (a histogram's
// _bucket, _sum and _count each under its own), with the value of the last
// sample of each name.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	r := testkit.Do(t, "GET", base+"/metrics", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %s", r)
	}
	served := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			rest = line[strings.LastIndexByte(line, '}')+1:]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		served[name] = v
	}
	return served
}

// metricPrefixes are the prefixes of the metrics inlet serves (its own, and
// the Go and process collectors').
var metricPrefixes = []string{"inlet_", "go_", "process_"}

// referencedNames returns the metric names text (PromQL, YAML, JSON) names,
// and the recording rules' names it reads (level:metric:operations).
func referencedNames(text string) (metrics, records []string) {
	m, r := map[string]bool{}, map[string]bool{}
	for _, tok := range regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`).FindAllString(text, -1) {
		switch {
		case strings.Count(tok, ":") == 2 && !strings.HasPrefix(tok, ":") && !strings.HasSuffix(tok, ":"):
			r[tok] = true
		case !strings.Contains(tok, ":") && slices.ContainsFunc(metricPrefixes, func(p string) bool { return strings.HasPrefix(tok, p) }):
			m[tok] = true
		}
	}
	return slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(r))
}

// dashboardQueries returns the PromQL of a Grafana dashboard: its panels'
// targets' expr, and its template variables' queries.
func dashboardQueries(dash []byte) ([]string, error) {
	var d any
	if err := json.Unmarshal(dash, &d); err != nil {
		return nil, err
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && (k == "expr" || k == "definition" || k == "query") {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(d)
	return out, nil
}
