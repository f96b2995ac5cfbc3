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
