package app

import (
	"context"
	"fmt"

	"github.com/inlet-dev/inlet/internal/devbroker"
)

func runBroker(ctx context.Context, args []string, env Env) error {
	cfg := devbroker.DefaultConfig()
	cfg.DataDir = ".inlet"
	fs := newFlags("broker", env)
	cfg.RegisterFlags(fs, "")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory the broker's topics and offsets persist in")
	lc := &logConfig{}
	lc.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	b, err := devbroker.Start(cfg, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, `
inlet development broker listening on %[1]s (single node, data under %[2]s).
For development only: no replication, no production guarantees.

  inlet serve --brokers %[1]s
  kcat -b %[1]s -L

`, b.Addr(), cfg.DataDir)
	<-ctx.Done()
	log.Info("stopping the development broker")
	b.Close()
	return nil
}
