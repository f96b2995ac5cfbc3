package loadclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/report"
	"github.com/inlet-dev/inlet/internal/verify"
)

// Reports names a run's report files: JSON ("-" for stdout), HdrHistogram
// percentiles and HTML ("" for none), and the generator's own CPU profile.
type Reports struct {
	JSON, Hgrm, HTML string
	CPUProfile       string
	// Command is the command line, for the reports.
	Command string
}

func (r Reports) create() (*report.Files, error) { return report.CreateFiles(r.JSON, r.Hgrm, r.HTML) }

// HTTPBenchConfig is `inlet bench http`: a run of an HTTP target.
type HTTPBenchConfig struct {
	Run  bench.Config
	HTTP HTTPConfig
	// BodyFile, if set, was read into HTTP.Body.
	BodyFile string
	// TLSCAFile is the PEM file of the CAs that sign an https:// target's
	// certificate ("": the system's); TLSInsecureSkipVerify accepts any
	// certificate (with a warning).
	TLSCAFile             string
	TLSInsecureSkipVerify bool
	Reports
}

// Validate reports the first invalid setting.
func (c HTTPBenchConfig) Validate() error {
	if err := c.Run.Validate(); err != nil {
		return err
	}
	if (c.TLSCAFile != "" || c.TLSInsecureSkipVerify) && !strings.HasPrefix(c.HTTP.URL, "https://") {
		return fmt.Errorf("bench: --tls-ca and --tls-insecure-skip-verify are for an https:// --target, not %s", c.HTTP.URL)
	}
	return c.HTTP.Validate()
}

// RunHTTP runs `inlet bench http` and writes its reports: the summary to
// stdout, the progress to stderr.
func RunHTTP(ctx context.Context, cfg HTTPBenchConfig, stdout, stderr io.Writer) error {
	return runCommand(cfg.Reports, stdout, stderr, func() (*report.Report, error) { return BenchHTTP(ctx, cfg, stderr) })
}

// runCommand creates the report files (a wrong path should not cost a
// run), runs, and writes the reports.
func runCommand(r Reports, stdout, stderr io.Writer, run func() (*report.Report, error)) error {
	files, err := r.create()
	if err != nil {
		return err
	}
	defer files.Close()
	stop, err := startCPUProfile(r.CPUProfile)
	if err != nil {
		return err
	}
	rep, err := run()
	stop()
	if err != nil {
		return err
	}
	return files.Write(rep, stdout, stderr)
}

// BenchHTTP runs `inlet bench http`. It writes the start of the run to
// progress, and a live progress line once a second if progress is a
// terminal.
func BenchHTTP(ctx context.Context, cfg HTTPBenchConfig, progress io.Writer) (*report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if strings.HasPrefix(cfg.HTTP.URL, "https://") {
		tc, err := verify.ClientTLS(cfg.TLSCAFile, cfg.TLSInsecureSkipVerify)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if cfg.TLSInsecureSkipVerify {
			fmt.Fprintf(progress, "bench: warning: --tls-insecure-skip-verify: the certificate of %s is not checked\n", cfg.HTTP.URL)
		}
		cfg.HTTP.TLS = tc
	}
	target, err := NewHTTP(cfg.HTTP)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	r := cfg.Run
	mode := fmt.Sprintf("closed loop, %d concurrent", r.Workers)
	if r.Open() {
		mode = openMode(r, "req/s", "connections")
	}
	fmt.Fprintf(progress, "inlet bench: %s, %s, for %v after %v warmup\n", target, mode, r.Duration, r.Warmup)
	rep, err := live(progress, r, func(r bench.Config) (*report.Report, error) {
		if async := target.Async(); async != nil {
			// No goroutine per request in flight (h2c): see bench.RunAsync.
			return bench.RunAsync(ctx, r, async)
		}
		return bench.Run(ctx, r, target.Do)
	})
	if err != nil {
		return nil, err
	}
	rep.Target, rep.Command = target.String(), cfg.Command
	return rep, nil
}

// RPCBenchConfig is `inlet bench rpc`: an HTTP run of POST /v1/rpc/{service}
// that also reads the gateway's /metrics.
type RPCBenchConfig struct {
	HTTPBenchConfig
	Service    string
	Timeout    time.Duration // sent as Inlet-Timeout
	MetricsURL string        // the gateway's /metrics; "none" to not read it
}

// RunRPC runs `inlet bench rpc` and writes its reports, with the gateway's
// in-flight peak and memory read from its /metrics every 250 ms.
func RunRPC(ctx context.Context, cfg RPCBenchConfig, stdout, stderr io.Writer) error {
	return runCommand(cfg.Reports, stdout, stderr, func() (*report.Report, error) {
		var sampler *Sampler
		if cfg.MetricsURL != "none" {
			var err error
			if sampler, err = StartSampler(cfg.MetricsURL, "inlet_rpc_in_flight", 250*time.Millisecond); err != nil {
				return nil, err
			}
		}
		rep, err := BenchHTTP(ctx, cfg.HTTPBenchConfig, stderr)
		if sampler != nil {
			stats := sampler.Stop()
			if rep != nil {
				rep.Server = stats
			}
		}
		return rep, err
	})
}

// live runs run with cfg, writing a progress line once a second to
// progress if it is a terminal (it is for people).
func live(progress io.Writer, cfg bench.Config, run func(bench.Config) (*report.Report, error)) (*report.Report, error) {
	f, ok := progress.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return run(cfg)
	}
	cfg.Progress = func(p bench.Progress) { fmt.Fprintf(progress, "\r\x1b[K%s", progressLine(p)) }
	defer fmt.Fprint(progress, "\r\x1b[K")
	return run(cfg)
}

func progressLine(p bench.Progress) string {
	if p.Warmup {
		return fmt.Sprintf("%5.0fs warming up  %7.0f req/s", p.Elapsed.Seconds(), p.Rate)
	}
	return fmt.Sprintf("%5.0fs  %7.0f req/s  %d requests  %d errors  %d dropped  p99 %v",
		p.Elapsed.Seconds(), p.Rate, p.Requests, p.Errors, p.Dropped, p.P99.Round(10*time.Microsecond))
}

// startCPUProfile profiles this process's CPU into path until stop is
// called; with an empty path it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// openMode says how an open loop of r paces its target (a fixed rate or a
// ramp, in unit) and what bounds it (at most r.Workers of bound).
func openMode(r bench.Config, unit, bound string) string {
	rate := fmt.Sprintf("at %g", r.Rate)
	if r.StartRate > 0 {
		rate = fmt.Sprintf("from %g to %g", r.StartRate, r.Rate)
	}
	return fmt.Sprintf("open loop %s %s, %d %s at most", rate, unit, r.Workers, bound)
}

// runName names a run that was given no name: its events' ids start with
// it, so that runs sharing a topic are told apart.
func runName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}
