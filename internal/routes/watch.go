package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/filewatch"
)

// Metrics are the routes' metrics.
type Metrics struct {
	events       *prometheus.CounterVec
	reloadErrors prometheus.Counter
	reloads      prometheus.Counter
	loaded       *prometheus.GaugeVec
}

// NewMetrics registers the routes' metrics on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_route_events_total",
			Help: "Events by what routing did to them: per route (routed, dead_lettered), rule (dropped, sampled_out, redirected, dead_lettered) and the overflow (overflowed).",
		}, []string{"kind", "name", "action"}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_routes_reload_errors_total",
			Help: "Reloads of the routes file refused (the routes loaded before keep serving).",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_routes_reloads_total",
			Help: "Routes files loaded, the first included.",
		}),
		loaded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inlet_routes_loaded_info",
			Help: "1 for the routes file serving, by version (its SHA-256, cut to 12 hex digits).",
		}, []string{"version"}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.reloadErrors, m.reloads, m.loaded)
	}
	return m
}

// forget deletes the series of old's routes and rules that t has not:
// renamed or removed ones do not stay on /metrics for ever.
func (m *Metrics) forget(old, t *Table) {
	kept := map[[2]string]bool{}
	for _, s := range t.Stats() {
		kept[[2]string{s.Kind, s.Name}] = true
	}
	for _, s := range old.Stats() {
		if kept[[2]string{s.Kind, s.Name}] {
			continue
		}
		for c, mc := range s.metric {
			if mc != nil {
				m.events.DeleteLabelValues(s.Kind, s.Name, countNames[c])
			}
		}
	}
}

// Watcher holds the routes of a file and reloads them when it changes.
// Load is safe for concurrent use; Start and Close are called once.
type Watcher struct {
	path, topic string
	log         *slog.Logger
	m           *Metrics
	cur         atomic.Pointer[Table]
	haveKey     bool // WithRedactKey

	mu   sync.Mutex // one reload at a time; guards file and sum
	file *filewatch.File
	sum  [32]byte

	poll filewatch.Poller
}

// Option sets a part of a Watcher (Open).
type Option func(*Watcher)

// WithRedactKey says whether the gateway has a redaction key
// (--redact-key-file): without one, a file with a rule that hashes is
// refused, at Open as on reload.
func WithRedactKey(have bool) Option { return func(w *Watcher) { w.haveKey = have } }

// Open loads the routes file at path (an error if it is bad) for events
// whose default topic is topic.
func Open(path, topic string, log *slog.Logger, m *Metrics, opts ...Option) (*Watcher, error) {
	if m == nil {
		m = NewMetrics(nil)
	}
	w := &Watcher{path: path, topic: topic, log: log, m: m, file: filewatch.NewFile(path)}
	for _, o := range opts {
		o(w)
	}
	if err := w.Reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// Load returns the routes serving now.
func (w *Watcher) Load() *Table { return w.cur.Load() }

// Start polls the file every interval (Check) until Close.
func (w *Watcher) Start(interval time.Duration) {
	w.poll.Start(interval, func() { _ = w.Check() })
}

// Check looks at the file now, as the poll does, and reloads it if it
// changed.
func (w *Watcher) Check() error { return w.reload(false) }

// Close stops the poll and waits for it.
func (w *Watcher) Close() { w.poll.Close() }

// Reload reads the file now. A bad file is refused (and counted, and
// logged): the routes loaded before keep serving, whole.
func (w *Watcher) Reload() error { return w.reload(true) }

func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.file.Changed(force) { // a file gone is logged once, not at every poll
		return nil
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		err = fmt.Errorf("routes: %w", err)
	} else {
		sum := sha256.Sum256(b)
		if sum == w.sum && w.cur.Load() != nil { // touched, not changed: the table and its overflow's state stay
			return nil
		}
		var f *File
		f, err = Parse(b)
		if err == nil && !w.haveKey && f.hashes() {
			err = fmt.Errorf("%w: a route's redact rule hashes a field, but there is no key: give --redact-key-file", ErrInvalid)
		}
		if err != nil {
			err = fmt.Errorf("routes: %s: %w", w.path, err)
		} else {
			w.sum = sum
			ver := hex.EncodeToString(sum[:])[:12]
			t := Compile(f, w.topic, ver, w.m)
			old := w.cur.Swap(t)
			if old != nil {
				w.m.loaded.DeleteLabelValues(old.Version)
				w.m.forget(old, t)
			}
			w.m.loaded.WithLabelValues(ver).Set(1)
			w.m.reloads.Inc()
			if w.log != nil {
				w.log.Info("routes: file loaded", "file", w.path, "version", ver, "routes", len(f.Routes), "rules", len(f.Rules), "overflow", f.Overflow != nil)
			}
			return nil
		}
	}
	if w.cur.Load() != nil {
		w.m.reloadErrors.Inc()
		if w.log != nil {
			w.log.Error("routes: file not reloaded: keeping the routes loaded before; fix the file", "err", err, "version", w.cur.Load().Version)
		}
	}
	return err
}

// State is the routes part of /readyz.
type State struct {
	File    string       `json:"file"`
	Version string       `json:"version"`
	Counts  []RouteState `json:"counts"`
}

// RouteState is what one route, rule or the overflow did.
type RouteState struct {
	Kind   string           `json:"kind"` // route, rule or overflow
	Name   string           `json:"name"`
	Events map[string]int64 `json:"events"`
}

// State reports the routes serving and their counts (since they loaded).
func (w *Watcher) State() *State {
	t := w.Load()
	st := &State{File: w.path, Version: t.Version}
	for _, s := range t.Stats() {
		st.Counts = append(st.Counts, RouteState{Kind: s.Kind, Name: s.Name, Events: s.Counts()})
	}
	return st
}
