package app

import (
	"context"
	"log/slog"

	"github.com/inlet-dev/inlet/internal/kafka"
)

func runTail(ctx context.Context, args []string, env Env) error {
	cfg := kafka.DefaultTailConfig()
	fs := newFlags("tail", env)
	cfg.RegisterFlags(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	return kafka.Tail(ctx, cfg, env.Stdout, slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
