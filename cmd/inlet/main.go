// Command inlet is an HTTP event gateway for Apache Kafka. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/inlet-dev/inlet/internal/app"
)

func main() {
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go app.Signals(sigs, cancel, os.Exit, os.Stderr)
	code := app.Main(ctx, os.Args[1:], app.DefaultEnv())
	signal.Stop(sigs)
	os.Exit(code)
}
