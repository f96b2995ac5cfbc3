//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// killGroup makes cmd the leader of a process group of its own and kills the
// whole group when its context ends, so that the children of `sh -c` die
// with it.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
