package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
	"github.com/inlet-dev/inlet/internal/routes"
)

// Authenticator checks the credentials of ingest requests (--auth); an
// *auth.Authenticator is one. Its methods must be safe for concurrent use.
type Authenticator interface {
	// FromHTTP authenticates a request by its Authorization header
	// (Bearer, or Basic with the client id as user) or its k= parameter;
	// source is the client's address, refused (auth.ErrThrottled) after
	// too many bad credentials.
	FromHTTP(r *http.Request, source string) (auth.Principal, error)
	// Allow charges n events to p's rate; over it, auth.ErrRateLimited
	// and how long to wait.
	Allow(p auth.Principal, n int) (retryAfter time.Duration, err error)
	// AllowGroup reports whether p may send events of group
	// (auth.ErrForbidden if not).
	AllowGroup(p auth.Principal, group string) error
}

// Catalog is the event catalog ingest gives codes from and checks events
// against (--catalog); a *catalog.Catalog is one. Its methods must be safe
// for concurrent use.
type Catalog interface {
	Mode() catalog.Mode
	DefaultGroup() string
	// Resolve answers the keys of one request at once, without a store
	// round trip per key; out[i] is the answer of keys[i].
	Resolve(ctx context.Context, keys []catalog.Key, out []catalog.Result)
	// Check returns how props (and the entry's status) break the plan.
	Check(e *catalog.Entry, props []byte) []catalog.Violation
}

// Option adds a part to a Server (see New).
type Option func(*Server)

// WithAuth has every ingest route require credentials (--auth): a request
// without valid ones is answered 401 before its body is read, one over its
// client's rate 429, and an event of a group its client may not send is
// rejected. The client id goes in each event (client). A nil a is no auth.
func WithAuth(a Authenticator) Option { return func(s *Server) { s.auth = a } }

// WithCatalog gives each event its group and catalog code (group, code and
// the inlet-event-code header) and enforces the tracking plan by the
// catalog's mode. A nil c is no catalog.
func WithCatalog(c Catalog) Option { return func(s *Server) { s.cat = c } }

// Routes gives the routes serving now (--routes); a *routes.Watcher is
// one. Load must be safe for concurrent use.
type Routes interface{ Load() *routes.Table }

// WithRoutes routes each event by the routes file: its topic, key and
// dead-letter topic, the runtime rules and the overflow. A nil rt is no
// routes: every event goes to Config.Topic.
func WithRoutes(rt Routes) Option { return func(s *Server) { s.routes = rt } }

// WithEnricher adds what each request's address and User-Agent tell to
// its records, and handles bots as e says (package enrich). nil: none.
func WithEnricher(e *enrich.Enricher) Option { return func(s *Server) { s.enrich = e } }

// unresolvedWarnEvery is how often events let through without a code are
// logged: a store outage hits every event.
const unresolvedWarnEvery = 10 * time.Second

// planned reports whether events need more than parsing: a group, a
// client's admission, a catalog answer.
func (s *Server) planned() bool { return s.auth != nil || s.cat != nil || s.routes != nil }

// initPlan sets what WithAuth and WithCatalog need, after the options ran.
func (s *Server) initPlan() {
	s.defaultGroup = s.cfg.DefaultGroup
	if s.cat != nil {
		s.mode = s.cat.Mode()
		if g := s.cat.DefaultGroup(); g != "" {
			s.defaultGroup = g
		}
		s.unresolvedWarn = ratelog.New(s.log, slog.LevelWarn, "events let through without a catalog code (the catalog store is unreachable)", unresolvedWarnEvery)
	}
	if s.defaultGroup == "" {
		s.defaultGroup = "default"
	}
}

// authenticate checks r's credentials before its body is read. Without an
// Authenticator it lets everything in, with no client.
func (s *Server) authenticate(r *http.Request) (auth.Principal, *httpError) {
	if s.auth == nil {
		return auth.Principal{}, nil
	}
	p, err := s.auth.FromHTTP(r, s.clientIP(r))
	if err == nil && p.Client == nil {
		err = fmt.Errorf("%w: the credentials name no client", auth.ErrBadCredentials)
	}
	if err == nil {
		return p, nil
	}
	s.metrics.AuthRejected.WithLabelValues(authReason(err)).Inc()
	status := auth.HTTPStatus(err)
	if status < 400 || status >= 500 { // not an error of credentials: refuse them anyway
		status = http.StatusUnauthorized
	}
	e := &httpError{status: status, offset: -1, msg: "credentials refused: " + err.Error()}
	if status == http.StatusUnauthorized {
		e.challenge = auth.WWWAuthenticate(err)
	}
	if d := auth.RetryAfter(err); d > 0 {
		e.retryAfter = auth.RetryAfterSeconds(d)
	}
	return p, e
}

// admit charges a request's n events to its client's rate: over it 429
// with Retry-After; a batch larger than the client's burst 413 (it can
// never pass).
func (s *Server) admit(p auth.Principal, n int) *httpError {
	if s.auth == nil {
		return nil
	}
	wait, err := s.auth.Allow(p, n)
	if err == nil {
		return nil
	}
	s.metrics.AuthRejected.WithLabelValues(authReason(err)).Inc()
	status := auth.HTTPStatus(err)
	if status != http.StatusTooManyRequests {
		if status < 400 || status >= 500 {
			status = http.StatusUnauthorized
		}
		return &httpError{status: status, offset: -1, msg: "events refused, nothing was stored: " + err.Error()}
	}
	secs := auth.RetryAfterSeconds(wait)
	return &httpError{status: status, offset: -1, retryAfter: secs,
		msg: fmt.Sprintf("client %q is over its rate (this request holds %d events); nothing was stored: retry after %d s (%v)", clientID(p), n, secs, err)}
}

// authReason labels inlet_auth_rejected_total.
func authReason(err error) string {
	if r := auth.Reason(err); r != "" {
		return r
	}
	return "other"
}

// clientID is p's client id, "" without one.
func clientID(p auth.Principal) string {
	if p.Client == nil {
		return ""
	}
	return p.Client.ID
}

// tally is what a request's events did to the catalog's metrics, counted
// once the sink took them.
type tally struct {
	unresolved [numUnresolved]int
	violations []catalog.ViolationType
}

// Why an event got no code (inlet_catalog_unresolved_events_total{reason}).
const (
	unresolvedUnavailable = iota // the store is unreachable (catalog.ErrUnavailable)
	unresolvedError              // any other error of the catalog
	unresolvedNotFound           // mode open, yet no entry
	numUnresolved
)

var unresolvedReasons = [numUnresolved]string{"unavailable", "error", "not_found"}

// count adds t to the metrics.
func (t *tally) count(m *Metrics, mode catalog.Mode) {
	for i, n := range t.unresolved {
		if n > 0 {
			m.CatalogUnresolved.WithLabelValues(unresolvedReasons[i]).Add(float64(n))
		}
	}
	for _, v := range t.violations {
		m.violation(v, mode).Inc()
	}
}

// recordsPlanned is records with credentials, a catalog or routes: each
// event gets its client and group; the client must be allowed the group;
// with a catalog, one Resolve answers the distinct keys of the request's
// valid events, and each event gets its code or is checked against the
// plan; then the routes decide. Each event was read once (Batch.Add, in
// add) and its record is laid out once its code is known (Batch.Build).
// An event's rejection is kept in b (Reject, Invalid).
func (s *Server) recordsPlanned(r *http.Request, endpoint string, b *event.Batch, items [][]byte, meta event.Meta, p auth.Principal) ([]event.Record, Answer, tally) {
	var (
		rt    *routing // nil: no routes
		state routing  // rt's, on the stack
	)
	if s.routes != nil {
		rt = &state
		rt.init(s.routes.Load(), r, endpoint, meta.Client, len(items))
	}
	var (
		evs   []planned // with a catalog: each event's, for apply once Resolve answered
		keys  []catalog.Key
		keyOf []int // per event: its key's index in keys, -1 for none
		index map[catalog.Key]int
	)
	if s.cat != nil {
		evs = make([]planned, len(items))
		keyOf = make([]int, len(items))
		index = make(map[catalog.Key]int, len(items))
	}
	for i := range items {
		var e planned
		bad := b.Invalid(i)
		if bad == nil {
			if s.auth != nil || s.cat != nil { // routes alone read the name in place
				e.Event = b.Name(i)
			}
			e.Group, bad = s.group(b, i, p)
		}
		if bad == nil && s.auth != nil {
			if err := s.auth.AllowGroup(p, e.Group); err != nil {
				bad = &event.Invalid{Reason: event.ReasonForbiddenGroup,
					Msg: fmt.Sprintf("client %q may not send events of group %q", clientID(p), e.Group)}
			}
		}
		if bad != nil {
			b.Reject(i, bad)
			if keyOf != nil {
				keyOf[i] = -1
			}
			continue
		}
		if s.cat == nil { // nothing to wait for: decided now
			s.place(b, i, &e, rt, p)
			continue
		}
		evs[i] = e
		k := catalog.Key{Group: e.Group, Name: e.Event}
		j, ok := index[k]
		if !ok {
			j = len(keys)
			index[k] = j
			keys = append(keys, k)
		}
		keyOf[i] = j
	}

	var t tally
	// viols[i] are the violations of event i: let through in its header
	// when it is accepted, or why it was rejected.
	var viols [][]catalog.Violation // with a catalog only
	if len(keys) > 0 {
		res := make([]catalog.Result, len(keys))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.WriteTimeout)
		s.cat.Resolve(ctx, keys, res)
		cancel()
		viols = make([][]catalog.Violation, len(items))
		for i := range items {
			if keyOf[i] < 0 {
				continue
			}
			e := &evs[i]
			e.Props = b.Props(i) // valid until Build
			warn, reject, bad := s.apply(e, &res[keyOf[i]], &t)
			e.Props = nil
			viols[i] = warn
			if bad != nil {
				viols[i] = reject
				b.Reject(i, bad)
				continue
			}
			s.place(b, i, e, rt, p)
		}
	}
	b.Build()

	recs := b.RecordSlice(len(items))
	ans := Answer{Rejected: []Rejection{}}
	red := p.Client.Redaction() // the client's redaction rules; nil: none
	for i, raw := range items {
		var vs []catalog.Violation
		if viols != nil {
			vs = viols[i]
		}
		if rt != nil && rt.dropped(i) {
			ans.Accepted++ // dropped by a rule: not the client's error
			continue
		}
		if bad := b.Invalid(i); bad != nil {
			rec := s.deadLetter(raw, bad, meta, red, rt.redaction(i))
			if rt != nil && rt.deadLetter(i) != "" {
				rec.Topic = rt.deadLetter(i)
			}
			if len(vs) > 0 {
				rec.Headers = append(rec.Headers, event.Header{Key: event.HeaderViolations, Value: violationsHeader(vs)})
				t.violations = appendTypes(t.violations, vs)
			}
			recs[i] = rec
			rj := Rejection{Index: i, Error: bad.Msg, Violations: vs}
			if rt != nil && rt.rejected(bad) {
				rj.Reason = string(bad.Reason)
			}
			ans.Rejected = append(ans.Rejected, rj)
			continue
		}
		rec := b.Record(i)
		if red != nil || rt.redaction(i) != nil {
			var applied bool
			rec.Value, applied, _ = s.redact(rec.Value, true, red, rt.redaction(i)) // Build made it: a JSON object
			if applied {
				rec.Key = rt.redactKey(i, rec.Key, rec.Value, rec.EventID)
				s.metrics.redactedBy[redactedRecord].Inc()
			}
		}
		if len(vs) > 0 {
			rec.Headers = append(rec.Headers, event.Header{Key: event.HeaderViolations, Value: violationsHeader(vs)})
			t.violations = appendTypes(t.violations, vs)
		}
		recs[i] = rec
		ans.Accepted++
	}
	if rt != nil && rt.drops > 0 { // dropped events have no record
		recs = slices.DeleteFunc(recs, func(r event.Record) bool { return r.Value == nil })
	}
	return recs, ans, t
}

// place gives the i-th event, valid and admitted, its routes' decision
// (rt nil: none) and, with credentials or a catalog, its group and code.
func (s *Server) place(b *event.Batch, i int, e *planned, rt *routing, p auth.Principal) {
	if rt != nil {
		if bad := rt.route(b, i, e, p); bad != nil {
			b.Reject(i, bad)
			return
		}
	}
	if s.auth != nil || s.cat != nil { // routes alone record no group: records as without a routes file
		b.Set(i, e.Group, e.Code)
	}
}

// planned is what apply needs of an event: its name, group, props (valid
// until Build) and catalog code.
type planned struct {
	Event, Group string
	Props        []byte
	Code         int64
}

// group is the i-th event's group: its context.group, else its client's
// group (auth.Client.Group: its default group or its only group), else the
// default group (the catalog's).
func (s *Server) group(b *event.Batch, i int, p auth.Principal) (string, *event.Invalid) {
	g, ok, bad := b.ContextGroup(i)
	switch {
	case bad != nil:
		return "", bad
	case ok:
		return g, nil
	case p.Client != nil && p.Client.Group() != "":
		return p.Client.Group(), nil
	}
	return s.defaultGroup, nil
}

// apply gives e its catalog answer: its code when found, and what the plan
// says of it by the catalog's mode. It returns the violations to let
// through in a header (mode warn), or those that reject e (a blocked event
// type in any mode; any violation in mode block) with the rejection. An
// unreachable store lets e through without a code: an outage of the store
// never loses events.
func (s *Server) apply(e *planned, res *catalog.Result, t *tally) (warn, reject []catalog.Violation, bad *event.Invalid) {
	switch {
	case res.Err != nil:
		if errors.Is(res.Err, catalog.ErrInvalid) {
			return nil, nil, &event.Invalid{Reason: event.ReasonBadField, Msg: fmt.Sprintf("event type %q of group %q cannot be in the catalog: %v", e.Event, e.Group, res.Err)}
		}
		why := unresolvedError
		if errors.Is(res.Err, catalog.ErrUnavailable) {
			why = unresolvedUnavailable
		}
		t.unresolved[why]++
		s.unresolvedWarn.Log("reason", unresolvedReasons[why], "group", e.Group, "event", e.Event, "err", res.Err)
		return nil, nil, nil
	case !res.Found:
		if s.mode == catalog.ModeOpen { // Resolve fills in mode open: no entry is a catalog fault
			t.unresolved[unresolvedNotFound]++
			return nil, nil, nil
		}
		vs := []catalog.Violation{{Type: catalog.ViolationUnplanned,
			Msg: fmt.Sprintf("event type %q of group %q is not in the tracking plan", e.Event, e.Group)}}
		return s.judge(e, vs)
	}
	ent := &res.Entry
	if ent.Status == catalog.StatusBlocked {
		vs := []catalog.Violation{{Type: catalog.ViolationBlocked,
			Msg: fmt.Sprintf("event type %q of group %q is blocked", e.Event, e.Group)}}
		return nil, vs, planInvalid(vs, s.mode)
	}
	e.Code = ent.Code
	if s.mode == catalog.ModeOpen {
		return nil, nil, nil
	}
	return s.judge(e, s.cat.Check(ent, e.Props))
}

// judge decides on an event's violations by the mode: none let it through;
// a blocked one, or any in mode block, rejects it; others in mode warn go
// in its header.
func (s *Server) judge(e *planned, vs []catalog.Violation) (warn, reject []catalog.Violation, bad *event.Invalid) {
	if len(vs) == 0 {
		return nil, nil, nil
	}
	blocked := false
	for _, v := range vs {
		blocked = blocked || v.Type == catalog.ViolationBlocked
	}
	if blocked || s.mode == catalog.ModeBlock {
		e.Code = 0
		return nil, vs, planInvalid(vs, s.mode)
	}
	return vs, nil, nil
}

// planInvalid is the rejection of an event for its violations: one line
// that names each.
func planInvalid(vs []catalog.Violation, mode catalog.Mode) *event.Invalid {
	var b strings.Builder
	fmt.Fprintf(&b, "breaks the tracking plan (--catalog-mode %s): ", mode)
	for i, v := range vs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(string(v.Type))
		if v.Path != "" {
			b.WriteString(" at ")
			b.WriteString(v.Path)
		}
		if v.Msg != "" {
			b.WriteString(": ")
			b.WriteString(v.Msg)
		}
	}
	return &event.Invalid{Reason: event.ReasonPlanViolation, Msg: b.String()}
}

// headerViolation is one violation in the inlet-violations header.
type headerViolation struct {
	Type catalog.ViolationType `json:"type"`
	Path string                `json:"path"`
}

// violationsHeader is the value of event.HeaderViolations: a compact JSON
// array of {"type","path"}.
func violationsHeader(vs []catalog.Violation) []byte {
	hv := make([]headerViolation, len(vs))
	for i, v := range vs {
		hv[i] = headerViolation{Type: v.Type, Path: v.Path}
	}
	b, _ := json.Marshal(hv) // strings only: it cannot fail
	return b
}

func appendTypes(dst []catalog.ViolationType, vs []catalog.Violation) []catalog.ViolationType {
	for _, v := range vs {
		dst = append(dst, v.Type)
	}
	return dst
}
