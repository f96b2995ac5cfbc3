package loadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

// CatalogBenchConfig is `inlet bench grpc`, `inlet bench thrift`
// and `inlet bench catalog` (both, one after the other, side by side).
type CatalogBenchConfig struct {
	Run bench.Config
	// Targets are the protocols to run, in order, each with its address.
	Targets []CatalogConfig
	// Prefill looks every key up once before the run (not with Miss), so
	// that the run measures cached hits.
	Prefill bool
	// Report files. With several targets, each file name gets the
	// protocol before its extension (r.json → r.grpc.json, r.thrift.json),
	// and JSON to stdout is one object per protocol. Command leaves the
	// secrets out.
	Reports
}

// Validate reports the first invalid setting.
func (c CatalogBenchConfig) Validate() error {
	if len(c.Targets) == 0 {
		return errors.New("bench: no protocol to run")
	}
	for _, t := range c.Targets {
		if err := t.Validate(); err != nil {
			return err
		}
	}
	return c.Run.Validate()
}

// RunCatalog runs `inlet bench grpc|thrift|catalog` and writes the reports:
// each run's summary and files, then the runs side by side when there are
// several; it fails when a run had no success.
func RunCatalog(ctx context.Context, cfg CatalogBenchConfig, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Create the report files first: a wrong path should not cost a run.
	files := make([]*report.Files, len(cfg.Targets))
	for i, t := range cfg.Targets {
		var err error
		if files[i], err = cfg.reports(t.Proto).create(); err != nil {
			return err
		}
		defer files[i].Close()
	}
	stop, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return err
	}
	runs, err := BenchCatalog(ctx, cfg, stderr)
	stop()
	if err != nil {
		return err
	}
	return writeCatalogReports(runs, cfg, files, stdout, stderr)
}

// reports are the report files of one protocol's run; JSON to stdout is
// written for all the runs at once (writeCatalogReports).
func (c CatalogBenchConfig) reports(proto string) Reports {
	name := func(f string) string {
		if f == "-" {
			return ""
		}
		if f == "" || len(c.Targets) == 1 {
			return f
		}
		ext := filepath.Ext(f)
		return strings.TrimSuffix(f, ext) + "." + proto + ext
	}
	return Reports{JSON: name(c.JSON), Hgrm: name(c.Hgrm), HTML: name(c.HTML), Command: c.Command}
}

// CatalogRun is one protocol's run of `inlet bench grpc|thrift|catalog`.
type CatalogRun struct {
	Proto  string            `json:"proto"`
	Report *report.Report    `json:"report"`
	Auth   CatalogAuthReport `json:"auth"`
}

// CatalogAuthReport says how the run's lookups presented the credentials.
type CatalogAuthReport struct {
	Mode string `json:"mode"` // session or secret; "" without credentials
	CatalogAuthStats
}

// BenchCatalog runs each target of cfg in turn: the prefill, then the run.
// It writes the start of each to progress, and a live progress line once a
// second if progress is a terminal.
func BenchCatalog(ctx context.Context, cfg CatalogBenchConfig, progress io.Writer) ([]CatalogRun, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var runs []CatalogRun
	for _, tc := range cfg.Targets {
		run, err := benchCatalogOne(ctx, cfg, tc, progress)
		if err != nil {
			return nil, err
		}
		runs = append(runs, run)
		if ctx.Err() != nil {
			break
		}
	}
	return runs, nil
}

func benchCatalogOne(ctx context.Context, cfg CatalogBenchConfig, tc CatalogConfig, progress io.Writer) (CatalogRun, error) {
	target, err := NewCatalog(tc)
	if err != nil {
		return CatalogRun{}, err
	}
	defer target.Close()
	if cfg.Prefill && !tc.Miss {
		fmt.Fprintf(progress, "inlet bench: prefilling %d keys of group %s over %s\n", tc.Keys, tc.Group, tc.Proto)
		if err := target.Prefill(ctx, cfg.Run.Workers); err != nil {
			return CatalogRun{}, fmt.Errorf("%w (is the catalog served at %s, and are the credentials right?)", err, tc.Addr)
		}
	}
	r := cfg.Run
	mode := fmt.Sprintf("closed loop, %d concurrent", r.Workers)
	if r.Open() {
		mode = openMode(r, "lookups/s", "in flight")
	}
	fmt.Fprintf(progress, "inlet bench: %s, %s, for %v after %v warmup\n", target, mode, r.Duration, r.Warmup)
	rep, err := live(progress, r, func(r bench.Config) (*report.Report, error) { return bench.Run(ctx, r, target.Do) })
	if err != nil {
		return CatalogRun{}, err
	}
	rep.Target, rep.Command = target.String(), cfg.Command
	run := CatalogRun{Proto: tc.Proto, Report: rep, Auth: CatalogAuthReport{CatalogAuthStats: target.AuthStats()}}
	if tc.ClientID != "" {
		run.Auth.Mode = tc.Auth
	}
	return run, nil
}

// writeCatalogReports writes each run's summary and files, then the runs
// side by side when there are several; it fails when a run had no success.
func writeCatalogReports(runs []CatalogRun, cfg CatalogBenchConfig, files []*report.Files, stdout, stderr io.Writer) error {
	summary := stdout
	if cfg.JSON == "-" {
		summary = stderr
		var err error
		if len(runs) == 1 {
			err = runs[0].Report.WriteJSON(stdout)
		} else {
			err = writeRunsJSON(stdout, runs)
		}
		if err != nil {
			return fmt.Errorf("bench: writing JSON report: %w", err)
		}
	}
	var failed []string
	for i, run := range runs {
		err := files[i].Write(run.Report, summary, stderr)
		fmt.Fprintf(summary, "  auth        %s\n", authLine(run.Auth))
		if err != nil {
			failed = append(failed, run.Proto+": "+err.Error())
		}
	}
	if len(runs) > 1 {
		writeSideBySide(summary, runs)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

func writeRunsJSON(w io.Writer, runs []CatalogRun) error {
	// Each report as WriteJSON writes it, in one object keyed by protocol.
	if _, err := io.WriteString(w, "{\n"); err != nil {
		return err
	}
	for i, run := range runs {
		fmt.Fprintf(w, "%q: ", run.Proto)
		if err := run.Report.WriteJSON(w); err != nil {
			return err
		}
		if i < len(runs)-1 {
			io.WriteString(w, ",\n")
		}
	}
	_, err := io.WriteString(w, "}\n")
	return err
}

func authLine(a CatalogAuthReport) string {
	switch a.Mode {
	case "":
		return "no credentials sent"
	case AuthSecret:
		return fmt.Sprintf("the secret on every call (%d calls)", a.Secret)
	}
	return fmt.Sprintf("session tokens: %d calls presented the secret, %d a session token; %d tokens taken from answers, %d refused (then the secret again)",
		a.Secret, a.Session, a.Adopted, a.Refused)
}

// writeSideBySide prints the runs' main figures in columns.
func writeSideBySide(w io.Writer, runs []CatalogRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(r *report.Report) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, run := range runs {
			fmt.Fprintf(tw, "%s\t", cell(run.Report))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(w, "\nside by side (lookups of inf.Data/DataType)")
	fmt.Fprintf(tw, "\t")
	for _, run := range runs {
		fmt.Fprintf(tw, "%s\t", run.Proto)
	}
	fmt.Fprintln(tw)
	row("lookups/s ok", func(r *report.Report) string { return fmt.Sprintf("%.0f", r.EventsPerSec) })
	row("lookups", func(r *report.Report) string { return fmt.Sprint(r.Requests) })
	row("ok %", func(r *report.Report) string { return fmt.Sprintf("%.2f", 100*r.SuccessRatio) })
	row("dropped", func(r *report.Report) string { return fmt.Sprint(r.Dropped) })
	ms := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	row("mean ms", func(r *report.Report) string { return ms(r.Latency.Mean) })
	row("p50 ms", func(r *report.Report) string { return ms(r.Latency.P50) })
	row("p90 ms", func(r *report.Report) string { return ms(r.Latency.P90) })
	row("p99 ms", func(r *report.Report) string { return ms(r.Latency.P99) })
	row("p99.9 ms", func(r *report.Report) string { return ms(r.Latency.P999) })
	row("max ms", func(r *report.Report) string { return ms(r.Latency.Max) })
	row("errors", func(r *report.Report) string {
		var parts []string
		keys := make([]string, 0, len(r.Status))
		for k := range r.Status {
			if k != StatusOK {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Status[k]))
		}
		for _, e := range r.Errors {
			parts = append(parts, fmt.Sprintf("%s %d", e.Kind, e.Count))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	})
	tw.Flush()
	if len(runs) == 2 && runs[0].Report.EventsPerSec > 0 && runs[1].Report.EventsPerSec > 0 {
		a, b := runs[0], runs[1]
		fmt.Fprintf(w, "%s/%s lookups/s: %.2f\n", a.Proto, b.Proto, a.Report.EventsPerSec/b.Report.EventsPerSec)
	}
}
