package app

//go:generate go run ./gendoc ../../docs/configuration.md

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// ReferenceMarker starts the generated part of docs/configuration.md:
// UpdateReference replaces everything after it.
const ReferenceMarker = "<!-- Generated from the flags by `go generate ./internal/app` (make generate): do not edit below. -->\n"

// referenceCommands are the commands the configuration reference lists,
// with their flags grouped as serveLayout says when grouped.
var referenceCommands = []struct {
	args    []string
	grouped bool
}{
	{[]string{"serve"}, true},
	{[]string{"catalog", "serve"}, true},
	{[]string{"broker"}, false},
	{[]string{"tail"}, false},
	{[]string{"ship"}, false},
	{[]string{"worker"}, false},
	{[]string{"verify"}, false},
	{[]string{"bench", "http"}, false},
	{[]string{"bench", "rpc"}, false},
	{[]string{"bench", "kafka"}, false},
	{[]string{"bench", "catalog"}, false},
	{[]string{"catalog", "get"}, false},
	{[]string{"catalog", "list"}, false},
	{[]string{"catalog", "set"}, false},
	{[]string{"catalog", "import"}, false},
	{[]string{"catalog", "export"}, false},
	{[]string{"clients", "add"}, false},
	{[]string{"clients", "list"}, false},
	{[]string{"clients", "remove"}, false},
}

// commandFlags is the flag set of the command args names, with its
// defaults, as the command registers it.
func commandFlags(args ...string) (*flag.FlagSet, error) {
	var fs *flag.FlagSet
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" },
		flagsOnly: func(f *flag.FlagSet) { fs = f }}
	Main(context.Background(), args, env)
	if fs == nil {
		return nil, fmt.Errorf("inlet %s: no flags seen", strings.Join(args, " "))
	}
	return fs, nil
}

// UpdateReference is doc with everything after ReferenceMarker replaced
// by the configuration reference of every command's flags.
func UpdateReference(doc []byte) ([]byte, error) {
	head, _, ok := bytes.Cut(doc, []byte(ReferenceMarker))
	if !ok {
		return nil, errors.New("no generated part: the line " + strings.TrimSpace(ReferenceMarker) + " is missing")
	}
	var b bytes.Buffer
	b.Write(head)
	b.WriteString(ReferenceMarker)
	for _, c := range referenceCommands {
		fs, err := commandFlags(c.args...)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n## inlet %s\n", strings.Join(c.args, " "))
		if !c.grouped {
			b.WriteString("\n| flag | environment | default | meaning |\n|---|---|---|---|\n")
			fs.VisitAll(func(f *flag.Flag) { referenceRow(&b, f, "") })
			continue
		}
		for _, s := range serveLayout.Sections(fs) {
			fmt.Fprintf(&b, "\n### %s", s.Group.Title)
			if s.InFile(serveLayout) {
				fmt.Fprintf(&b, " (`%s:`)", s.Group.Name)
			}
			b.WriteString("\n\n| flag | environment | file key | default | meaning |\n|---|---|---|---|---|\n")
			for _, f := range s.Flags {
				key := "(command line)"
				if !slices.Contains(serveLayout.CommandOnly, f.Name) {
					key = "`" + serveLayout.Path(f.Name) + "`"
				}
				referenceRow(&b, f, key)
			}
		}
	}
	return b.Bytes(), nil
}

// referenceRow writes f's row of a reference table; key "" leaves out the
// file key column.
func referenceRow(b *bytes.Buffer, f *flag.Flag, key string) {
	name, usage := cliflag.Metavar(f)
	flagCell := "`--" + f.Name + "`"
	if name != "" && name != "value" {
		flagCell = "`--" + f.Name + " " + name + "`"
	}
	def := ""
	if f.DefValue != "" {
		def = "`" + f.DefValue + "`"
		if cliflag.Secret(f.Name) {
			def = cliflag.Redacted
		}
	}
	cells := []string{flagCell, "`" + cliflag.EnvName(f.Name) + "`"}
	if key != "" {
		cells = append(cells, key)
	}
	cells = append(cells, def, strings.ReplaceAll(usage, "|", `\|`))
	fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
}
