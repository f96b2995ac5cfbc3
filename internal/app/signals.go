package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Signals turns the process's signals into what inlet does with them, and
// returns once sigs is closed. The first SIGTERM, SIGINT or SIGHUP cancels
// the commands' context: a graceful stop (a gateway drains, flushes and
// exits 0 if nothing was lost). inlet has no configuration to reload, so
// SIGHUP, which a closing terminal or a supervisor sends, stops it the same
// way rather than killing it. A second such signal calls exit at once, with
// 128 + the signal's number, for an operator who will not wait (the second
// Ctrl-C). SIGPIPE is ignored by main, so that a closed log pipe makes
// writes fail instead of killing the process.
func Signals(sigs <-chan os.Signal, cancel context.CancelFunc, exit func(code int), stderr io.Writer) {
	first := true
	for s := range sigs {
		if first {
			first = false
			fmt.Fprintf(stderr, "inlet: %v: stopping gracefully; send it again to exit at once\n", s)
			cancel()
			continue
		}
		fmt.Fprintf(stderr, "inlet: %v again: exiting now, without finishing\n", s)
		code := 1
		if n, ok := s.(syscall.Signal); ok {
			code = 128 + int(n)
		}
		exit(code)
		return
	}
}
