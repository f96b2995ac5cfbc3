package app

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	const rev = "9828860deddf0f75fdc33baec40dce46148807a0"
	vcs := func(main string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/inlet-dev/inlet", Version: main}, Settings: settings}
	}
	revision := debug.BuildSetting{Key: "vcs.revision", Value: rev}
	dirty := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	clean := debug.BuildSetting{Key: "vcs.modified", Value: "false"}
	cases := []struct {
		name, version, commit string
		bi                    *debug.BuildInfo
		want                  string
	}{
		{"make build", "v1.2.0-3-g9828860", rev, vcs("(devel)"),
			"inlet v1.2.0-3-g9828860 (commit " + rev + "; go1.26.8 linux/amd64)"},
		{"make build, modified tree", "v1.2.0-3-g9828860-dirty", rev, vcs("(devel)"),
			"inlet v1.2.0-3-g9828860-dirty (commit " + rev + ", modified; go1.26.8 linux/amd64)"},
		{"make build wins over the build info", "v1.2.0", rev, vcs("v0.0.0-20261205-abcdef+dirty", debug.BuildSetting{Key: "vcs.revision", Value: "abcdef"}, dirty),
			"inlet v1.2.0 (commit " + rev + "; go1.26.8 linux/amd64)"},
		{"go install @v1.2.3", "", "", vcs("v1.2.3"),
			"inlet v1.2.3 (go1.26.8 linux/amd64)"},
		{"go build in a checkout", "", "", vcs("v0.0.0-20261205191528-9828860deddf+dirty", revision, dirty),
			"inlet v0.0.0-20261205191528-9828860deddf+dirty (commit " + rev + ", modified; go1.26.8 linux/amd64)"},
		{"go build in a clean checkout", "", "", vcs("(devel)", revision, clean),
			"inlet dev (commit " + rev + "; go1.26.8 linux/amd64)"},
		{"go build -buildvcs=false", "", "", vcs("(devel)"),
			"inlet dev (go1.26.8 linux/amd64)"},
		{"no build info", "", "", nil,
			"inlet dev (go1.26.8 linux/amd64)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatVersion(tc.version, tc.commit, tc.bi, "go1.26.8", "linux/amd64"); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestNoCommitHint: under go run, which records no commit, inlet version
// says how to get one; built otherwise, or with a commit, nothing is added.
func TestNoCommitHint(t *testing.T) {
	if h := noCommitHint("", true); !strings.Contains(h, "go run -buildvcs=true") {
		t.Errorf("go run without a commit: %q", h)
	}
	if noCommitHint("abc", true) != "" || noCommitHint("", false) != "" {
		t.Error("a hint where the commit is known, or not under go run")
	}
}
