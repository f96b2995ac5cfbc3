package app

import (
	"fmt"
	"os"

	"github.com/inlet-dev/inlet/internal/routes"
)

const routesUsage = `Usage:
  inlet routes check FILE   check a routes file (inlet serve --routes) as inlet would load it:
                            exit 0 and a summary if it would, 1 and the error (with its line) if not
`

// runRoutes runs `inlet routes check`.
func runRoutes(args []string, env Env) error {
	switch {
	case len(args) == 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(env.Stdout, routesUsage)
		return nil
	case len(args) != 2 || args[0] != "check":
		fmt.Fprint(env.Stderr, routesUsage)
		return errUsage
	}
	b, err := os.ReadFile(args[1])
	if err != nil {
		return fmt.Errorf("routes check: %w", err)
	}
	f, err := routes.Parse(b)
	if err != nil {
		return fmt.Errorf("routes check: %s: %w", args[1], err)
	}
	fmt.Fprintf(env.Stdout, "%s: %d routes, %d rules, overflow %v: inlet would load it\n", args[1], len(f.Routes), len(f.Rules), f.Overflow != nil)
	return nil
}
