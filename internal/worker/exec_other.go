//go:build !unix

package worker

import "os/exec"

// killGroup leaves cmd as it is: without process groups, the context kills
// the shell alone, and Cmd.WaitDelay bounds the wait for its children.
func killGroup(*exec.Cmd) {}
