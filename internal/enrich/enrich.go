package enrich

import (
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
)

// GeoReloadInterval is how often the --geoip-db file is checked for
// changes (a variable for tests).
var GeoReloadInterval = 10 * time.Second

// Metrics are the enrichment's metrics.
type Metrics struct {
	bots            *prometheus.CounterVec
	uaCache         *prometheus.CounterVec
	geoLookups      *prometheus.CounterVec
	geoBuild        prometheus.Gauge
	geoReloads      prometheus.Counter
	geoReloadErrors prometheus.Counter

	// The series the hot path counts, resolved once.
	uaHit, uaMiss, geoFound, geoNotFound prometheus.Counter
	botsTagged, botsDropped, botsRouted  prometheus.Counter
}

// NewMetrics registers the enrichment's metrics on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		bots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_bot_requests_total",
			Help: "Requests from bots (the User-Agent parser's or --bot-patterns), by what --bots did: tagged, dropped, routed.",
		}, []string{"action"}),
		uaCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_ua_parse_total",
			Help: "User-Agents parsed (--parse-ua), by whether the cache had them: hit, miss.",
		}, []string{"cache"}),
		geoLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_geoip_lookups_total",
			Help: "Geo-IP lookups, by result: found, not_found (or no address).",
		}, []string{"result"}),
		geoBuild: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inlet_geoip_database_build_timestamp_seconds",
			Help: "Build time of the geo-IP database serving (its metadata's build_epoch).",
		}),
		geoReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_geoip_reloads_total",
			Help: "Geo-IP databases loaded, the first included.",
		}),
		geoReloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_geoip_reload_errors_total",
			Help: "Geo-IP database loads that failed (missing, unreadable or corrupt file); the database loaded before keeps serving.",
		}),
	}
	m.uaHit, m.uaMiss = m.uaCache.WithLabelValues("hit"), m.uaCache.WithLabelValues("miss")
	m.geoFound, m.geoNotFound = m.geoLookups.WithLabelValues("found"), m.geoLookups.WithLabelValues("not_found")
	m.botsTagged, m.botsDropped, m.botsRouted = m.bots.WithLabelValues("tagged"), m.bots.WithLabelValues("dropped"), m.bots.WithLabelValues("routed")
	if reg != nil {
		reg.MustRegister(m.bots, m.uaCache, m.geoLookups, m.geoBuild, m.geoReloads, m.geoReloadErrors)
	}
	return m
}

// Enricher adds what a request's address and User-Agent tell to its
// records. It is safe for concurrent use. Its stages are those Config
// turned on; with none, New returns nil and the gateway has none.
type Enricher struct {
	cfg      Config
	m        *Metrics
	cache    *uaCache // nil: no cache, or ParseUA off
	geo      *GeoDB   // nil: no database
	patterns []string // lower-cased
}

// New returns the Enricher of cfg, nil when no stage is on. With a
// database, it reads it (an error if it cannot be used) and polls it for
// changes until Close. Without one, it logs so once.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Enricher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GeoIPDB == "" {
		log.Info("no geo-IP database (--geoip-db): records get no geo fields")
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	e := &Enricher{cfg: cfg, m: NewMetrics(reg)}
	if cfg.ParseUA && cfg.UACacheSize > 0 {
		e.cache = newUACache(cfg.UACacheSize)
	}
	for _, p := range cfg.BotPatterns {
		e.patterns = append(e.patterns, strings.ToLower(strings.TrimSpace(p)))
	}
	if cfg.GeoIPDB != "" {
		g, err := OpenGeoDB(cfg.GeoIPDB, cfg.GeoIPPrecision, log, e.m)
		if err != nil {
			return nil, err
		}
		g.Start(GeoReloadInterval)
		e.geo = g
	}
	return e, nil
}

// Close stops the database's poll. e may be nil.
func (e *Enricher) Close() {
	if e != nil && e.geo != nil {
		e.geo.Close()
	}
}

// GeoDB is the database in use, nil without one (or without e).
func (e *Enricher) GeoDB() *GeoDB {
	if e == nil {
		return nil
	}
	return e.geo
}

// Outcome is what Request made of a request.
type Outcome struct {
	// Fields are the JSON members every record of the request gets, each
	// with its leading comma ("ua_parsed", "geo", "bot"); nil: none.
	Fields []byte
	// Bot is set when the client is a bot.
	Bot bool
	// Drop: the request's events are to be answered as accepted and not
	// written (--bots drop).
	Drop bool
	// Topic, when not "", replaces the request's topic (--bots route).
	Topic string
}

// Request enriches request r, whose client address is ip (as the
// gateway found it, before any IP policy): once per request, whatever its
// number of events.
func (e *Enricher) Request(r *http.Request, ip string) Outcome {
	var o Outcome
	var dst []byte
	ua := event.Prefix(r.UserAgent(), event.MaxUABytes) // as the record keeps it
	switch {
	case e.cfg.ParseUA:
		dst, o.Bot = e.parse(ua, r.Header)
		dst = dst[:len(dst):len(dst)] // shared: an append copies it
	case len(e.patterns) > 0:
		o.Bot = e.matchBot(ua)
	}
	if e.geo != nil {
		dst = e.appendGeo(dst, ip)
	}
	if o.Bot {
		switch e.cfg.Bots {
		case BotsDrop:
			o.Drop = true
			e.m.botsDropped.Inc()
		case BotsRoute:
			o.Topic = e.cfg.BotTopic
			e.m.botsRouted.Inc()
		default:
			e.m.botsTagged.Inc()
		}
		dst = append(dst, `,"bot":true`...)
	}
	o.Fields = dst
	return o
}

// parse returns the "ua_parsed" member of ua with the Client Hints of h,
// and whether it is a bot's (the parser's flag or a pattern), through the
// cache. The key is the User-Agent alone when no Client Hint is sent (no
// allocation), else with the hints; a hint longer than maxHintBytes is
// not cached, so that an entry holds at most 512 + 5 x 256 bytes of key.
// The member is shared: not to be changed.
func (e *Enricher) parse(ua string, h http.Header) ([]byte, bool) {
	key, hinted, cache := ua, false, e.cache
	for _, k := range hintHeaders {
		if v := h[k]; len(v) > 0 {
			if len(v[0]) > maxHintBytes {
				cache = nil
			}
			if !hinted {
				key, hinted = ua+"\x00", true
			}
			key += k + ":" + v[0] + "\x00"
		}
	}
	if !hinted {
		h = nil
	}
	if cache != nil {
		if c, ok := cache.get(key); ok {
			e.m.uaHit.Inc()
			return c.fields, c.bot
		}
		e.m.uaMiss.Inc()
	}
	u := ParseUA(ua, h)
	bot := u.Bot || e.matchBot(ua)
	fields := appendUA(nil, u)
	if cache != nil {
		cache.put(key, parsed{fields, bot})
	}
	return fields, bot
}

// maxHintBytes is the longest Client Hint value cached (real ones are
// under 200 bytes).
const maxHintBytes = 256

// matchBot reports whether ua holds one of the patterns, case-insensitively.
func (e *Enricher) matchBot(ua string) bool {
	if len(e.patterns) == 0 {
		return false
	}
	lower := strings.ToLower(ua)
	for _, p := range e.patterns {
		if strings.Contains(lower, p) {
			return true
		}
	}
	return false
}

func (e *Enricher) appendGeo(dst []byte, ip string) []byte {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		e.m.geoNotFound.Inc()
		return dst
	}
	dst, ok := e.geo.appendPlace(dst, a)
	if !ok {
		e.m.geoNotFound.Inc()
		return dst
	}
	e.m.geoFound.Inc()
	return dst
}
