package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/loadclient"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

// BenchCatalogConfig configures `inlet bench grpc`, `inlet bench thrift`
// and `inlet bench catalog` (both, one after the other, side by side).
type BenchCatalogConfig struct {
	Run bench.Config
	// Targets are the protocols to run, in order, each with its address.
	Targets []loadclient.CatalogConfig
	// Prefill looks every key up once before the run (not with Miss), so
	// that the run measures cached hits.
	Prefill bool
	// Report files: JSON ("-" for stdout), HdrHistogram percentiles, HTML.
	// With several targets, each file name gets the protocol before its
	// extension (r.json → r.grpc.json, r.thrift.json), and JSON to stdout
	// is one object per protocol.
	JSON, Hgrm, HTML string
	CPUProfile       string
	// Command is the command line, for the reports (secrets left out).
	Command string
}

// Validate reports the first invalid setting.
func (c BenchCatalogConfig) Validate() error {
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

// credentialFlags are --client-id, --secret and --secret-file.
type credentialFlags struct{ id, secret, secretFile string }

func (c *credentialFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.id, "client-id", "", "client id of the credentials (see inlet clients add)")
	fs.StringVar(&c.secret, "secret", "", "the client's secret (prefer --secret-file or INLET_SECRET: a flag shows in ps)")
	fs.StringVar(&c.secretFile, "secret-file", "", "read the client's secret from `FILE`")
}

// resolve returns the client id and secret.
func (c *credentialFlags) resolve() (id, secret string, err error) {
	switch {
	case c.secret != "" && c.secretFile != "":
		return "", "", errors.New("--secret or --secret-file, not both")
	case c.secretFile != "":
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return "", "", fmt.Errorf("reading --secret-file: %w", err)
		}
		c.secret = strings.TrimSpace(string(b))
		if c.secret == "" {
			return "", "", fmt.Errorf("--secret-file %s is empty", c.secretFile)
		}
	}
	if c.id == "" && c.secret != "" {
		return "", "", errors.New("a secret needs its --client-id")
	}
	if c.id != "" && c.secret == "" {
		return "", "", fmt.Errorf("--client-id %s needs its secret: --secret-file FILE or INLET_SECRET", c.id)
	}
	return c.id, c.secret, nil
}

// redactFlags hides the values of the named flags in args, which go into
// the reports.
func redactFlags(args []string, names ...string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		if !strings.HasPrefix(out[i], "-") {
			continue
		}
		a := strings.TrimLeft(out[i], "-")
		for _, n := range names {
			switch {
			case a == n && i+1 < len(out):
				i++
				out[i] = "..."
			case strings.HasPrefix(a, n+"="):
				out[i] = out[i][:strings.Index(out[i], "=")+1] + "..."
			}
		}
	}
	return out
}

// ParseBenchCatalog parses `inlet bench grpc|thrift|catalog` arguments and
// environment. sub is the subcommand: grpc and thrift run that protocol at
// --target; catalog runs those of --proto at --grpc-target and
// --thrift-target.
func ParseBenchCatalog(sub string, args []string, env Env) (BenchCatalogConfig, error) {
	cfg := BenchCatalogConfig{Run: bench.DefaultConfig(), Prefill: true}
	t := loadclient.DefaultCatalogConfig()
	t.Connections = 16
	r := &cfg.Run
	fs := newFlags("bench "+sub, env)
	var target, grpcTarget, thriftTarget, protos string
	switch sub {
	case "catalog":
		fs.StringVar(&protos, "proto", "grpc,thrift", "protocols to run, one after the other, then side by side: grpc, thrift or grpc,thrift")
		fs.StringVar(&grpcTarget, "grpc-target", "127.0.0.1:9090", "gRPC server `host:port` (inlet serve --grpc-listen)")
		fs.StringVar(&thriftTarget, "thrift-target", "127.0.0.1:9091", "Thrift server `host:port` (inlet serve --thrift-listen)")
	case "thrift":
		fs.StringVar(&target, "target", "127.0.0.1:9091", "Thrift server `host:port` (inlet serve --thrift-listen)")
	default:
		fs.StringVar(&target, "target", "127.0.0.1:9090", "gRPC server `host:port` (inlet serve --grpc-listen)")
	}
	var creds credentialFlags
	creds.register(fs)
	fs.StringVar(&t.Auth, "auth", t.Auth, "how calls present the credentials: session (the first the secret, later ones the session token the server returned) or secret (every call)")
	fs.IntVar(&t.Connections, "connections", t.Connections, "connections kept: gRPC, ClientConns each multiplexing calls; Thrift, a pool, one call at a time on each")
	fs.StringVar(&t.ThriftTransport, "thrift-transport", t.ThriftTransport, "Thrift transport: framed or buffered (the protocol is binary)")
	fs.StringVar(&t.Group, "group", t.Group, "group of the keys looked up")
	fs.IntVar(&t.Keys, "keys", t.Keys, "distinct keys cycled through: <group>/<key-prefix><i> (hits, after the prefill)")
	fs.StringVar(&t.KeyPrefix, "key-prefix", t.KeyPrefix, "prefix of the cycled keys' names")
	fs.BoolVar(&t.Miss, "miss", false, "every lookup a key never asked before (first sight: the server fills it), not --keys")
	fs.BoolVar(&cfg.Prefill, "prefill", cfg.Prefill, "look every key up once before the run, so that it measures cached hits (not with --miss)")
	fs.Float64Var(&r.Rate, "rate", 0, "open loop: lookups per second, latency from each lookup's intended send time (0: closed loop)")
	fs.Float64Var(&r.StartRate, "rate-start", 0, "open loop: ramp linearly from this rate (held during --warmup) to --rate over --duration")
	concurrency := fs.Int("concurrency", 0, "closed loop: workers each sending back to back (default: --connections); in an open loop, --connections bounds the lookups in flight")
	inflight := fs.Int("max-in-flight", 0, "open loop: lookups in flight at most (default: --connections; more only queue for a Thrift connection)")
	fs.DurationVar(&r.Duration, "duration", r.Duration, "measured time")
	fs.DurationVar(&r.Warmup, "warmup", r.Warmup, "time run first and left out of every figure (after the prefill)")
	fs.DurationVar(&r.Timeout, "timeout", r.Timeout, "time limit of one lookup")
	fs.DurationVar(&r.MaxLag, "max-lag", r.MaxLag, "open loop: a lookup that cannot start within this of its intended time is dropped (generator overload)")
	reportFlags(fs, &cfg.JSON, &cfg.Hgrm, &cfg.HTML, &cfg.CPUProfile)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet bench %s: %v\n", sub, err)
		return errUsage
	}
	cfg.Command = "inlet bench " + sub + " " + strings.Join(redactFlags(args, "secret"), " ")
	var err error
	if t.ClientID, t.Secret, err = creds.resolve(); err != nil {
		return cfg, usage(err)
	}
	switch {
	case r.Rate > 0 && given["concurrency"]:
		return cfg, usage(errors.New("--concurrency is for the closed loop; bound an open loop (--rate) with --max-in-flight"))
	case r.Rate == 0 && given["max-in-flight"]:
		return cfg, usage(errors.New("--max-in-flight is for the open loop (--rate); a closed loop has --concurrency"))
	case given["concurrency"] && *concurrency <= 0, given["max-in-flight"] && *inflight <= 0:
		return cfg, usage(errors.New("--concurrency and --max-in-flight must be positive"))
	case t.Miss && given["keys"]:
		return cfg, usage(errors.New("--miss or --keys, not both"))
	}
	r.Workers = t.Connections
	if *concurrency > 0 {
		r.Workers = *concurrency
	}
	if *inflight > 0 {
		r.Workers = *inflight
	}
	switch sub {
	case "catalog":
		seen := map[string]bool{}
		for _, p := range strings.Split(protos, ",") {
			p = strings.TrimSpace(p)
			tc := t
			tc.Proto = p
			switch p {
			case loadclient.ProtoGRPC:
				tc.Addr = grpcTarget
			case loadclient.ProtoThrift:
				tc.Addr = thriftTarget
			default:
				return cfg, usage(fmt.Errorf("--proto %q: want grpc, thrift or grpc,thrift", protos))
			}
			if seen[p] {
				return cfg, usage(fmt.Errorf("--proto %q names %s twice", protos, p))
			}
			seen[p] = true
			cfg.Targets = append(cfg.Targets, tc)
		}
	default:
		t.Proto, t.Addr = sub, target
		cfg.Targets = []loadclient.CatalogConfig{t}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

func runBenchCatalog(ctx context.Context, sub string, args []string, env Env) error {
	cfg, err := ParseBenchCatalog(sub, args, env)
	if err != nil {
		return err
	}
	// Create the report files first: a wrong path should not cost a run.
	files := make([]*reportFiles, len(cfg.Targets))
	for i, t := range cfg.Targets {
		if files[i], err = createReportFiles(cfg.reports(t.Proto)); err != nil {
			return err
		}
		defer files[i].close()
	}
	stop, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return err
	}
	runs, err := BenchCatalog(ctx, cfg, env.Stderr)
	stop()
	if err != nil {
		return err
	}
	return writeCatalogReports(runs, cfg, files, env)
}

// reports is the part of an HTTP bench config the report writers read,
// for one protocol's run.
func (c BenchCatalogConfig) reports(proto string) BenchHTTPConfig {
	name := func(f string) string {
		if f == "" || f == "-" || len(c.Targets) == 1 {
			return f
		}
		ext := filepath.Ext(f)
		return strings.TrimSuffix(f, ext) + "." + proto + ext
	}
	return BenchHTTPConfig{JSON: name(c.JSON), Hgrm: name(c.Hgrm), HTML: name(c.HTML), Command: c.Command}
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
	loadclient.CatalogAuthStats
}

// BenchCatalog runs each target of cfg in turn: the prefill, then the run.
// It writes the start of each to progress, and a live progress line once a
// second if progress is a terminal.
func BenchCatalog(ctx context.Context, cfg BenchCatalogConfig, progress io.Writer) ([]CatalogRun, error) {
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

func benchCatalogOne(ctx context.Context, cfg BenchCatalogConfig, tc loadclient.CatalogConfig, progress io.Writer) (CatalogRun, error) {
	target, err := loadclient.NewCatalog(tc)
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
		mode = fmt.Sprintf("open loop at %g lookups/s, %d in flight at most", r.Rate, r.Workers)
		if r.StartRate > 0 {
			mode = fmt.Sprintf("open loop from %g to %g lookups/s, %d in flight at most", r.StartRate, r.Rate, r.Workers)
		}
	}
	fmt.Fprintf(progress, "inlet bench: %s, %s, for %v after %v warmup\n", target, mode, r.Duration, r.Warmup)
	live := isTerminal(progress)
	if live {
		r.Progress = func(p bench.Progress) { fmt.Fprintf(progress, "\r\x1b[K%s", progressLine(p)) }
	}
	rep, err := bench.Run(ctx, r, target.Do)
	if live {
		fmt.Fprint(progress, "\r\x1b[K")
	}
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
func writeCatalogReports(runs []CatalogRun, cfg BenchCatalogConfig, files []*reportFiles, env Env) error {
	summary := env.Stdout
	if cfg.JSON == "-" {
		summary = env.Stderr
		var err error
		if len(runs) == 1 {
			err = runs[0].Report.WriteJSON(env.Stdout)
		} else {
			err = writeRunsJSON(env.Stdout, runs)
		}
		if err != nil {
			return fmt.Errorf("bench: writing JSON report: %w", err)
		}
	}
	var failed []string
	for i, run := range runs {
		quiet := cfg.reports(run.Proto)
		if quiet.JSON == "-" {
			quiet.JSON = "" // written above
		}
		err := writeBenchReports(run.Report, quiet, files[i], Env{Stdout: summary, Stderr: env.Stderr, Getenv: env.Getenv})
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
	case loadclient.AuthSecret:
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
			if k != loadclient.StatusOK {
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
