package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ErrUsage marks a command line refused: a *UsageError says why, or the
// command has printed it.
var ErrUsage = errors.New("cliflag: usage")

// UsageError is a flag, an environment variable or a config file value a
// command refused, said in one line: where it came from, the value, and
// the form expected. It is ErrUsage.
type UsageError struct {
	Cmd string // the command whose flags refused it: "inlet serve"
	Msg string // one line
}

func (e *UsageError) Error() string        { return e.Msg }
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// Usagef is a UsageError of fs's command.
func Usagef(fs *flag.FlagSet, format string, a ...any) error {
	return &UsageError{Cmd: fs.Name(), Msg: fmt.Sprintf(format, a...)}
}

// EnvName is the environment variable of a flag: produce-timeout →
// INLET_PRODUCE_TIMEOUT.
func EnvName(flagName string) string {
	return "INLET_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Source is where a flag's value came from.
type Source string

// Sources, from the weakest: a flag's value is its default unless the
// config file sets it, the environment overrides the file and the command
// line overrides everything.
const (
	FromDefault Source = "default"
	FromFile    Source = "file"
	FromEnv     Source = "env"
	FromFlag    Source = "flag"
)

// Parsed is what ParseConfig read.
type Parsed struct {
	Args   []string          // the positional arguments
	File   string            // the config file read, if any
	Source map[string]Source // of each flag not at its default, by name
}

// SourceOf is where the flag named got its value.
func (p *Parsed) SourceOf(name string) Source {
	if s, ok := p.Source[name]; ok {
		return s
	}
	return FromDefault
}

// Parse is the one way inlet's commands read their flags: from the
// environment (each flag's EnvName, through getenv), then from args, so
// that flags win. Flags may come before, between and after the positional
// arguments, which it returns; "--" ends the flags. -h prints fs's usage
// and is flag.ErrHelp; any bad flag or environment value is a *UsageError
// that says which, the value, and what was expected, in one line.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	p, err := ParseConfig(fs, args, getenv, nil, "")
	if err != nil {
		return nil, err
	}
	return p.Args, nil
}

// ParseConfig is Parse with a config file under the environment: the flag
// named fileFlag (set by its own flag or environment variable) names a
// YAML file whose keys are the flags' names grouped by layout (see
// Layout.Key), read for the flags neither the command line nor the
// environment set. fileFlag "" reads no file.
func ParseConfig(fs *flag.FlagSet, args []string, getenv func(string) string, layout *Layout, fileFlag string) (*Parsed, error) {
	p := &Parsed{Source: map[string]Source{}}
	// Every Set of a value goes through a recorder, so that the source is
	// known and a refusal can name the flag, the value and the form.
	var refused *setError
	var source Source
	restore := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		restore[f] = f.Value
		f.Value = &recorder{Value: f.Value, f: f, source: &source, p: p, refused: &refused}
	})
	defer func() {
		for f, v := range restore {
			f.Value = v
		}
	}()

	source = FromEnv
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if v := getenv(name); v != "" && err == nil {
			if fs.Set(f.Name, v) != nil {
				err = Usagef(fs, "%s=%q (--%s): %s", name, v, f.Name, refused.why())
			}
		}
	})
	if err != nil {
		return nil, err
	}

	source = FromFlag
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	p.Args, err = parseArgs(fs, args, &refused)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		for f, v := range restore {
			f.Value = v
		}
		if fs.Usage != nil {
			fs.Usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}

	if fileFlag == "" {
		return p, nil
	}
	if f := fs.Lookup(fileFlag); f != nil && f.Value.String() != "" {
		p.File = f.Value.String()
		source = FromFile
		if err := loadFile(fs, p, layout, fileFlag, &refused); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// parseArgs parses args into fs, gathering the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string, refused **setError) ([]string, error) {
	var pos []string
	for {
		*refused = nil
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, flagError(fs, err, *refused)
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

// flagError says in one line what the flag package refused.
func flagError(fs *flag.FlagSet, err error, refused *setError) error {
	if refused != nil {
		return Usagef(fs, "--%s %q: %s", refused.f.Name, refused.value, refused.why())
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := Suggest(name, names); s != "" {
			return Usagef(fs, "unknown flag --%s; did you mean --%s?", name, s)
		}
		return Usagef(fs, "unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		name = strings.TrimLeft(name, "-")
		if f := fs.Lookup(name); f != nil {
			if form := Form(f); form != "" {
				return Usagef(fs, "--%s needs a value: %s", name, form)
			}
		}
		return Usagef(fs, "--%s needs a value", name)
	}
	return Usagef(fs, "%s", msg)
}

// setError is a value a flag refused.
type setError struct {
	f     *flag.Flag
	value string
	err   error
}

// why is the refusal, with the form the flag expects where the flag
// package's own words ("parse error") would not say it.
func (e *setError) why() string {
	form := Form(e.f)
	switch msg := e.err.Error(); {
	case msg == "parse error" || strings.HasPrefix(msg, "invalid size"):
		return "want " + form
	case msg == "value out of range":
		return "out of range: want " + form
	case form != "" && !strings.Contains(msg, "want"):
		return msg + ": want " + form
	default:
		return msg
	}
}

// recorder is a flag's Value while ParseConfig sets it.
type recorder struct {
	flag.Value
	f       *flag.Flag
	source  *Source
	p       *Parsed
	refused **setError
}

func (r *recorder) Set(s string) error {
	if err := r.Value.Set(s); err != nil {
		*r.refused = &setError{f: r.f, value: s, err: err}
		return err
	}
	r.p.Source[r.f.Name] = *r.source
	return nil
}

func (r *recorder) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Form says what a flag takes, for errors and the reference: "an integer",
// "a duration such as 500ms, 10s or 2m"; "" for a free string.
func Form(f *flag.Flag) string {
	v := f.Value
	if r, ok := v.(*recorder); ok {
		v = r.Value
	}
	if f, ok := v.(interface{ form() string }); ok {
		return f.form()
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return "true or false"
	case int, int64, uint, uint64:
		return "an integer"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration such as 500ms, 10s or 2m"
	}
	return ""
}

// Suggest is the name of names nearest to name, if it is near enough to
// be a slip ("did you mean"), else "".
func Suggest(name string, names []string) string {
	best, bestD := "", len(name)/3+1
	if bestD < 2 {
		bestD = 2
	}
	bestD++
	for _, n := range names {
		if d := distance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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

// EnvSlips are warnings for the variables of environ (as os.Environ
// gives them) that look like a slip for one of fs's (INLET_BROKER for
// INLET_BROKERS): no flag of fs reads them, other says they are not
// another command's, and one of fs's is near enough for a "did you mean".
func EnvSlips(fs *flag.FlagSet, environ []string, other func(string) bool) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, EnvName(f.Name)) })
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "INLET_") || slices.Contains(names, k) || other(k) {
			continue
		}
		// A letter or two off; one for a short name (INLET_BIN is not a
		// slip for INLET_UI: programs set variables of their own).
		best, bestD := "", 3
		if len(k)-len("INLET_") <= 4 {
			bestD = 2
		}
		for _, n := range names {
			if d := distance(k, n); d < bestD {
				best, bestD = n, d
			}
		}
		if best != "" {
			out = append(out, fmt.Sprintf("%s: %s is not read (no such flag); did you mean %s?", fs.Name(), k, best))
		}
	}
	return out
}
