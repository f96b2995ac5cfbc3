package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/privacy"
)

const clientsUsage = `Usage:
  inlet clients add    --file FILE NAME [--groups a,b] [--topics 'a.*,b'] [--default-group G] [--rate N] [--burst N] [--admin]
                       add a client; its new secret is printed once on stdout, only its hash is kept
  inlet clients list   --file FILE      print the clients (no secrets)
  inlet clients remove --file FILE NAME remove a client: a running inlet refuses its secret and
                       session tokens once it has reloaded the file
`

// runClients runs `inlet clients add|list|remove`.
func runClients(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, clientsUsage)
		return errUsage
	}
	switch verb, rest := args[0], args[1:]; verb {
	case "add":
		return runClientsAdd(rest, env)
	case "list":
		return runClientsList(rest, env)
	case "remove", "rm":
		return runClientsRemove(rest, env)
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, clientsUsage)
		return nil
	default:
		fmt.Fprintf(env.Stderr, "inlet clients: unknown command %q\n\n%s", verb, clientsUsage)
		return errUsage
	}
}

// oneName checks that exactly one NAME was given.
func oneName(fs *flag.FlagSet, pos []string, file string) (string, error) {
	switch {
	case file == "":
		fmt.Fprintf(fs.Output(), "%s: --file FILE is required\n", fs.Name())
		return "", errUsage
	case len(pos) != 1:
		fmt.Fprintf(fs.Output(), "%s: want one client NAME, got %d arguments\n", fs.Name(), len(pos))
		return "", errUsage
	}
	return pos[0], nil
}

func runClientsAdd(args []string, env Env) error {
	var (
		file string
		c    auth.Client
	)
	fs := newFlags("clients add", env)
	fs.StringVar(&file, "file", "", "the clients `FILE` (created if missing; what inlet serve --clients reads)")
	cliflag.List(fs, &c.Groups, "groups", "groups the client may send and look up, comma-separated (empty: all)")
	cliflag.List(fs, &c.Topics, "topics", "topics (globs) the routes file (--routes) may send the client's events to, comma-separated (empty: all)")
	fs.StringVar(&c.DefaultGroup, "default-group", "", "group of the client's events that name none (empty: the gateway's --catalog-default-group)")
	fs.Float64Var(&c.Rate, "rate", 0, "events (or catalog calls) per second the client may send; 0: no limit")
	fs.IntVar(&c.Burst, "burst", 0, "how many events may come at once over --rate (0: the rate, at least 1)")
	fs.BoolVar(&c.Admin, "admin", false, "the client may change the catalog (Upsert, Block) and, with --auth, watch the live events page (/ui), which shows user data")
	fs.Func("ip-policy", "what the client's events keep of its address: keep, truncate or drop (default: the gateway's --ip-policy)", func(v string) error {
		p, err := privacy.ParsePolicy(v)
		c.IPPolicy = &p
		return err
	})
	var redact []string
	cliflag.List(fs, &redact, "redact", "redaction rules of the client's events, comma-separated PATH=ACTION: a field (props.email, /context/traits/phone) and drop or hash")
	pos, err := parseArgs(fs, args, env)
	if err != nil {
		return err
	}
	for _, r := range redact {
		path, action, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("clients add: --redact %q: want PATH=drop or PATH=hash", r)
		}
		c.Redact = append(c.Redact, privacy.Rule{Path: path, Action: action})
	}
	if c.ID, err = oneName(fs, pos, file); err != nil {
		return err
	}
	if c.Rate < 0 || c.Burst < 0 {
		return errors.New("clients add: --rate and --burst must not be negative")
	}
	secret, err := auth.AddClient(file, c)
	if err != nil {
		return fmt.Errorf("clients add: %w", err)
	}
	fmt.Fprintln(env.Stdout, secret)
	fmt.Fprintf(env.Stderr, "added client %q to %s; its secret (above) is shown only this once: keep it, the file holds only its hash\n", c.ID, file)
	return nil
}

func runClientsList(args []string, env Env) error {
	var file string
	fs := newFlags("clients list", env)
	fs.StringVar(&file, "file", "", "the clients `FILE`")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if file == "" {
		fmt.Fprintf(fs.Output(), "%s: --file FILE is required\n", fs.Name())
		return errUsage
	}
	cs, err := auth.ReadFile(file)
	if err != nil {
		return fmt.Errorf("clients list: %w", err)
	}
	return auth.PrintClients(env.Stdout, cs)
}

func runClientsRemove(args []string, env Env) error {
	var file string
	fs := newFlags("clients remove", env)
	fs.StringVar(&file, "file", "", "the clients `FILE`")
	pos, err := parseArgs(fs, args, env)
	if err != nil {
		return err
	}
	name, err := oneName(fs, pos, file)
	if err != nil {
		return err
	}
	if err := auth.RemoveClient(file, name); err != nil {
		return fmt.Errorf("clients remove: %w", err)
	}
	fmt.Fprintf(env.Stderr, "removed client %q from %s; a running inlet refuses its secret and session tokens once it reloads the file (--clients-reload-interval)\n", name, file)
	return nil
}
