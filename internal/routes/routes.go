// Package routes chooses each event's topic, record key and dead-letter
// topic from a routes file (--routes), applies the file's runtime rules
// (drop, sample, redirect, dead-letter) and its per-key overflow, and
// reloads the file when it changes.
//
// A Table is one version of the file, compiled and immutable; a Watcher
// holds the current Table and swaps it whole when a changed file
// validates. Without a file there is no Table: ingest keeps its topic.
package routes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/internal/privacy"
)

// File is the routes file as written.
type File struct {
	Routes   []Route   `yaml:"routes"`
	Rules    []Rule    `yaml:"rules"`
	Overflow *Overflow `yaml:"overflow"`
}

// Route sends the events it matches to Topic.
type Route struct {
	Name  string     `yaml:"name"`
	Match RouteMatch `yaml:"match"`
	// Topic is a template: {client}, {group}, {event} and {endpoint} are
	// replaced by the event's.
	Topic string `yaml:"topic"`
	// Key is the record key: uid, anon_id, id or props.NAME; "" is
	// inlet's default (uid, else anon_id, else id).
	Key string `yaml:"key"`
	// DeadLetter is where its events rejected by routing go (a template
	// too); "" is the gateway's dead-letter topic.
	DeadLetter string `yaml:"dead_letter"`
	// Redact are the redaction rules of its events' records and dead
	// letters (after the client's, if both have rules).
	Redact []privacy.Rule `yaml:"redact"`
}

// RouteMatch is what a route matches; every field set must match (globs,
// path.Match syntax), an empty one matches everything.
type RouteMatch struct {
	Client   string            `yaml:"client"`
	Group    string            `yaml:"group"`
	Event    string            `yaml:"event"`
	Endpoint string            `yaml:"endpoint"`
	Header   map[string]string `yaml:"header"`
}

// Rule is a runtime rule: the first rule that matches an event acts on it.
type Rule struct {
	Name   string    `yaml:"name"`
	Match  RuleMatch `yaml:"match"`
	Action string    `yaml:"action"` // drop, sample, redirect, dead_letter
	Rate   *float64  `yaml:"rate"`   // sample: the share kept, 0 to 1
	By     string    `yaml:"by"`     // sample: uid (default), anon_id, client or id
	Topic  string    `yaml:"topic"`  // redirect
	Reason string    `yaml:"reason"` // dead_letter
}

// RuleMatch is what a rule matches (globs).
type RuleMatch struct {
	Event  string `yaml:"event"`
	UID    string `yaml:"uid"`
	AnonID string `yaml:"anon_id"`
	Client string `yaml:"client"`
}

// Overflow sends the events of a key over its rate to Topic.
type Overflow struct {
	Key   string  `yaml:"key"`   // uid (default), anon_id, client
	Rate  float64 `yaml:"rate"`  // events per second per key
	Burst int     `yaml:"burst"` // default: rate, at least 1
	Topic string  `yaml:"topic"`
	// Keys bounds the limiter table: past it the least recently seen
	// key is forgotten (DefaultOverflowKeys).
	Keys int `yaml:"keys"`
}

// DefaultOverflowKeys is Overflow.Keys when unset.
const DefaultOverflowKeys = 100_000

// ErrInvalid wraps every error of a routes file.
var ErrInvalid = errors.New("invalid routes file")

// MaxEntries is how many routes, and how many rules, a file may have: every
// event is matched against them in turn.
const MaxEntries = 10000

// Parse decodes and checks a routes file strictly: unknown fields,
// duplicate keys, bad globs, templates naming unknown fields, topics Kafka
// would refuse and rates out of range are errors that name the line.
func Parse(b []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty file", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(f.Routes) > MaxEntries || len(f.Rules) > MaxEntries {
		return nil, fmt.Errorf("%w: %d routes and %d rules: at most %d of each", ErrInvalid, len(f.Routes), len(f.Rules), MaxEntries)
	}
	var doc yaml.Node
	_ = yaml.Unmarshal(b, &doc) // decoded above: it cannot fail
	lines := itemLines(&doc)
	for i := range f.Routes {
		if err := f.Routes[i].check(); err != nil {
			return nil, fmt.Errorf("%w: line %d: route %d (%s): %v", ErrInvalid, lines["routes"][i], i+1, f.Routes[i].name(i), err)
		}
	}
	for i := range f.Rules {
		if err := f.Rules[i].check(); err != nil {
			return nil, fmt.Errorf("%w: line %d: rule %d (%s): %v", ErrInvalid, lines["rules"][i], i+1, f.Rules[i].name(i), err)
		}
	}
	if o := f.Overflow; o != nil {
		if err := o.check(); err != nil {
			return nil, fmt.Errorf("%w: line %d: overflow: %v", ErrInvalid, lines["overflow"][0], err)
		}
	}
	return &f, nil
}

// itemLines is the line of each item of the top-level lists (and of the
// overflow mapping).
func itemLines(doc *yaml.Node) map[string][]int {
	out := map[string][]int{}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return out
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		if v.Kind != yaml.SequenceNode {
			out[k] = []int{v.Line}
			continue
		}
		for _, it := range v.Content {
			out[k] = append(out[k], it.Line)
		}
	}
	return out
}

func (r *Route) name(i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("route%d", i+1)
}

func (r *Rule) name(i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rule%d", i+1)
}

func (r *Route) check() error {
	m := r.Match
	for _, g := range []struct{ field, glob string }{{"match.client", m.Client}, {"match.group", m.Group}, {"match.event", m.Event}, {"match.endpoint", m.Endpoint}} {
		if err := checkGlob(g.field, g.glob); err != nil {
			return err
		}
	}
	for h, v := range m.Header {
		if h == "" {
			return errors.New("match.header: an empty header name")
		}
		if err := checkGlob("match.header."+h, v); err != nil {
			return err
		}
	}
	if r.Topic == "" {
		return errors.New("topic: missing")
	}
	if err := checkTemplate("topic", r.Topic); err != nil {
		return err
	}
	if r.DeadLetter != "" {
		if err := checkTemplate("dead_letter", r.DeadLetter); err != nil {
			return err
		}
	}
	if _, err := parseKey(r.Key); err != nil {
		return err
	}
	if _, err := privacy.Compile(r.Redact); err != nil {
		return err
	}
	return nil
}

// hashes reports whether a route has a redaction rule that hashes.
func (f *File) hashes() bool {
	for _, r := range f.Routes {
		for _, x := range r.Redact {
			if x.Action == privacy.ActionHash {
				return true
			}
		}
	}
	return false
}

func (r *Rule) check() error {
	m := r.Match
	for _, g := range []struct{ field, glob string }{{"match.event", m.Event}, {"match.uid", m.UID}, {"match.anon_id", m.AnonID}, {"match.client", m.Client}} {
		if err := checkGlob(g.field, g.glob); err != nil {
			return err
		}
	}
	extra := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("%s: not an option of action %q", what, r.Action)
		}
		return nil
	}
	var err error
	switch r.Action {
	case "drop":
		err = errors.Join(extra(r.Rate == nil, "rate"), extra(r.By == "", "by"), extra(r.Topic == "", "topic"), extra(r.Reason == "", "reason"))
	case "sample":
		if r.Rate == nil || !(*r.Rate >= 0 && *r.Rate <= 1) {
			return errors.New("rate: want the share of events kept, from 0 to 1")
		}
		if _, ok := fieldOf(r.By, fUID); !ok {
			return fmt.Errorf("by %q: want uid, anon_id, client or id", r.By)
		}
		err = errors.Join(extra(r.Topic == "", "topic"), extra(r.Reason == "", "reason"))
	case "redirect":
		if r.Topic == "" {
			return errors.New("topic: missing (the topic redirected to)")
		}
		if e := validTopic(r.Topic); e != nil {
			return fmt.Errorf("topic: %v", e)
		}
		err = errors.Join(extra(r.Rate == nil, "rate"), extra(r.By == "", "by"), extra(r.Reason == "", "reason"))
	case "dead_letter":
		err = errors.Join(extra(r.Rate == nil, "rate"), extra(r.By == "", "by"), extra(r.Topic == "", "topic"))
	case "":
		return errors.New("action: missing (drop, sample, redirect or dead_letter)")
	default:
		return fmt.Errorf("action %q: want drop, sample, redirect or dead_letter", r.Action)
	}
	return err
}

func (o *Overflow) check() error {
	if _, ok := fieldOf(o.Key, fUID); !ok || o.Key == "id" {
		return fmt.Errorf("key %q: want uid, anon_id or client", o.Key)
	}
	if !(o.Rate > 0 && o.Rate <= 1e6) {
		return fmt.Errorf("rate %v: want events per second per key, above 0 and at most 1000000", o.Rate)
	}
	if o.Burst < 0 || o.Burst > 1e6 {
		return fmt.Errorf("burst %d: want 0 (the rate) to 1000000", o.Burst)
	}
	if o.Keys < 0 || o.Keys > 1_000_000 {
		return fmt.Errorf("keys %d: want 0 (%d) to 1000000 (about 250 bytes each)", o.Keys, DefaultOverflowKeys)
	}
	if o.Topic == "" {
		return errors.New("topic: missing")
	}
	if err := validTopic(o.Topic); err != nil {
		return fmt.Errorf("topic: %v", err)
	}
	return nil
}

// checkGlob refuses a malformed glob.
func checkGlob(field, g string) error {
	if g == "" {
		return nil
	}
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Errorf("%s: glob %q: %v", field, g, err)
	}
	return nil
}

// pattern is a checked glob, compiled: most globs are exact or prefix*,
// matched without path.Match's cost.
type pattern struct {
	kind uint8 // patAny, patExact, patPrefix, patGlob
	lit  string
}

const (
	patAny = iota
	patExact
	patPrefix
	patGlob
)

func compileGlob(g string) pattern {
	i := strings.IndexAny(g, `*?[\`)
	switch {
	case g == "":
		return pattern{kind: patAny}
	case i < 0:
		return pattern{kind: patExact, lit: g}
	case g[i] == '*' && i == len(g)-1:
		return pattern{kind: patPrefix, lit: g[:i]}
	}
	return pattern{kind: patGlob, lit: g}
}

// first is the byte every string p matches starts with; -1 when there is
// none (any string, or a glob that starts with *, ? or a class).
func (p *pattern) first() int16 {
	if p.kind == patAny || p.lit == "" || strings.ContainsRune(`*?[\`, rune(p.lit[0])) {
		return -1
	}
	return int16(p.lit[0])
}

// match reports whether s matches p; path.Match's '*' does not match '/'.
func (p *pattern) match(s string) bool {
	switch p.kind {
	case patAny:
		return true
	case patExact:
		return p.lit == s
	case patPrefix:
		return strings.HasPrefix(s, p.lit) && strings.IndexByte(s[len(p.lit):], '/') < 0
	}
	ok, _ := path.Match(p.lit, s)
	return ok
}

// matchBytes is match without a copy of b but for path.Match.
func (p *pattern) matchBytes(b []byte) bool {
	switch p.kind {
	case patAny:
		return true
	case patExact:
		return p.lit == string(b)
	case patPrefix:
		return len(b) >= len(p.lit) && string(b[:len(p.lit)]) == p.lit && bytes.IndexByte(b[len(p.lit):], '/') < 0
	}
	ok, _ := path.Match(p.lit, string(b))
	return ok
}

// fields a template may name.
var templateFields = map[string]bool{"client": true, "group": true, "event": true, "endpoint": true}

// checkTemplate refuses unknown fields and unbalanced braces, and a
// template's fixed text Kafka would refuse.
func checkTemplate(field, t string) error {
	parts, err := parseTemplate(t)
	if err != nil {
		return fmt.Errorf("%s %q: %v", field, t, err)
	}
	var fixed strings.Builder
	for _, p := range parts {
		if p.field == "" {
			fixed.WriteString(p.text)
		} else {
			fixed.WriteString("x")
		}
	}
	if err := validTopic(fixed.String()); err != nil {
		return fmt.Errorf("%s %q: %v", field, t, err)
	}
	return nil
}

type tmplPart struct{ text, field string }

func parseTemplate(t string) ([]tmplPart, error) {
	var parts []tmplPart
	for t != "" {
		i := strings.IndexAny(t, "{}")
		if i < 0 {
			parts = append(parts, tmplPart{text: t})
			break
		}
		if t[i] == '}' {
			return nil, errors.New("a '}' without its '{'")
		}
		if i > 0 {
			parts = append(parts, tmplPart{text: t[:i]})
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil, errors.New("a '{' without its '}'")
		}
		name := t[i+1 : i+j]
		if !templateFields[name] {
			return nil, fmt.Errorf("unknown field {%s}: want {client}, {group}, {event} or {endpoint}", name)
		}
		parts = append(parts, tmplPart{field: name})
		t = t[i+j+1:]
	}
	return parts, nil
}

// MaxTopicLen is the longest topic name Kafka takes.
const MaxTopicLen = 249

// validTopic is nil when Kafka takes name as a topic name: 1 to 249 of
// a-z A-Z 0-9 . _ -, and not "." or "..".
func validTopic(name string) error {
	if name == "" {
		return errors.New("an empty topic name")
	}
	if len(name) > MaxTopicLen {
		return fmt.Errorf("topic name of %d bytes: Kafka takes at most %d", len(name), MaxTopicLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q: Kafka refuses it", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q: Kafka takes only a-z A-Z 0-9 . _ -", name)
		}
	}
	return nil
}

// ValidTopic is validTopic for callers outside: nil when Kafka takes name.
func ValidTopic(name string) error { return validTopic(name) }
