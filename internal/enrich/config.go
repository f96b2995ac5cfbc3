// Package enrich adds to each request's records what its address and
// User-Agent tell, before the address is dropped or truncated: the
// browser, OS and device from the User-Agent and Client Hints (--parse-ua),
// the place from a MaxMind-format database (--geoip-db), and whether the
// client is a bot (the parser's flag and --bot-patterns), which --bots
// tags, routes or drops. Every stage is off by default and costs nothing
// then: the gateway gets no Enricher at all.
package enrich

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// Bot actions (Config.Bots).
const (
	BotsTag   = "tag"   // the records get "bot":true
	BotsDrop  = "drop"  // no record: the request is answered as accepted
	BotsRoute = "route" // the records go to Config.BotTopic, tagged
)

// Config configures the enrichment stages.
type Config struct {
	// ParseUA adds "ua_parsed" from the User-Agent and Sec-CH-UA-* headers.
	ParseUA bool
	// UACacheSize bounds the parsed User-Agents kept (an LRU); 0: none kept.
	UACacheSize int
	// GeoIPDB is a MaxMind-format .mmdb file (GeoLite2-City, DB-IP Lite
	// City); "" adds no "geo". Reloaded when it changes.
	GeoIPDB string
	// GeoIPPrecision is the decimals coordinates are rounded to; negative:
	// no coordinates.
	GeoIPPrecision int
	// BotPatterns are substrings (case-insensitive) of the User-Agents of
	// bots, besides those the parser knows with ParseUA.
	BotPatterns []string
	// Bots is what happens to a bot's events: BotsTag ("" too), BotsDrop
	// or BotsRoute.
	Bots string
	// BotTopic is where BotsRoute sends them.
	BotTopic string
}

// DefaultConfig returns the documented defaults: every stage off.
func DefaultConfig() Config {
	return Config{UACacheSize: 4096, GeoIPPrecision: -1, Bots: BotsTag}
}

// Enabled reports whether any stage is on.
func (c Config) Enabled() bool { return c.ParseUA || c.GeoIPDB != "" || c.botCheck() }

// botCheck reports whether bots are looked for.
func (c Config) botCheck() bool { return c.ParseUA || len(c.BotPatterns) > 0 }

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch c.Bots {
	case "", BotsTag, BotsDrop:
	case BotsRoute:
		if c.BotTopic == "" {
			return errors.New("enrich: --bots route needs --bot-topic")
		}
	default:
		return fmt.Errorf("enrich: --bots %q: want tag, drop or route", c.Bots)
	}
	if c.GeoIPPrecision > 6 {
		return fmt.Errorf("enrich: --geoip-precision %d: at most 6 decimals", c.GeoIPPrecision)
	}
	if c.UACacheSize < 0 {
		return errors.New("enrich: --ua-cache-size must not be negative")
	}
	for _, p := range c.BotPatterns {
		if strings.TrimSpace(p) == "" {
			return errors.New("enrich: --bot-patterns has an empty pattern")
		}
	}
	return nil
}

// RegisterFlags binds c's fields to flags of fs; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.ParseUA, "parse-ua", c.ParseUA, `add "ua_parsed" (browser, OS, device, versions) from the User-Agent and Sec-CH-UA-* headers, and flag the bots the parser knows`)
	fs.IntVar(&c.UACacheSize, "ua-cache-size", c.UACacheSize, "parsed User-Agents kept (least recently used dropped past it); 0: none")
	fs.StringVar(&c.GeoIPDB, "geoip-db", c.GeoIPDB, `MaxMind-format city database `+"`file`"+` (GeoLite2-City, DB-IP Lite City .mmdb): add "geo" (country, region, city); reloaded when it changes`)
	fs.IntVar(&c.GeoIPPrecision, "geoip-precision", c.GeoIPPrecision, `add the coordinates to "geo", rounded to this many decimals (0-6); negative: none`)
	cliflag.List(fs, &c.BotPatterns, "bot-patterns", "User-Agent substrings (case-insensitive, comma-separated) that mark a bot, besides those --parse-ua knows")
	fs.StringVar(&c.Bots, "bots", c.Bots, `what happens to bots' events: tag ("bot":true), drop (answered as accepted, not written) or route (tagged, to --bot-topic)`)
	fs.StringVar(&c.BotTopic, "bot-topic", c.BotTopic, "topic bots' events go to with --bots route")
}
