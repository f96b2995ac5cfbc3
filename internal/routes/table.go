package routes

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/privacy"
)

// Input is what routing reads of one event. Its byte slices are only read
// during Decide.
type Input struct {
	Client, Group, Endpoint string
	Event, UID, AnonID, ID  []byte
	// Header is the request's header (nil: none).
	Header http.Header

	// plan is what Prepare found of the request's fields.
	plan plan
}

// plan lists the rules and routes whose request-level patterns (client,
// endpoint, headers) match one request: only those are tried on each of
// its events, by their event-level patterns alone.
type plan struct {
	t             *Table // the Table it was made for; nil: none, try every entry
	rules, routes indexes
}

// indexes is a list of entries' indexes, in place for most requests (no
// allocation, and an Input that can stay on its caller's stack: a slice
// of its own array would move it to the heap).
type indexes struct {
	n    int
	in   [16]int16
	more []int16 // all of them, once past len(in)
}

func (x *indexes) add(i int16) {
	switch {
	case x.more != nil:
		x.more = append(x.more, i)
	case x.n < len(x.in):
		x.in[x.n] = i
		x.n++
	default:
		x.more = append(append(make([]int16, 0, 2*len(x.in)), x.in[:]...), i)
	}
}

func (x *indexes) list() []int16 {
	if x.more != nil {
		return x.more
	}
	return x.in[:x.n]
}

// Prepare readies in for the Decide calls of one request's events: call it
// once the request-level fields (Client, Endpoint, Header) are set; the
// event-level ones (Group, Event, UID, AnonID, ID) may then change per event.
// Gain: Decide 230 -> 48 ns an event on bench/routes-20.yaml, with the first-byte check (BenchmarkDecideBench, 2026-12-05).
func (t *Table) Prepare(in *Input) {
	in.plan = plan{t: t}
	p := &in.plan
	for i := range t.rules {
		if t.rules[i].pats[1].match(in.Client) {
			p.rules.add(int16(i))
		}
	}
	for i := range t.routes {
		if t.routes[i].requestMatches(in) {
			p.routes.add(int16(i))
		}
	}
}

// Action is what becomes of an event.
type Action uint8

const (
	Deliver    Action = iota // to Decision.Topic
	Drop                     // no record; answered as accepted
	DeadLetter               // to Decision.DeadLetter, with Decision.Reason
)

// Key is the field an event's record key comes from.
type Key uint8

const (
	KeyDefault Key = iota // uid, else anon_id, else id (inlet's default)
	KeyUID
	KeyAnonID
	KeyID
	KeyProp // the props field Decision.KeyProp
)

// Decision is what routing made of one event.
type Decision struct {
	Action Action
	// Topic is where a delivered event goes; Route the route's name (and
	// RouteTopic its topic before a redirect or the overflow).
	Topic, Route, RouteTopic string
	// DeadLetter is the route's dead-letter topic; "" for the gateway's.
	DeadLetter string
	// Reason and Msg say why a dead-lettered event was (reason a word for
	// inlet-reason and the answer).
	Reason, Msg string
	Key         Key
	KeyProp     string
	// Default is true when the default route (--topic) delivers the
	// event unchanged: no rule or overflow acted on it. Its record is
	// written as without a routes file (no route headers).
	Default bool
	// Redact are the route's redaction rules; nil: none.
	Redact *privacy.Rules
}

// Reasons of events dead-lettered by routing.
const (
	ReasonBadTopic  = "bad_topic"  // the topic template made a name Kafka refuses
	ReasonRule      = "route_rule" // a dead_letter rule
	ReasonForbidden = "forbidden_topic"
)

// Table is one compiled routes file. It is immutable and safe for
// concurrent use (its counters and overflow table are atomic or locked).
type Table struct {
	Version  string // the file's SHA-256, hex, cut to 12
	routes   []route
	rules    []rule
	overflow *overflow
	deflt    route
}

type route struct {
	Route
	topic, dead []tmplPart
	static      string // the topic when it names no field
	staticErr   error  // validTopic(static), once
	key         Key
	keyProp     string
	stats       *Stats
	redact      *privacy.Rules
	// client, group, event, endpoint, then the headers' (in hdrs order)
	pats []pattern
	hdrs []string
	// first is the byte every event name it matches starts with; -1: any.
	first int16
}

type rule struct {
	Rule
	by   field
	pats [4]pattern // event, client, uid, anon_id
	// first is the byte every event name it matches starts with; -1: any.
	first int16
	keep  uint64 // sample: kept when hash < keep
	stats *Stats
}

// Stats counts what a route or rule did. Its counters are atomic.
type Stats struct {
	Name, Kind string // Kind: route, rule or overflow
	counts     [numCounts]atomic.Int64
	metric     [numCounts]prometheus.Counter
}

// What Stats count.
const (
	cRouted = iota
	cDropped
	cSampledOut
	cRedirected
	cDeadLettered
	cOverflowed
	numCounts
)

// ruleCounts is the count of each action's rule.
var ruleCounts = map[string]int{"drop": cDropped, "sample": cSampledOut, "redirect": cRedirected, "dead_letter": cDeadLettered}

var countNames = [numCounts]string{"routed", "dropped", "sampled_out", "redirected", "dead_lettered", "overflowed"}

func (s *Stats) add(c int) {
	s.counts[c].Add(1)
	if m := s.metric[c]; m != nil {
		m.Inc()
	}
}

// Counts returns the non-zero counts by name.
func (s *Stats) Counts() map[string]int64 {
	out := map[string]int64{}
	for i := range s.counts {
		if n := s.counts[i].Load(); n != 0 {
			out[countNames[i]] = n
		}
	}
	return out
}

type field uint8

const (
	fUID field = iota + 1
	fAnonID
	fClient
	fID
)

// fieldOf parses a field name; "" is def.
func fieldOf(name string, def field) (field, bool) {
	switch name {
	case "":
		return def, true
	case "uid":
		return fUID, true
	case "anon_id":
		return fAnonID, true
	case "client":
		return fClient, true
	case "id":
		return fID, true
	}
	return 0, false
}

func (in *Input) field(f field) []byte {
	switch f {
	case fUID:
		return in.UID
	case fAnonID:
		return in.AnonID
	case fID:
		return in.ID
	}
	return nil
}

func parseKey(k string) (Key, error) {
	switch {
	case k == "":
		return KeyDefault, nil
	case k == "uid":
		return KeyUID, nil
	case k == "anon_id":
		return KeyAnonID, nil
	case k == "id":
		return KeyID, nil
	case strings.HasPrefix(k, "props.") && len(k) > len("props."):
		return KeyProp, nil
	}
	return 0, fmt.Errorf("key %q: want uid, anon_id, id or props.NAME", k)
}

// Compile makes a Table of f, whose events not matched by any route go to
// defaultTopic (--topic). m may be nil (no metrics).
func Compile(f *File, defaultTopic, version string, m *Metrics) *Table {
	t := &Table{Version: version}
	stats := func(name, kind string, counts ...int) *Stats {
		s := &Stats{Name: name, Kind: kind}
		if m != nil {
			for _, c := range counts {
				s.metric[c] = m.events.WithLabelValues(kind, name, countNames[c])
			}
		}
		return s
	}
	for i, r := range f.Routes {
		cr := route{Route: r}
		cr.Name = r.name(i)
		cr.topic, _ = parseTemplate(r.Topic)
		if len(cr.topic) == 1 && cr.topic[0].field == "" {
			cr.static, cr.staticErr = r.Topic, validTopic(r.Topic)
		}
		if r.DeadLetter != "" {
			cr.dead, _ = parseTemplate(r.DeadLetter)
		}
		cr.key, _ = parseKey(r.Key)
		cr.keyProp = strings.TrimPrefix(r.Key, "props.")
		cr.redact, _ = privacy.Compile(r.Redact) // checked by Parse
		cr.stats = stats(cr.Name, "route", cRouted, cDeadLettered)
		m := r.Match
		cr.pats = []pattern{compileGlob(m.Client), compileGlob(m.Group), compileGlob(m.Event), compileGlob(m.Endpoint)}
		for h, g := range m.Header {
			cr.hdrs = append(cr.hdrs, http.CanonicalHeaderKey(h))
			cr.pats = append(cr.pats, compileGlob(g))
		}
		cr.first = cr.pats[2].first()
		t.routes = append(t.routes, cr)
	}
	t.deflt = route{first: -1, Route: Route{Name: "default", Topic: defaultTopic}, static: defaultTopic, staticErr: validTopic(defaultTopic), stats: stats("default", "route", cRouted, cDeadLettered)}
	for i, r := range f.Rules {
		cr := rule{Rule: r}
		cr.Name = r.name(i)
		cr.by, _ = fieldOf(r.By, fUID)
		if r.Rate != nil {
			cr.keep = uint64(math.Min(*r.Rate*(1<<63), 1<<63)) << 1
			if *r.Rate >= 1 {
				cr.keep = math.MaxUint64
			}
		}
		cr.stats = stats(cr.Name, "rule", ruleCounts[r.Action])
		m := r.Match
		cr.pats = [4]pattern{compileGlob(m.Event), compileGlob(m.Client), compileGlob(m.UID), compileGlob(m.AnonID)}
		cr.first = cr.pats[0].first()
		t.rules = append(t.rules, cr)
	}
	if o := f.Overflow; o != nil {
		t.overflow = newOverflow(o, stats("overflow", "overflow", cOverflowed), time.Now)
	}
	return t
}

// Stats returns the counts of every route (the default one last), rule
// and the overflow, in file order.
func (t *Table) Stats() []*Stats {
	var out []*Stats
	for i := range t.routes {
		out = append(out, t.routes[i].stats)
	}
	out = append(out, t.deflt.stats)
	for i := range t.rules {
		out = append(out, t.rules[i].stats)
	}
	if t.overflow != nil {
		out = append(out, t.overflow.stats)
	}
	return out
}

// Decide routes one event into d: the first rule that matches acts on it,
// then the first route that matches gives its topic, key and dead-letter
// topic (the default route: --topic), then the overflow. It allocates
// only for a topic template that names a field.
func (t *Table) Decide(in *Input, d *Decision) {
	*d = Decision{}
	var redirect *rule
	planned := in.plan.t == t
	n := len(t.rules)
	var planRules []int16
	if planned {
		planRules = in.plan.rules.list()
		n = len(planRules)
	}
	for j := 0; j < n; j++ {
		var r *rule
		if planned {
			r = &t.rules[planRules[j]]
			if f := r.first; f >= 0 && (len(in.Event) == 0 || in.Event[0] != byte(f)) {
				continue // its event pattern cannot match: most rules, for most events
			}
			if !r.eventMatches(in) {
				continue
			}
		} else if r = &t.rules[j]; !r.matches(in) {
			continue
		}
		switch r.Action {
		case "drop":
			r.stats.add(cDropped)
			d.Action, d.Route = Drop, r.Name
			return
		case "sample":
			if !r.kept(in) {
				r.stats.add(cSampledOut)
				d.Action, d.Route = Drop, r.Name
				return
			}
		case "redirect":
			redirect = r
		case "dead_letter":
			r.stats.add(cDeadLettered)
			d.Action, d.Reason = DeadLetter, ReasonRule
			d.Msg = fmt.Sprintf("dead-lettered by routes rule %q", r.Name)
			if r.Reason != "" {
				d.Msg += ": " + r.Reason
			}
			t.routeOf(in, d)
			return
		}
		break
	}
	rt := t.routeOf(in, d)
	err := rt.staticErr
	if rt.static == "" {
		err = validTopic(d.Topic)
	}
	if err != nil {
		rt.stats.add(cDeadLettered)
		d.Action, d.Reason = DeadLetter, ReasonBadTopic
		d.Msg = fmt.Sprintf("route %q made topic %q: %v", rt.Name, d.Topic, err)
		return
	}
	d.RouteTopic = d.Topic
	switch {
	case redirect != nil:
		redirect.stats.add(cRedirected)
		d.Topic = redirect.Topic
	case t.overflow != nil && t.overflow.over(in):
		t.overflow.stats.add(cOverflowed)
		d.Topic = t.overflow.Topic
	default:
		rt.stats.add(cRouted)
		d.Default = rt == &t.deflt
	}
}

// routeOf fills d's topic, key and dead-letter topic from the first route
// that matches in.
func (t *Table) routeOf(in *Input, d *Decision) *route {
	rt := &t.deflt
	if in.plan.t == t {
		for _, i := range in.plan.routes.list() {
			if f := t.routes[i].first; f >= 0 && (len(in.Event) == 0 || in.Event[0] != byte(f)) {
				continue
			}
			if t.routes[i].eventMatches(in) {
				rt = &t.routes[i]
				break
			}
		}
	} else {
		for i := range t.routes {
			if t.routes[i].requestMatches(in) && t.routes[i].eventMatches(in) {
				rt = &t.routes[i]
				break
			}
		}
	}
	d.Route, d.Key, d.KeyProp, d.Redact = rt.Name, rt.key, rt.keyProp, rt.redact
	d.Topic = rt.static
	if rt.static == "" {
		d.Topic = expand(rt.topic, in)
	}
	if rt.dead != nil {
		d.DeadLetter = expand(rt.dead, in)
		if validTopic(d.DeadLetter) != nil {
			d.DeadLetter = "" // the gateway's, rather than a record Kafka refuses
		}
	}
	return rt
}

func expand(parts []tmplPart, in *Input) string {
	if len(parts) == 1 && parts[0].field == "" {
		return parts[0].text
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.field {
		case "":
			b.WriteString(p.text)
		case "client":
			b.WriteString(in.Client)
		case "group":
			b.WriteString(in.Group)
		case "event":
			b.Write(in.Event)
		case "endpoint":
			b.WriteString(in.Endpoint)
		}
	}
	return b.String()
}

// requestMatches reports whether the request-level patterns of r (client,
// endpoint, headers) match in; eventMatches its event-level ones (group,
// event).
func (r *route) requestMatches(in *Input) bool {
	p := r.pats
	if !p[0].match(in.Client) || !p[3].match(in.Endpoint) {
		return false
	}
	for i, h := range r.hdrs {
		v := ""
		if vs := in.Header[h]; len(vs) > 0 {
			v = vs[0]
		}
		if !p[4+i].match(v) {
			return false
		}
	}
	return true
}

func (r *route) eventMatches(in *Input) bool {
	return r.pats[1].match(in.Group) && r.pats[2].matchBytes(in.Event)
}

func (r *rule) matches(in *Input) bool { return r.pats[1].match(in.Client) && r.eventMatches(in) }

// eventMatches is matches but for the client (Prepare's).
func (r *rule) eventMatches(in *Input) bool {
	p := &r.pats
	return p[0].matchBytes(in.Event) && p[2].matchBytes(in.UID) && p[3].matchBytes(in.AnonID)
}

// kept reports whether a sample rule keeps in: by a hash of its field, so
// every event of one user (uid) is kept, or none. An event without the
// field is kept.
func (r *rule) kept(in *Input) bool {
	var v []byte
	if r.by == fClient {
		return hash64(r.Name, []byte(in.Client)) < r.keep || r.keep == math.MaxUint64
	}
	v = in.field(r.by)
	if v == nil {
		return true
	}
	return r.keep == math.MaxUint64 || hash64(r.Name, v) < r.keep
}

// hash64 is FNV-1a 64 of salt and v, with a final mix: the same on every
// instance and every run, so a fleet samples the same users.
func hash64(salt string, v []byte) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(salt); i++ {
		h = (h ^ uint64(salt[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for _, c := range v {
		h = (h ^ uint64(c)) * prime
	}
	// splitmix64's finalizer: FNV's low bits alone spread poorly.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
