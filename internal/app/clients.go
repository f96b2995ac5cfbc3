package app

import (
	"context"
	"errors"
)

// runClients runs `inlet clients add`.
func runClients(ctx context.Context, args []string, env Env) error {
	return errors.New("clients: not built yet")
}
