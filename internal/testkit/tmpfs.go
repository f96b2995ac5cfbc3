package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's syntax: "64k") on a new directory
// and unmounts it at the end of the test, for tests of a full disk. It skips
// the test where it cannot mount (not root). Register it before anything
// that writes there, so that its cleanup runs last.
func Tmpfs(tb testing.TB, size string) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "inlet-tmpfs-")
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		os.Remove(dir)
		tb.Skip(fmt.Sprintf("cannot mount a tmpfs here: %v %s", err, out))
	}
	tb.Cleanup(func() {
		_ = exec.Command("umount", dir).Run()
		_ = os.Remove(dir)
	})
	return dir
}
