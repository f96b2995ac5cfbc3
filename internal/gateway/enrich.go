package gateway

import (
	"context"

	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/ingest"
)

// startEnrich adds the enrichment stages --parse-ua, --geoip-db and
// --bot-patterns turn on (none: nothing, and nothing on the hot path).
func (g *Gateway) startEnrich(opts []ingest.Option) ([]ingest.Option, error) {
	e, err := enrich.New(g.cfg.Enrich, g.log, g.reg)
	if err != nil || e == nil {
		return opts, err
	}
	g.enrich = e
	g.lc.started("enrichment", 0, func(context.Context) error { e.Close(); return nil })
	return append(opts, ingest.WithEnricher(e)), nil
}
