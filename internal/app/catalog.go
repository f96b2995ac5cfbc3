package app

import (
	"context"
	"fmt"
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
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, catalogUsage)
		return nil
	default:
		return runCatalogClient(ctx, verb, rest, env)
	}
}
