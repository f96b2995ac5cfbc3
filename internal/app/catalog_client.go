package app

import (
	"context"
	"fmt"
)

// runCatalogClient runs `inlet catalog get|list|set|import|export`.
func runCatalogClient(ctx context.Context, verb string, args []string, env Env) error {
	return fmt.Errorf("catalog %s: not built yet", verb)
}
