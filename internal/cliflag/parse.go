package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// ErrUsage is returned by Parse for a command line fs refused; fs has
// printed why, with its usage.
var ErrUsage = errors.New("cliflag: usage")

// EnvName is the environment variable of a flag: produce-timeout →
// INLET_PRODUCE_TIMEOUT.
func EnvName(flagName string) string {
	return "INLET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse is the one way inlet's commands read their flags: from the
// environment (each flag's EnvName, through getenv), then from args, so
// that flags win. Flags may come before, between and after the positional
// arguments, which it returns; "--" ends the flags. A bad environment value
// is an error that names the variable; -h is flag.ErrHelp; any other bad
// flag is ErrUsage.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if v := getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, ErrUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// Register adds to fs the flags register defines whose names keep says to
// keep: a command takes only the flags of a shared config that do
// something in it.
func Register(fs *flag.FlagSet, register func(*flag.FlagSet), keep func(name string) bool) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	register(all)
	all.VisitAll(func(f *flag.Flag) {
		if keep(f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
}

// Except is a Register keep that leaves out the flags named.
func Except(names ...string) func(string) bool {
	return func(name string) bool { return !slices.Contains(names, name) }
}

// Only is a Register keep that keeps only the flags named.
func Only(names ...string) func(string) bool {
	return func(name string) bool { return slices.Contains(names, name) }
}
