package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestSignals(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Signals(sigs, cancel, func(code int) { exited <- code }, &stderr)
	}()
	sigs <- syscall.SIGHUP
	<-ctx.Done() // the first signal stops gracefully, SIGHUP included
	select {
	case code := <-exited:
		t.Fatalf("exited with %d at the first signal", code)
	default:
	}
	sigs <- syscall.SIGINT
	if code := <-exited; code != 130 {
		t.Fatalf("second signal: exit %d, want 130 (128 + SIGINT)", code)
	}
	<-done
	if out := stderr.String(); !strings.Contains(out, "hangup: stopping gracefully") || !strings.Contains(out, "interrupt again: exiting now") {
		t.Fatalf("stderr: %q", out)
	}
}

// TestSignalsSkipDelay: while serve waits out --shutdown-delay
// (onSignalAgain), the second signal ends that wait instead of exiting;
// the third exits at once.
func TestSignalsSkipDelay(t *testing.T) {
	sigs := make(chan os.Signal, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Signals(sigs, cancel, func(code int) { exited <- code }, &stderr)
	}()
	skipped := make(chan struct{})
	defer onSignalAgain(func() { close(skipped) })()
	sigs <- syscall.SIGTERM
	<-ctx.Done()
	sigs <- syscall.SIGTERM
	select {
	case <-skipped:
	case code := <-exited:
		t.Fatalf("exited with %d at the second signal, during the delay", code)
	}
	sigs <- syscall.SIGTERM
	if code := <-exited; code != 143 {
		t.Fatalf("third signal: exit %d, want 143 (128 + SIGTERM)", code)
	}
	<-done
	if out := stderr.String(); !strings.Contains(out, "skipping the rest of --shutdown-delay") || !strings.Contains(out, "terminated again: exiting now") {
		t.Fatalf("stderr: %q", out)
	}
}
