package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/loadclient"
)

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
func ParseBenchCatalog(sub string, args []string, env Env) (loadclient.CatalogBenchConfig, error) {
	cfg := loadclient.CatalogBenchConfig{Run: bench.DefaultConfig(), Prefill: true}
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
	return loadclient.RunCatalog(ctx, cfg, env.Stdout, env.Stderr)
}
