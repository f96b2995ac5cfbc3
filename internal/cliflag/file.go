package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fileKey is a key the config file may hold.
type fileKey struct {
	path, group, key string
	f                *flag.Flag
}

// fileKeys is every key of fs's flags in the config file, by dotted path.
func fileKeys(fs *flag.FlagSet, l *Layout, fileFlag string) map[string]fileKey {
	keys := map[string]fileKey{}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == fileFlag || !l.inFile(f.Name) {
			return
		}
		g, k, _ := l.Key(f.Name)
		keys[l.Path(f.Name)] = fileKey{path: l.Path(f.Name), group: g, key: k, f: f}
	})
	return keys
}

// loadFile sets, from the YAML file p.File, the flags p does not have
// from the environment or the command line.
func loadFile(fs *flag.FlagSet, p *Parsed, l *Layout, fileFlag string, refused **setError) error {
	name := p.File
	data, err := os.ReadFile(name)
	if err != nil {
		return Usagef(fs, "reading the config file: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Usagef(fs, "%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil // empty
	}
	keys := fileKeys(fs, l, fileFlag)
	groups := map[string]bool{}
	for _, k := range keys {
		if k.group != "" {
			groups[k.group] = true
		}
	}
	at := func(n *yaml.Node, format string, a ...any) error {
		return Usagef(fs, "%s:%d: %s", name, n.Line, fmt.Sprintf(format, a...))
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return at(top, "want a mapping of groups (kafka:, spool:, ...) at the top")
	}
	seen := map[string]bool{}
	set := func(path string, kn, vn *yaml.Node) error {
		k, ok := keys[path]
		if !ok {
			if s := suggestKey(path, keys, groups); s != "" {
				return at(kn, "unknown key %s; did you mean %s?", path, s)
			}
			return at(kn, "unknown key %s", path)
		}
		if seen[path] {
			return at(kn, "%s is set twice", path)
		}
		seen[path] = true
		v, err := scalar(k.f, vn)
		if err != nil {
			return at(vn, "%s (--%s): %v", path, k.f.Name, err)
		}
		if _, ok := p.Source[k.f.Name]; ok {
			return nil // the environment or a flag set it
		}
		if fs.Set(k.f.Name, v) != nil {
			return at(vn, "%s %q (--%s): %s", path, v, k.f.Name, (*refused).why())
		}
		return nil
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		kn, vn := top.Content[i], top.Content[i+1]
		if !groups[kn.Value] {
			if err := set(kn.Value, kn, vn); err != nil {
				return err
			}
			continue
		}
		if seen[kn.Value] {
			return at(kn, "%s is set twice", kn.Value)
		}
		seen[kn.Value] = true
		if vn.Kind != yaml.MappingNode {
			return at(vn, "%s: want a mapping of its keys, not a single value (%s: {key: value, ...})", kn.Value, kn.Value)
		}
		for j := 0; j+1 < len(vn.Content); j += 2 {
			if err := set(kn.Value+"."+vn.Content[j].Value, vn.Content[j], vn.Content[j+1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// scalar is the value of a config file's node as the flag's Set takes it:
// a scalar as written (null is empty), a sequence of scalars joined with
// commas for a list flag.
func scalar(f *flag.Flag, n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		if _, ok := unwrap(f.Value).(interface{ list() }); !ok {
			break
		}
		items := make([]string, len(n.Content))
		for i, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of single values")
			}
			items[i] = c.Value
		}
		return strings.Join(items, ","), nil
	}
	if form := Form(f); form != "" {
		return "", fmt.Errorf("want a single value: %s", form)
	}
	return "", errors.New("want a single value")
}

func unwrap(v flag.Value) flag.Value {
	if r, ok := v.(*recorder); ok {
		return r.Value
	}
	return v
}

// suggestKey is the key of keys nearest to path: by the whole path, by the
// key in another group, or by the flag's own name.
func suggestKey(path string, keys map[string]fileKey, groups map[string]bool) string {
	g, k, _ := strings.Cut(path, ".")
	if k == "" {
		k = g
	}
	flagish := strings.ReplaceAll(path, ".", "-")
	best, bestD := "", max(2, len(path)/4)+1
	for _, c := range keys {
		d := min(distance(path, c.path), distance(k, c.key)+1, distance(k, c.f.Name)+1, distance(flagish, c.f.Name))
		if d < bestD || d == bestD && c.path < best {
			best, bestD = c.path, d
		}
	}
	if !strings.Contains(path, ".") {
		for g := range groups {
			if d := distance(path, g); d < bestD || d == bestD && g < best {
				best, bestD = g, d
			}
		}
	}
	return best
}

// PrintConfig writes the configuration fs holds after p was parsed, as a
// config file l lays out, each value with its source in a comment and
// secrets redacted: a file ParseConfig reads back, secrets aside.
func PrintConfig(w io.Writer, fs *flag.FlagSet, l *Layout, p *Parsed, fileFlag string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: the configuration in effect", fs.Name())
	if p.File != "" {
		fmt.Fprintf(&b, " (config file %s)", p.File)
	}
	b.WriteString("\n")
	section := func(s Section, indent string) {
		type line struct{ key, value, comment string }
		var lines []line
		width := 0
		for _, f := range s.Flags {
			if f.Name == fileFlag || !l.inFile(f.Name) {
				continue
			}
			_, k, _ := l.Key(f.Name)
			src := p.SourceOf(f.Name)
			comment := string(src)
			switch src {
			case FromEnv:
				comment += " " + EnvName(f.Name)
			case FromFlag:
				comment += " --" + f.Name
			}
			ln := line{indent + k + ": " + quote(shown(f, f.Value.String())), "", comment}
			width = max(width, len(ln.key))
			lines = append(lines, ln)
		}
		if len(lines) == 0 {
			return
		}
		if s.Group.Name != "" {
			fmt.Fprintf(&b, "%s:\n", s.Group.Name)
		}
		for _, ln := range lines {
			fmt.Fprintf(&b, "%-*s  # %s\n", width, ln.key, ln.comment)
		}
	}
	var other *Section
	secs := l.Sections(fs)
	for i, s := range secs {
		if s.Group.Name == "" {
			other = &secs[i]
			continue
		}
	}
	if other != nil {
		section(*other, "")
	}
	for _, s := range secs {
		if s.Group.Name != "" {
			section(s, "  ")
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// quote is v as a YAML scalar that reads back as v.
func quote(v string) string {
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Value: v})
	if err != nil {
		return fmt.Sprintf("%q", v)
	}
	return strings.TrimSuffix(string(out), "\n")
}
