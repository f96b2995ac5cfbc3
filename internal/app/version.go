package app

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version and Commit are set by `make build` (and so `make image`):
//
//	-ldflags "-X github.com/inlet-dev/inlet/internal/app.Version=$(git describe --tags --always --dirty)
//	          -X github.com/inlet-dev/inlet/internal/app.Commit=$(git rev-parse HEAD)"
//
// Built otherwise (go build, go install ...@v1.2.3), versionString falls
// back on what the go command records in the binary.
var (
	Version = ""
	Commit  = ""
)

// versionString is what `inlet version` prints.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	_, commit, _ := buildVersion(Version, Commit, bi)
	return formatVersion(Version, Commit, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH) +
		noCommitHint(commit, commandName() != "inlet")
}

// noCommitHint explains a missing commit under go run, which (unlike go
// build in a git checkout) records none unless asked.
func noCommitHint(commit string, goRun bool) string {
	if commit != "" || !goRun {
		return ""
	}
	return "; go run records no commit: go run -buildvcs=true ./cmd/inlet version, go build or make build do"
}

// formatVersion says which inlet this is: "inlet VERSION (commit REVISION[,
// modified]; GOVERSION OS/ARCH)". version and commit are the linker's
// (make build): git describe's "-dirty" suffix means modified. Without
// them, bi's: the module version (go install ...@v1.2.3, or the
// pseudo-version go build stamps from the checkout) and the vcs.revision
// and vcs.modified settings (go build in a checkout, unless -buildvcs=false).
// "dev" and no commit when neither knows.
func formatVersion(version, commit string, bi *debug.BuildInfo, goVersion, platform string) string {
	version, commit, modified := buildVersion(version, commit, bi)
	var b strings.Builder
	fmt.Fprintf(&b, "inlet %s (", version)
	if commit != "" {
		fmt.Fprintf(&b, "commit %s", commit)
		if modified {
			b.WriteString(", modified")
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%s %s)", goVersion, platform)
	return b.String()
}

// buildVersion is the version, commit and whether the tree was modified,
// from the linker's values or else bi (formatVersion).
func buildVersion(version, commit string, bi *debug.BuildInfo) (string, string, bool) {
	modified := false
	if version != "" {
		modified = strings.HasSuffix(version, "-dirty")
	} else if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	return version, commit, modified
}

// shortVersion is the version GET / shows: "v1.2.0 (commit 9828860deddf)".
func shortVersion() string {
	bi, _ := debug.ReadBuildInfo()
	version, commit, modified := buildVersion(Version, Commit, bi)
	if commit == "" {
		return version
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if modified && !strings.HasSuffix(version, "-dirty") {
		commit += ", modified"
	}
	return fmt.Sprintf("%s (commit %s)", version, commit)
}
