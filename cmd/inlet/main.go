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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], app.DefaultEnv())
	stop()
	os.Exit(code)
}
