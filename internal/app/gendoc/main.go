// Command gendoc regenerates the configuration reference in the Markdown
// file it is given (docs/configuration.md) from inlet's flags: everything
// after app.ReferenceMarker. Run by `go generate ./internal/app`.
package main

import (
	"fmt"
	"os"

	"github.com/inlet-dev/inlet/internal/app"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc FILE.md")
		os.Exit(2)
	}
	doc, err := os.ReadFile(os.Args[1])
	if err == nil {
		doc, err = app.UpdateReference(doc)
	}
	if err == nil {
		err = os.WriteFile(os.Args[1], doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
