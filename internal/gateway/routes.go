package gateway

import (
	"context"
	"time"

	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/routes"
)

// RoutesReloadInterval is how often the routes file (--routes) is checked
// for changes.
const RoutesReloadInterval = 2 * time.Second

// startRoutes opens the routes file (--routes; a bad file fails the start)
// and polls it for changes, and adds the option that hands it to ingest.
func (g *Gateway) startRoutes(opts []ingest.Option) ([]ingest.Option, error) {
	if g.cfg.Ingest.Routes == "" {
		return opts, nil
	}
	w, err := routes.Open(g.cfg.Ingest.Routes, g.cfg.Ingest.Topic, g.log, routes.NewMetrics(g.reg),
		routes.WithRedactKey(g.cfg.Ingest.Privacy.RedactKeyFile != ""))
	if err != nil {
		return nil, err
	}
	w.Start(RoutesReloadInterval)
	g.routeTable = w
	g.lc.started("routes", 0, func(context.Context) error { w.Close(); return nil })
	return append(opts, ingest.WithRoutes(w)), nil
}
