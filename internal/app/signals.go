package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
)

// hangup is what SIGHUP reloads; nil: SIGHUP stops like SIGTERM.
var hangup atomic.Pointer[func()]

// again is what the next stopping signal does instead of exiting at once
// (it skips the rest of serve's --shutdown-delay); nil: exit.
var again atomic.Pointer[func()]

// onHangup has Signals call reload on SIGHUP instead of stopping, until
// the returned function is called.
func onHangup(reload func()) (unregister func()) {
	hangup.Store(&reload)
	return func() { hangup.CompareAndSwap(&reload, nil) }
}

// onSignalAgain has Signals call skip, once, at the next SIGTERM, SIGINT
// or SIGHUP that would otherwise exit at once, until the returned function
// is called.
func onSignalAgain(skip func()) (unregister func()) {
	again.Store(&skip)
	return func() { again.CompareAndSwap(&skip, nil) }
}

// Signals turns the process's signals into what inlet does with them, and
// returns once sigs is closed. SIGHUP reloads what the running command
// registered with onHangup (the files `inlet serve` and `inlet catalog
// serve` read while they run: --tls-cert, --routes, --clients,
// --geoip-db). Otherwise the first SIGTERM, SIGINT or SIGHUP cancels the
// commands' context: a graceful stop (a gateway drains, flushes and exits
// 0 if nothing was lost); SIGHUP, which a closing terminal or a supervisor
// sends, stops a command with nothing to reload the same way rather than
// killing it. A second such signal calls exit at once, with 128 + the
// signal's number, for an operator who will not wait (the second Ctrl-C),
// except while `inlet serve` waits out its --shutdown-delay (onSignalAgain):
// then it ends that wait, and the next one exits.
// SIGPIPE is ignored by main, so that a closed log pipe makes writes fail
// instead of killing the process.
func Signals(sigs <-chan os.Signal, cancel context.CancelFunc, exit func(code int), stderr io.Writer) {
	first := true
	for s := range sigs {
		if reload := hangup.Load(); s == syscall.SIGHUP && reload != nil {
			fmt.Fprintf(stderr, "inlet: %v: reloading\n", s)
			(*reload)()
			continue
		}
		if first {
			first = false
			fmt.Fprintf(stderr, "inlet: %v: stopping gracefully; send it again to exit at once\n", s)
			cancel()
			continue
		}
		if skip := again.Swap(nil); skip != nil {
			fmt.Fprintf(stderr, "inlet: %v again: skipping the rest of --shutdown-delay; send it again to exit at once\n", s)
			(*skip)()
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
