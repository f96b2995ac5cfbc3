package testkit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Process is the inlet binary running a subcommand for a test.
type Process struct {
	Cmd  *exec.Cmd
	Logs *LogBuffer // stdout and stderr, unless Start was given a stderr
	done chan error
}

// Start runs `inlet args...` (see Binary), its output in Logs (stderr goes
// to stderr instead when it is not nil), and kills it at the end of the
// test, showing its log if the test failed.
func Start(tb testing.TB, stderr io.Writer, args ...string) *Process {
	tb.Helper()
	p := &Process{Cmd: exec.Command(Binary(tb), args...), Logs: &LogBuffer{}, done: make(chan error, 1)}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if stderr != nil {
		p.Cmd.Stderr = stderr
	}
	if err := p.Cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { p.done <- p.Cmd.Wait() }()
	tb.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		if tb.Failed() {
			tb.Logf("inlet %v log:\n%s", args, p.Logs)
		}
	})
	return p
}

// Signal sends sig to the process.
func (p *Process) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
}

// Wait waits for the process to exit and returns its exit code (-1 when a
// signal ended it), failing the test after timeout.
func (p *Process) Wait(tb testing.TB, timeout time.Duration) int {
	tb.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for a later Wait
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		tb.Fatalf("waiting for inlet: %v", err)
	case <-time.After(timeout):
		tb.Fatalf("inlet did not exit within %v; its log:\n%s", timeout, p.Logs)
	}
	return 0
}

// WaitListening polls until something accepts connections on addr.
func WaitListening(tb testing.TB, addr string, timeout time.Duration) {
	tb.Helper()
	WaitFor(tb, timeout, "something listens on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// WaitReady polls base+"/readyz" until it answers 200.
func WaitReady(tb testing.TB, base string, timeout time.Duration) {
	tb.Helper()
	WaitFor(tb, timeout, base+" is ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
