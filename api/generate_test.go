package api_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates api/gen into a temporary tree and
// fails when it differs from the committed code: an IDL change without
// `make generate`, or a hand edit of generated code.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-go-grpc", "thrift"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("INLET_TEST_REQUIRE_GENERATORS") != "" {
				t.Fatalf("%s not found; make test installs it (protobuf-compiler protoc-gen-go protoc-gen-go-grpc thrift-compiler)", tool)
			}
			t.Skipf("%s not found (set INLET_TEST_REQUIRE_GENERATORS=1 to fail instead)", tool)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "../scripts/generate.sh")
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate: %v\n%s", err, b)
	}
	want := readTree(t, filepath.Join(out, "api", "gen"))
	got := readTree(t, "gen")
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("api/gen/%s is not committed; run make generate", name)
		case !bytes.Equal(g, w):
			t.Errorf("api/gen/%s differs from what the IDL files produce; run make generate", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("api/gen/%s is not produced by the IDL files; remove it or run make generate", name)
		}
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
