// Package app is inlet's command layer: it parses flags and environment,
// builds each package's Config, and starts and stops the components of every
// subcommand.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/ratelog"
)

// Env is the process environment, as seen by Main. A nil Stdin reads
// nothing (as os/exec's Cmd.Stdin).
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Environ        func() []string // nil: no variables to check for slips

	// flagsOnly, when set, is handed a command's flag set in place of
	// parsing it, and the command ends there (flag.ErrHelp): the
	// configuration reference reads every command's flags this way.
	flagsOnly func(*flag.FlagSet)
}

const usage = `inlet — an HTTP event gateway for Apache Kafka that loses nothing it acknowledged.

Usage:
  inlet serve   [flags]   take events over HTTP and deliver them to Kafka
  inlet broker  [flags]   run the embedded single-node development broker alone
  inlet tail    [flags]   print the records of a topic
  inlet verify  [flags]   send events to a gateway, read them back, report any loss (exit 1)
  inlet bench   http ...  load generator: open loop at --rate or closed loop, honest latency reports
  inlet worker  [flags]   answer request-reply calls from Kafka: --echo, --http URL or --exec CMD
  inlet ship    [flags]   send lines of stdin (or a followed --file) as events to inlet or straight to Kafka
  inlet catalog serve|get|list|set|import|export   the event catalog: serve it over gRPC and Thrift, read and change it
  inlet clients add --file FILE NAME               add a client (id and secret) to a clients file
  inlet routes check FILE                          check a routes file (--routes) as inlet serve would load it
  inlet version           print the version, commit, Go version and platform

Every flag can also be set from the environment: --produce-timeout is
INLET_PRODUCE_TIMEOUT. Flags win over the environment. inlet serve also
reads a YAML config file: --config FILE (docs/configuration.md).
Run 'inlet <command> -h' for the flags of a command.
`

// commands are Main's commands, for "did you mean".
var commands = []string{"serve", "broker", "tail", "verify", "bench", "worker", "ship", "catalog", "clients", "routes", "version", "help"}

// Main runs the command in args (without the program name) and returns the
// process exit code. ctx is cancelled on SIGINT/SIGTERM.
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = runServe(ctx, rest, env)
	case "broker":
		err = runBroker(ctx, rest, env)
	case "tail":
		err = runTail(ctx, rest, env)
	case "verify":
		err = runVerify(ctx, rest, env)
	case "bench":
		err = runBench(ctx, rest, env)
	case "worker":
		err = runWorker(ctx, rest, env)
	case "ship":
		err = runShip(ctx, rest, env)
	case "catalog":
		err = runCatalog(ctx, rest, env)
	case "clients":
		err = runClients(ctx, rest, env)
	case "routes":
		err = runRoutes(rest, env)
	case "version", "--version", "-version":
		fmt.Fprintln(env.Stdout, versionString())
	case "help", "-h", "--help":
		fmt.Fprint(env.Stdout, usage)
	default:
		hint := ""
		if s := cliflag.Suggest(cmd, commands); s != "" {
			hint = "; did you mean " + s + "?"
		}
		fmt.Fprintf(env.Stderr, "inlet: unknown command %q%s\n\n%s", cmd, hint, usage)
		return 2
	}
	var ue *cliflag.UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "%s: %s\nrun '%s -h' for the flags\n", ue.Cmd, ue.Msg, ue.Cmd)
		return 2
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(env.Stderr, "inlet: %v\n", err)
	return 1
}

// errUsage marks an error already reported with the command's usage.
var errUsage = cliflag.ErrUsage

// newFlags makes a command's flag set; parse it with parseFlags or
// parseArgs.
func newFlags(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("inlet "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nEvery flag can also be set in the environment, as INLET_ and its name in\ncapitals (--log-level is INLET_LOG_LEVEL); flags win over the environment.\n")
	}
	return fs
}

// parseArgs parses a command's environment and arguments (cliflag.Parse)
// and returns its positional arguments.
func parseArgs(fs *flag.FlagSet, args []string, env Env) ([]string, error) {
	if env.flagsOnly != nil {
		env.flagsOnly(fs)
		return nil, flag.ErrHelp
	}
	warnEnvSlips(fs, env)
	return cliflag.Parse(fs, args, env.Getenv)
}

// warnEnvSlips warns of INLET_ variables that look like a slip for one
// of fs's (cliflag.EnvSlips).
func warnEnvSlips(fs *flag.FlagSet, env Env) {
	if env.Environ == nil {
		return
	}
	known := sync.OnceValue(func() map[string]bool {
		m := map[string]bool{}
		for _, c := range referenceCommands {
			if fs, err := commandFlags(c.args...); err == nil {
				fs.VisitAll(func(f *flag.Flag) { m[cliflag.EnvName(f.Name)] = true })
			}
		}
		return m
	})
	for _, w := range cliflag.EnvSlips(fs, env.Environ(), func(k string) bool { return known()[k] }) {
		fmt.Fprintln(env.Stderr, w)
	}
}

// parseFlags is parseArgs for a command that takes no positional argument.
func parseFlags(fs *flag.FlagSet, args []string, env Env) error {
	pos, err := parseArgs(fs, args, env)
	if err == nil && len(pos) > 0 {
		return cliflag.Usagef(fs, "unexpected argument %q", pos[0])
	}
	return err
}

// logConfig is the logging flags every long-running command shares.
type logConfig struct {
	level  string
	format string
}

func (c *logConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.format, "log-format", "text", "log format: text or json")
}

func (c *logConfig) logger(w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var log *slog.Logger
	switch c.format {
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", c.format)
	}
	// go-redis logs through a global logger of its own, a line per failed
	// dial while Redis is down: at most one per redisLogInterval here.
	redis.SetLogger(ratelog.Printer{Limiter: ratelog.New(log, slog.LevelWarn, "redis client", redisLogInterval), Trim: "redis: "})
	return log, nil
}

// redisLogInterval is how often at most go-redis's messages reach the log.
const redisLogInterval = 10 * time.Second

// DefaultEnv is the real process environment.
func DefaultEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Environ: os.Environ}
}
