package app

import (
	"context"
	"errors"
)

// runCatalogServe runs `inlet catalog serve`.
func runCatalogServe(ctx context.Context, args []string, env Env) error {
	return errors.New("catalog serve: not built yet")
}
