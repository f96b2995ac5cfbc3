package cliflag

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Layout groups a command's flags by topic: the sections of its -h, the
// keys of its config file and the tables of the configuration reference.
// A flag's place follows from its name (Key), so a new flag needs no code
// here unless it starts a topic of its own.
type Layout struct {
	Groups []Group
	// CommandOnly are flags that have no place in the config file (the
	// file's own name, --print-config); they are shown in their group.
	CommandOnly []string
}

// Group is a topic of flags.
type Group struct {
	// Name is the group's key in the config file and the prefix of the
	// flags it takes by name: "spool" takes spool-max-bytes as max-bytes.
	Name  string
	Title string // heading in -h and the reference: "Spool (--ack spool)"
	// Flags are the group's flags that do not start with Name; their
	// keys are their whole names (kafka takes brokers as brokers).
	Flags []string
}

// Key is where the flag named sits in the config file: its group's Name
// and its key there, the flag's name without the group's "Name-" prefix
// (a flag named as its group keeps its name). A flag listed in a group's
// Flags goes there; any other goes to the group with the longest Name it
// starts with. ok is false when no group takes it: the flag is then a
// key of its own at the top of the file.
func (l *Layout) Key(name string) (group, key string, ok bool) {
	if l == nil {
		return "", name, false
	}
	best := -1
	for i, g := range l.Groups {
		if slices.Contains(g.Flags, name) {
			best = i
			break
		}
		if (name == g.Name || strings.HasPrefix(name, g.Name+"-")) && (best < 0 || len(g.Name) > len(l.Groups[best].Name)) {
			best = i
		}
	}
	if best < 0 {
		return "", name, false
	}
	g := l.Groups[best].Name
	if k, ok := strings.CutPrefix(name, g+"-"); ok {
		return g, k, true
	}
	return g, name, true
}

// Path is the flag's dotted key in the config file: "spool.max-bytes".
func (l *Layout) Path(name string) string {
	g, k, ok := l.Key(name)
	if !ok {
		return k
	}
	return g + "." + k
}

// inFile says whether the flag named has a key in the config file.
func (l *Layout) inFile(name string) bool {
	return l == nil || !slices.Contains(l.CommandOnly, name)
}

// Section is a group and its flags, in the order of -h.
type Section struct {
	Group Group // Name "" for the flags no group takes
	Flags []*flag.Flag
}

// InFile says whether the section is a group of the config file: some of
// its flags are.
func (s Section) InFile(l *Layout) bool {
	return s.Group.Name != "" && slices.ContainsFunc(s.Flags, func(f *flag.Flag) bool { return l.inFile(f.Name) })
}

// Sections is fs's flags by group, in the layout's order; flags no group
// takes come last, in a section of Name "".
func (l *Layout) Sections(fs *flag.FlagSet) []Section {
	var groups []Group
	if l != nil {
		groups = l.Groups
	}
	out := make([]Section, len(groups)+1)
	for i, g := range groups {
		out[i].Group = g
	}
	out[len(groups)].Group = Group{Title: "Other"}
	fs.VisitAll(func(f *flag.Flag) {
		g, _, ok := l.Key(f.Name)
		i := len(groups)
		if ok {
			i = slices.IndexFunc(groups, func(x Group) bool { return x.Name == g })
		}
		out[i].Flags = append(out[i].Flags, f)
	})
	for _, s := range out {
		slices.SortStableFunc(s.Flags, func(a, b *flag.Flag) int {
			_, ka, _ := l.Key(a.Name)
			_, kb, _ := l.Key(b.Name)
			return strings.Compare(ka, kb)
		})
	}
	return slices.DeleteFunc(out, func(s Section) bool { return len(s.Flags) == 0 })
}

// Secret says whether the flag named takes a secret itself (a password, a
// client secret, a token), which is never shown: its last word is
// password, secret or token. Flags naming a file that holds one are not.
func Secret(name string) bool {
	for _, w := range []string{"password", "secret", "token"} {
		if name == w || strings.HasSuffix(name, "-"+w) {
			return true
		}
	}
	return false
}

// Redacted stands for a secret's value.
const Redacted = "<redacted>"

// shown is a flag's value as --print-config and the reference show it.
func shown(f *flag.Flag, v string) string {
	if Secret(f.Name) && v != "" {
		return Redacted
	}
	return v
}

// Metavar is flag.UnquoteUsage with the kind of cliflag's values ("size",
// "list", "prefixes") for the "value" it says of them.
func Metavar(f *flag.Flag) (name, usage string) {
	name, usage = flag.UnquoteUsage(f)
	if m, ok := f.Value.(interface{ metavar() string }); ok && name == "value" {
		name = m.metavar()
	}
	return name, usage
}

// PrintUsage writes fs's flags grouped by l, each with its type and
// default (as flag.PrintDefaults does), under a heading that names the
// group's key in the config file.
func PrintUsage(w io.Writer, fs *flag.FlagSet, l *Layout) {
	for _, s := range l.Sections(fs) {
		if s.InFile(l) {
			fmt.Fprintf(w, "\n%s (config file: %s):\n", s.Group.Title, s.Group.Name)
		} else {
			fmt.Fprintf(w, "\n%s:\n", s.Group.Title)
		}
		for _, f := range s.Flags {
			name, usage := Metavar(f)
			line := "  --" + f.Name
			if name != "" {
				line += " " + name
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				usage += fmt.Sprintf(" (default %s)", shown(f, f.DefValue))
			}
			fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		}
	}
}
