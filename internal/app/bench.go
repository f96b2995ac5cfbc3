package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/loadclient"
)

const benchUsage = `Usage:
  inlet bench http [flags]   load an HTTP endpoint (open loop with --rate, else closed loop)
  inlet bench rpc  [flags]   load POST /v1/rpc/{service}; reports the gateway's in-flight peak and memory
  inlet bench kafka [flags]  Kafka producer performance (--e2e: produce to consume), like kafka-producer-perf-test
  inlet bench grpc [flags]   catalog lookups (inf.Data/DataType) over gRPC on kept connections
  inlet bench thrift [flags] catalog lookups (inf.Data.DataType) over Thrift on pooled connections
  inlet bench catalog [flags] both, one after the other (--proto grpc,thrift), side by side

Run 'inlet bench <target> -h' for the flags.
`

func runBench(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, benchUsage)
		return errUsage
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "http":
		return runBenchHTTP(ctx, rest, env)
	case "rpc":
		return runBenchRPC(ctx, rest, env)
	case "kafka":
		return runBenchKafka(ctx, rest, env)
	case "grpc", "thrift", "catalog":
		return runBenchCatalog(ctx, sub, rest, env)
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, benchUsage)
		return nil
	default:
		fmt.Fprintf(env.Stderr, "inlet bench: unknown target %q\n\n%s", sub, benchUsage)
		return errUsage
	}
}

// reportFlags registers the report files every bench target writes:
// --json, --hdr, --html and, when cpuProfile is not nil, --cpuprofile.
func reportFlags(fs *flag.FlagSet, json, hgrm, html, cpuProfile *string) {
	fs.StringVar(json, "json", "", "write the report as JSON to `FILE` (- for stdout; the summary then goes to stderr)")
	fs.StringVar(hgrm, "hdr", "", "write the latency percentile distribution to `FILE` (HdrHistogram .hgrm text, ms)")
	fs.StringVar(html, "html", "", "write a self-contained HTML page with charts to `FILE`")
	if cpuProfile != nil {
		fs.StringVar(cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to `FILE` (go tool pprof)")
	}
}

// headerFlag is a repeatable "Name: value" flag.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string {
	if f == nil || f.h == nil {
		return ""
	}
	var parts []string
	for k, vs := range f.h {
		for _, v := range vs {
			parts = append(parts, k+": "+v)
		}
	}
	return strings.Join(parts, ", ")
}

func (f *headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
		return fmt.Errorf("invalid header %q: want Name: value", s)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(k, strings.TrimSpace(v))
	return nil
}

// ParseBenchHTTP parses `inlet bench http` arguments and environment.
func ParseBenchHTTP(args []string, env Env) (loadclient.HTTPBenchConfig, error) {
	return parseBench("http", args, env, loadclient.DefaultHTTPConfig(), nil)
}

// parseBench parses the flags `inlet bench http` and `inlet bench rpc`
// share; extra adds a subcommand's own.
func parseBench(sub string, args []string, env Env, h0 loadclient.HTTPConfig, extra func(*flag.FlagSet)) (loadclient.HTTPBenchConfig, error) {
	cfg := loadclient.HTTPBenchConfig{Run: bench.DefaultConfig(), HTTP: h0}
	fs := newFlags("bench "+sub, env)
	if extra != nil {
		extra(fs)
	}
	r, h := &cfg.Run, &cfg.HTTP
	var headers headerFlag
	fs.StringVar(&h.URL, "target", h.URL, "URL to load")
	fs.StringVar(&h.Method, "method", h.Method, "HTTP method")
	fs.Var(&headers, "header", "request header `Name: value` (repeatable)")
	fs.StringVar(&cfg.BodyFile, "body-file", "", "send this file as every request's body, instead of generated events")
	fs.IntVar(&h.Events, "events", h.Events, "events per generated request body (with --body-file: how many it holds, for events/s)")
	fs.IntVar(&h.EventBytes, "event-bytes", h.EventBytes, "approximate size of one generated event, in bytes")
	fs.BoolVar(&h.Gzip, "gzip", false, "gzip request bodies (Content-Encoding: gzip)")
	fs.StringVar(&h.Shape, "shape", "inlet", "generated bodies: inlet (inlet's events, a JSON array) or segment (Segment track messages in a {\"batch\":[...]} wrapper, each event the same --event-bytes)")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca", "", "PEM `file` of the CAs that sign an https:// --target's certificate (default: the system's)")
	fs.BoolVar(&cfg.TLSInsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any certificate of an https:// --target (insecure: for tests only)")
	fs.Float64Var(&r.Rate, "rate", 0, "open loop: requests per second, latency from each request's intended send time (0: closed loop)")
	fs.Float64Var(&r.StartRate, "rate-start", 0, "open loop: ramp linearly from this rate (held during --warmup) to --rate over --duration")
	fs.StringVar(&h.Client, "client", h.Client, "HTTP client: h1 (lean HTTP/1.1: one core of it outruns one core of a Go server), net/http (Go's; HTTP/2 over TLS where offered) or h2c (HTTP/2 without TLS: many requests in flight over --h2-conns connections, no goroutine per request)")
	fs.IntVar(&h.Connections, "connections", h.Connections, "keep-alive connections at most (with h2c: requests in flight at most); in an open loop, also the requests in flight at most")
	fs.IntVar(&h.H2Conns, "h2-conns", h.H2Conns, "with --client h2c: TCP connections the requests are multiplexed over")
	concurrency := fs.Int("concurrency", 0, "closed loop: workers each sending back to back (default: --connections)")
	fs.DurationVar(&r.Duration, "duration", r.Duration, "measured time")
	fs.DurationVar(&r.Warmup, "warmup", r.Warmup, "time run first and left out of every figure")
	fs.DurationVar(&r.Timeout, "timeout", r.Timeout, "time limit of one request")
	fs.DurationVar(&r.MaxLag, "max-lag", r.MaxLag, "open loop: a request that cannot start within this of its intended time is dropped (generator overload)")
	reportFlags(fs, &cfg.JSON, &cfg.Hgrm, &cfg.HTML, &cfg.CPUProfile)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return errUsage
	}
	h.Header = headers.h
	cfg.Command = "inlet bench " + sub + " " + strings.Join(redactHeaders(args), " ")
	if r.Rate > 0 {
		if given["concurrency"] {
			return cfg, usage(errors.New("bench: --concurrency is for the closed loop; bound an open loop (--rate) with --connections"))
		}
		r.Workers = h.Connections
	} else {
		r.Workers = *concurrency
		switch {
		case *concurrency <= 0 && given["concurrency"]:
			return cfg, usage(errors.New("bench: --concurrency must be positive"))
		case *concurrency <= 0:
			r.Workers = h.Connections
		case !given["connections"]:
			h.Connections = *concurrency
		}
	}
	if cfg.BodyFile != "" {
		if given["event-bytes"] {
			return cfg, usage(errors.New("bench: --event-bytes is for generated bodies, not --body-file"))
		}
		b, err := os.ReadFile(cfg.BodyFile)
		if err != nil {
			return cfg, fmt.Errorf("bench: reading --body-file: %w", err)
		}
		h.Body = b
		if !given["events"] {
			h.Events = 0 // unknown: events/s is not reported
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

// redactHeaders hides header values (they may be credentials) in args,
// which go into the reports.
func redactHeaders(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := strings.TrimLeft(out[i], "-")
		switch {
		case !strings.HasPrefix(out[i], "-"):
		case a == "header" && i+1 < len(out):
			i++
			out[i] = redactHeader(out[i])
		case strings.HasPrefix(a, "header="):
			out[i] = out[i][:strings.Index(out[i], "=")+1] + redactHeader(strings.TrimPrefix(a, "header="))
		}
	}
	return out
}

func redactHeader(h string) string {
	name, _, _ := strings.Cut(h, ":")
	return strings.TrimSpace(name) + ":..."
}

func runBenchHTTP(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseBenchHTTP(args, env)
	if err != nil {
		return err
	}
	return loadclient.RunHTTP(ctx, cfg, env.Stdout, env.Stderr)
}

// ParseBenchRPC parses `inlet bench rpc` arguments and environment.
func ParseBenchRPC(args []string, env Env) (loadclient.RPCBenchConfig, error) {
	rc := loadclient.RPCBenchConfig{Service: "echo", Timeout: 10 * time.Second}
	h0 := loadclient.DefaultHTTPConfig()
	h0.URL = "http://127.0.0.1:8080"
	h0.Client = loadclient.ClientH2C
	h0.Connections = 20000 // in flight: h2c multiplexes them over few connections
	h0.Events, h0.EventBytes = 1, 100
	cfg, err := parseBench("rpc", args, env, h0, func(fs *flag.FlagSet) {
		fs.StringVar(&rc.Service, "service", rc.Service, "the service to call: POST <target>/v1/rpc/<service>")
		fs.DurationVar(&rc.Timeout, "rpc-timeout", rc.Timeout, "sent as Inlet-Timeout: how long the gateway waits for a reply")
		fs.StringVar(&rc.MetricsURL, "metrics", "", "the gateway's metrics, for in-flight peak and memory (default <target>/metrics; none: do not read)")
	})
	if err != nil {
		return rc, err
	}
	base := strings.TrimRight(cfg.HTTP.URL, "/")
	if i := strings.Index(base, "/v1/"); i >= 0 {
		base = base[:i]
	}
	cfg.HTTP.URL = base + "/v1/rpc/" + rc.Service
	if cfg.HTTP.Header == nil {
		cfg.HTTP.Header = http.Header{}
	}
	cfg.HTTP.Header.Set("Inlet-Timeout", rc.Timeout.String())
	if rc.MetricsURL == "" {
		rc.MetricsURL = base + "/metrics"
	}
	rc.HTTPBenchConfig = cfg
	return rc, cfg.Validate()
}

func runBenchRPC(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseBenchRPC(args, env)
	if err != nil {
		return err
	}
	return loadclient.RunRPC(ctx, cfg, env.Stdout, env.Stderr)
}
