package app

import (
	"context"
	"fmt"

	"github.com/inlet-dev/inlet/internal/catalogrpc"
	"github.com/inlet-dev/inlet/internal/cliflag"
)

const catalogUsage = `Usage:
  inlet catalog serve  [flags]              serve the catalog over gRPC and Thrift alone
  inlet catalog get    [flags] GROUP NAME   print one entry
  inlet catalog list   [flags] [GROUP]      print the entries
  inlet catalog set    [flags] GROUP NAME   create or change an entry
  inlet catalog import [flags] FILE         load a JSON tracking plan ("-" for stdin)
  inlet catalog export [flags] [FILE]       write the catalog as a JSON tracking plan
`

// runCatalog dispatches `inlet catalog <verb>`.
func runCatalog(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, catalogUsage)
		return errUsage
	}
	switch verb, rest := args[0], args[1:]; verb {
	case "serve":
		return runCatalogServe(ctx, rest, env)
	case "get", "list", "set", "import", "export":
		return runCatalogCommand(ctx, verb, rest, env)
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, catalogUsage)
		return nil
	default:
		fmt.Fprintf(env.Stderr, "inlet catalog: unknown command %q\n\n%s", verb, catalogUsage)
		return errUsage
	}
}

// runCatalogCommand runs `inlet catalog get|list|set|import|export`.
func runCatalogCommand(ctx context.Context, verb string, args []string, env Env) error {
	cfg := catalogrpc.DefaultCommandConfig()
	cfg.Verb = verb
	var creds credentialFlags
	fs := newFlags("catalog "+verb, env)
	fs.StringVar(&cfg.Addr, "addr", "", "reach the catalog of a running inlet over gRPC at `host:port` (its --grpc-listen), with --client-id and its secret; without it, the store is opened directly")
	creds.register(fs)
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "time limit of the whole command")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "without --addr: the directory of the embedded store (<data-dir>/catalog.db)")
	fs.StringVar(&cfg.Catalog.RedisAddr, "redis", "", "without --addr: the Redis `host:port` of the shared store")
	cliflag.Register(fs, cfg.Catalog.RegisterFlags, cliflag.Only("catalog-store", "catalog-redis-prefix", "catalog-timeout"))
	fs.StringVar(&cfg.Format, "format", cfg.Format, "output: json (list: one entry per line) or text (aligned columns)")
	switch verb {
	case "list":
		fs.IntVar(&cfg.Limit, "limit", 0, "print at most this many entries (0: all)")
		fs.IntVar(&cfg.PageSize, "page-size", cfg.PageSize, "entries asked for at a time")
	case "set":
		fs.Func("display-name", "the entry's display name (\"\" to clear it)", func(s string) error { cfg.DisplayName = &s; return nil })
		fs.StringVar(&cfg.SchemaFile, "schema-file", "", "the JSON Schema of the entry's props from `FILE` (- for stdin; an empty file removes it)")
		fs.StringVar(&cfg.Status, "status", "", "planned, observed or blocked")
	}
	var err error
	if cfg.Args, err = parseArgs(fs, args, env); err != nil {
		return err
	}
	if cfg.ClientID, cfg.Secret, err = creds.resolve(); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(fs.Output(), "inlet catalog %s: %v\n", verb, err)
		return errUsage
	}
	if err := catalogrpc.RunCommand(ctx, cfg, env.Stdin, env.Stdout); err != nil {
		return fmt.Errorf("catalog %s: %w", verb, err)
	}
	return nil
}
