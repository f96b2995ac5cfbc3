package testkit

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestPrivateRedisStopStart(t *testing.T) {
	r := PrivateRedis(t)
	if !redisPing(r.Addr) {
		t.Fatal("no PONG after start")
	}
	r.Stop()
	if redisPing(r.Addr) {
		t.Fatal("PONG after Stop")
	}
	r.Start()
	if !redisPing(r.Addr) {
		t.Fatal("no PONG after Start again")
	}
}

// TestClusterTestsListed: every test that starts a Cluster is in
// ClusterTests, so make test's cluster phase runs it (the main phase skips
// them all with INLET_TEST_CLUSTER=later).
func TestClusterTestsListed(t *testing.T) {
	root := filepath.Join("..", "..")
	re := regexp.MustCompile(ClusterTests)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".cache" || d.Name() == "node_modules" || d.Name() == ".git") {
			if err == nil {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || filepath.Base(filepath.Dir(path)) == "testkit" {
			return nil // testkit's own tests name Cluster in strings, this one
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !strings.Contains(src, "testkit.Cluster(") {
			return nil
		}
		pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, root+string(filepath.Separator))))
		if !slices.Contains(ClusterPackages, pkg) {
			t.Errorf("%s starts a cluster but %s is not in ClusterPackages", path, pkg)
		}
		// The test function a Cluster call is in: the last func Test before it.
		for _, m := range regexp.MustCompile(`(?s)func (Test\w+)\(`).FindAllStringSubmatchIndex(src, -1) {
			name := src[m[2]:m[3]]
			body := src[m[1]:]
			if next := strings.Index(body, "\nfunc "); next >= 0 {
				body = body[:next]
			}
			if strings.Contains(body, "testkit.Cluster(") && !re.MatchString(name) {
				t.Errorf("%s: %s starts a cluster but is not in ClusterTests", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
