package logship_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/logship"
)

// TestExportedAPI: logship exports what a Handler's user needs, and not
// the protocol its sinks share with the delivery engine (Send, Resume,
// Landed, an adapter returning internal types): those live in
// internal/logsink, so that they can change without breaking users.
func TestExportedAPI(t *testing.T) {
	names, _ := filepath.Glob("*.go")
	var got []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if r := recv.(*ast.Ident); r.IsExported() {
						got = append(got, r.Name+"."+d.Name.Name)
					}
				} else {
					got = append(got, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							got = append(got, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{"DropClosed", "DropQueueFull", "DropRejected", "DropSpillFull", "DropSpillIO", "DropTooLarge",
		"ErrTooLarge", "FileHandler", "FileHandler.Close", "FileHandler.Enabled", "FileHandler.Handle",
		"FileHandler.WithAttrs", "FileHandler.WithGroup", "Handler", "Handler.Close", "Handler.Enabled",
		"Handler.Handle", "Handler.Stats", "Handler.WithAttrs", "Handler.WithGroup", "InletSink",
		"KafkaConfig", "KafkaSink", "KafkaSink.Close", "KafkaSink.Write", "NewFileHandler", "NewHandler",
		"NewInletSink", "NewKafkaSink", "Options", "RejectedError", "Sink", "Stats"}
	if !slices.Equal(got, want) {
		t.Errorf("logship exports\n%v\nwant\n%v", got, want)
	}
	// The types that alias or wrap internal/logsink's have only these methods.
	for v, want := range map[any][]string{
		(*logship.KafkaSink)(nil):     {"Close", "Write"},
		(*logship.InletSink)(nil):     {"Close", "Write"},
		(*logship.RejectedError)(nil): {"Error", "Unwrap"},
	} {
		typ := reflect.TypeOf(v)
		var got []string
		for i := range typ.NumMethod() {
			got = append(got, typ.Method(i).Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v has the methods %v, want %v", typ, got, want)
		}
	}
}
