package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/event"
)

// fakeCatalog is a Catalog on a map, with the contract of catalog.Catalog:
// Resolve answers every key (assigning the next code in mode open), Check
// returns the blocked status and the violations set for an event name. It
// records its calls and is safe for concurrent use.
type fakeCatalog struct {
	mode catalog.Mode

	mu       sync.Mutex
	entries  map[catalog.Key]catalog.Entry
	errs     map[catalog.Key]error // answered instead of the entry
	plan     map[string][]catalog.Violation
	next     int64
	resolves [][]catalog.Key
	checks   []string // names checked, in order
}

func newFakeCatalog(mode catalog.Mode) *fakeCatalog {
	return &fakeCatalog{mode: mode, entries: map[catalog.Key]catalog.Entry{}, errs: map[catalog.Key]error{},
		plan: map[string][]catalog.Violation{}, next: 100}
}

func (c *fakeCatalog) Mode() catalog.Mode   { return c.mode }
func (c *fakeCatalog) DefaultGroup() string { return "app" }

func (c *fakeCatalog) Resolve(_ context.Context, keys []catalog.Key, out []catalog.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resolves = append(c.resolves, append([]catalog.Key(nil), keys...))
	for i, k := range keys {
		if err := c.errs[k]; err != nil {
			out[i] = catalog.Result{Err: err}
			continue
		}
		e, ok := c.entries[k]
		if !ok && c.mode == catalog.ModeOpen {
			c.next++
			e = catalog.Entry{Group: k.Group, Name: k.Name, Code: c.next, Status: catalog.StatusObserved}
			c.entries[k], ok = e, true
		}
		out[i] = catalog.Result{Entry: e, Found: ok}
	}
}

func (c *fakeCatalog) Check(e *catalog.Entry, props []byte) []catalog.Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks = append(c.checks, e.Name)
	var vs []catalog.Violation
	if e.Status == catalog.StatusBlocked {
		vs = append(vs, catalog.Violation{Type: catalog.ViolationBlocked, Msg: "blocked"})
	}
	return append(vs, c.plan[e.Name]...)
}

// add puts an entry in the plan, with the violations Check finds in it.
func (c *fakeCatalog) add(group, name string, code int64, status catalog.Status, vs ...catalog.Violation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[catalog.Key{Group: group, Name: name}] = catalog.Entry{Group: group, Name: name, Code: code, Status: status}
	c.plan[name] = vs
}

func (c *fakeCatalog) fail(group, name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs[catalog.Key{Group: group, Name: name}] = err
}

func (c *fakeCatalog) calls() (resolves [][]catalog.Key, checks []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]catalog.Key(nil), c.resolves...), append([]string(nil), c.checks...)
}

var _ Catalog = (*fakeCatalog)(nil)

// planBatch has one event of each violation type and valid ones, for a
// catalog set up by planCatalog.
var planBatch = []string{
	`{"event":"signup","props":{"plan":"pro"}}`,       // 0 valid, code 11
	`{"event":"mystery"}`,                             // 1 unplanned_event
	`{"event":"needs_price","props":{}}`,              // 2 required_missing
	`{"event":"wrong_type","props":{"qty":"3"}}`,      // 3 datatype_mismatch
	`{"event":"extra_prop","props":{"color":"red"}}`,  // 4 additional_properties
	`{"event":"banned"}`,                              // 5 blocked_event
	`{"event":"bad_value","props":{"plan":"nope"}}`,   // 6 invalid_value
	`{"event":"page_view","context":{"group":"web"}}`, // 7 valid, code 12, group web
	`{"event":"signup","props":{"plan":"free"}}`,      // 8 valid, same key as 0
	`{"nope":1}`, // 9 invalid event: never resolved
	`{"event":"page_view","context":{"group":"web"},"uid":"u2"}`,   // 10 valid, same key as 7
	`{"event":"page_view","context":{"group":{"not":"a string"}}}`, // 11 invalid group
}

// planViolations are the violation types of planBatch's events.
var planViolations = map[int]catalog.ViolationType{
	1: catalog.ViolationUnplanned, 2: catalog.ViolationRequiredMissing, 3: catalog.ViolationDatatypeMismatch,
	4: catalog.ViolationAdditionalProperties, 5: catalog.ViolationBlocked, 6: catalog.ViolationInvalidValue,
}

var planPaths = map[int]string{2: "/price", 3: "/qty", 4: "/color", 6: "/plan"}

func planCatalog(mode catalog.Mode) *fakeCatalog {
	c := newFakeCatalog(mode)
	c.add("app", "signup", 11, catalog.StatusPlanned)
	c.add("web", "page_view", 12, catalog.StatusPlanned)
	c.add("app", "needs_price", 13, catalog.StatusPlanned, catalog.Violation{Type: catalog.ViolationRequiredMissing, Path: "/price", Msg: `missing property "price"`})
	c.add("app", "wrong_type", 14, catalog.StatusPlanned, catalog.Violation{Type: catalog.ViolationDatatypeMismatch, Path: "/qty", Msg: "got string, want integer"})
	c.add("app", "extra_prop", 15, catalog.StatusPlanned, catalog.Violation{Type: catalog.ViolationAdditionalProperties, Path: "/color", Msg: `property "color" is not allowed`})
	c.add("app", "banned", 16, catalog.StatusBlocked)
	c.add("app", "bad_value", 17, catalog.StatusPlanned, catalog.Violation{Type: catalog.ViolationInvalidValue, Path: "/plan", Msg: `value must be one of "free", "pro"`})
	return c
}

// sendPlan posts planBatch and returns the answer.
func sendPlan(t *testing.T, h *harness) Answer {
	t.Helper()
	r := h.do(t, "POST", "/v1/batch", []byte("["+strings.Join(planBatch, ",")+"]"), "Content-Type", "application/json")
	if r.status != http.StatusOK {
		t.Fatalf("answer %s, want 200", r)
	}
	return decodeAnswer(t, r)
}

// byIndex maps the answer's rejections by index.
func byIndex(a Answer) map[int]Rejection {
	m := map[int]Rejection{}
	for _, r := range a.Rejected {
		m[r.Index] = r
	}
	return m
}

// checkOneResolve checks the catalog got exactly one Resolve, of the
// distinct keys of planBatch's valid events.
func checkOneResolve(t *testing.T, c *fakeCatalog) {
	t.Helper()
	resolves, _ := c.calls()
	want := []catalog.Key{{Group: "app", Name: "signup"}, {Group: "app", Name: "mystery"}, {Group: "app", Name: "needs_price"}, {Group: "app", Name: "wrong_type"},
		{Group: "app", Name: "extra_prop"}, {Group: "app", Name: "banned"}, {Group: "app", Name: "bad_value"}, {Group: "web", Name: "page_view"}}
	if len(resolves) != 1 || !reflect.DeepEqual(resolves[0], want) {
		t.Fatalf("Resolve calls %v, want one of the distinct keys %v", resolves, want)
	}
}

// codes maps the accepted records' indexes (by event name and uid) to their
// value's code and header, checking they agree.
func recordCode(t *testing.T, rec event.Record) (int64, map[string]any) {
	t.Helper()
	f := fields(t, rec)
	code, _ := f["code"].(float64)
	hv, ok := header(rec, event.HeaderEventCode)
	if (code != 0) != ok || (ok && hv != fmt.Sprint(int64(code))) {
		t.Errorf("record %s: code %v but header %q (%v)", rec.Value, code, hv, ok)
	}
	return int64(code), f
}

// TestPlanBlock: in mode block, a batch with one event of each violation
// type gets each rejected with its type, path and message, dead-lettered
// with the violations and the reason; the valid events go through with
// their codes and groups, in one Resolve for the whole request.
func TestPlanBlock(t *testing.T) {
	t.Parallel()
	c := planCatalog(catalog.ModeBlock)
	h := newHarness(t, nil, WithCatalog(c))
	a := sendPlan(t, h)
	rej := byIndex(a)
	if a.Accepted != 4 || len(rej) != 8 {
		t.Fatalf("answer %+v: want 4 accepted (0, 7, 8, 10), 8 rejected", a)
	}
	for i, typ := range planViolations {
		r := rej[i]
		if len(r.Violations) != 1 || r.Violations[0].Type != typ || r.Violations[0].Path != planPaths[i] || r.Violations[0].Msg == "" {
			t.Errorf("event %d: rejection %+v, want one %s violation at %q with a message", i, r, typ, planPaths[i])
		}
		if !strings.HasPrefix(r.Error, "breaks the tracking plan (--catalog-mode block): "+string(typ)) || !strings.Contains(r.Error, r.Violations[0].Msg) {
			t.Errorf("event %d: error %q, want the violation type and message", i, r.Error)
		}
	}
	if r := rej[9]; r.Violations != nil || !strings.Contains(r.Error, "unknown field") {
		t.Errorf("invalid event: %+v", r)
	}
	if r := rej[11]; !strings.Contains(r.Error, `"context.group" must be a string`) {
		t.Errorf("invalid group: %+v", r)
	}
	checkOneResolve(t, c)
	if _, checks := c.calls(); len(checks) != 8 { // every found event but the blocked one
		t.Errorf("Check called for %v, want the 8 found events but the blocked one", checks)
	}

	want := map[string]struct {
		code  int64
		group string
	}{"signup/pro": {11, "app"}, "signup/free": {11, "app"}, "page_view/": {12, "web"}, "page_view/u2": {12, "web"}}
	got := map[string]struct {
		code  int64
		group string
	}{}
	for _, rec := range h.sink.onTopic("events") {
		code, f := recordCode(t, rec)
		id := f["event"].(string) + "/"
		if p, ok := f["props"].(map[string]any); ok {
			id += p["plan"].(string)
		} else if u, ok := f["uid"].(string); ok {
			id += u
		}
		got[id] = struct {
			code  int64
			group string
		}{code, f["group"].(string)}
		if _, ok := header(rec, event.HeaderViolations); ok {
			t.Errorf("a valid event has %s in mode block: %v", event.HeaderViolations, rec.Headers)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events stored %v, want %v", got, want)
	}

	dead := h.sink.onTopic("events.invalid")
	if len(dead) != 8 {
		t.Fatalf("%d dead letters, want 8", len(dead))
	}
	seen := map[catalog.ViolationType]bool{}
	for _, d := range dead {
		reason, _ := header(d, event.HeaderReason)
		hv, ok := header(d, event.HeaderViolations)
		if !ok {
			if reason == string(event.ReasonPlanViolation) {
				t.Errorf("dead letter %s: plan_violation without %s", d.Value, event.HeaderViolations)
			}
			continue
		}
		var vs []map[string]string
		if err := json.Unmarshal([]byte(hv), &vs); err != nil || len(vs) != 1 || len(vs[0]) != 2 {
			t.Fatalf("dead letter %s: %s %q is not a JSON array of {type,path}: %v", d.Value, event.HeaderViolations, hv, err)
		}
		if reason != string(event.ReasonPlanViolation) {
			t.Errorf("dead letter %s: reason %q, want plan_violation", d.Value, reason)
		}
		if msg, _ := header(d, event.HeaderError); !strings.Contains(msg, vs[0]["type"]) {
			t.Errorf("dead letter %s: inlet-error %q does not name %s", d.Value, msg, vs[0]["type"])
		}
		seen[catalog.ViolationType(vs[0]["type"])] = true
	}
	if len(seen) != 6 {
		t.Errorf("violation types dead-lettered %v, want all six", seen)
	}
	for _, typ := range planViolations {
		if got := testutil.ToFloat64(h.s.metrics.CatalogViolations.WithLabelValues(string(typ), "block")); got != 1 {
			t.Errorf("inlet_catalog_violations_total{type=%s,mode=block} %v, want 1", typ, got)
		}
	}
	if got := testutil.ToFloat64(h.s.metrics.EventsRejected.WithLabelValues(string(event.ReasonPlanViolation))); got != 6 {
		t.Errorf("inlet_events_rejected_total{reason=plan_violation} %v, want 6", got)
	}
}

// TestPlanWarn: in mode warn the violating events go through, with their
// violations in the inlet-violations header (and their codes when
// planned); a blocked event type is still rejected.
func TestPlanWarn(t *testing.T) {
	t.Parallel()
	c := planCatalog(catalog.ModeWarn)
	h := newHarness(t, nil, WithCatalog(c))
	a := sendPlan(t, h)
	rej := byIndex(a)
	if a.Accepted != 9 || len(rej) != 3 || rej[5].Violations[0].Type != catalog.ViolationBlocked {
		t.Fatalf("answer %+v: want 9 accepted, the blocked one and the two invalid rejected", a)
	}
	if !strings.HasPrefix(rej[5].Error, "breaks the tracking plan (--catalog-mode warn): blocked_event") {
		t.Errorf("blocked: %q", rej[5].Error)
	}
	checkOneResolve(t, c)
	wantHeader := map[string]string{
		"mystery":     `[{"type":"unplanned_event","path":""}]`,
		"needs_price": `[{"type":"required_missing","path":"/price"}]`,
		"wrong_type":  `[{"type":"datatype_mismatch","path":"/qty"}]`,
		"extra_prop":  `[{"type":"additional_properties","path":"/color"}]`,
		"bad_value":   `[{"type":"invalid_value","path":"/plan"}]`,
	}
	wantCode := map[string]int64{"signup": 11, "page_view": 12, "mystery": 0, "needs_price": 13, "wrong_type": 14, "extra_prop": 15, "bad_value": 17}
	n := 0
	for _, rec := range h.sink.onTopic("events") {
		code, f := recordCode(t, rec)
		name := f["event"].(string)
		hv, _ := header(rec, event.HeaderViolations)
		if hv != wantHeader[name] {
			t.Errorf("%s: %s %q, want %q", name, event.HeaderViolations, hv, wantHeader[name])
		}
		if code != wantCode[name] {
			t.Errorf("%s: code %d, want %d", name, code, wantCode[name])
		}
		n++
	}
	if n != 9 {
		t.Errorf("%d events stored, want 9", n)
	}
	if got := testutil.ToFloat64(h.s.metrics.CatalogViolations.WithLabelValues("unplanned_event", "warn")); got != 1 {
		t.Errorf("inlet_catalog_violations_total{type=unplanned_event,mode=warn} %v, want 1", got)
	}
}

// TestPlanOpen: in mode open new names get codes, nothing is checked, and
// a blocked event type is still rejected.
func TestPlanOpen(t *testing.T) {
	t.Parallel()
	c := planCatalog(catalog.ModeOpen)
	h := newHarness(t, nil, WithCatalog(c))
	a := sendPlan(t, h)
	rej := byIndex(a)
	if a.Accepted != 9 || len(rej) != 3 || len(rej[5].Violations) != 1 || rej[5].Violations[0].Type != catalog.ViolationBlocked {
		t.Fatalf("answer %+v: want 9 accepted, the blocked one and the two invalid rejected", a)
	}
	checkOneResolve(t, c)
	if _, checks := c.calls(); len(checks) != 0 {
		t.Errorf("Check called for %v in mode open, want never", checks)
	}
	for _, rec := range h.sink.onTopic("events") {
		code, f := recordCode(t, rec)
		if code == 0 {
			t.Errorf("%s: no code in mode open", rec.Value)
		}
		if f["event"] == "mystery" && code != 101 {
			t.Errorf("the new name got code %d, want the next one, 101", code)
		}
		if _, ok := header(rec, event.HeaderViolations); ok {
			t.Errorf("%s: violations header in mode open", rec.Value)
		}
	}
	// A second request finds the assigned codes.
	h.do(t, "POST", "/v1/track", []byte(`{"event":"mystery"}`), "Content-Type", "application/json")
	recs := h.sink.calls()
	if code, _ := recordCode(t, recs[len(recs)-1][0]); code != 101 {
		t.Errorf("the second sight got code %d, want 101", code)
	}
}

// TestPlanUnavailable: when the store cannot be reached the events go
// through without a code (an outage loses no event), in every mode,
// counted and logged at most once per interval; other keys of the same
// request keep their codes. An invalid key is an invalid event.
func TestPlanUnavailable(t *testing.T) {
	t.Parallel()
	for _, mode := range []catalog.Mode{catalog.ModeOpen, catalog.ModeWarn, catalog.ModeBlock} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			c := planCatalog(mode)
			c.fail("app", "fresh", fmt.Errorf("redis 127.0.0.1:1: connection refused: %w", catalog.ErrUnavailable))
			c.fail("app", "odd", fmt.Errorf("name too long: %w", catalog.ErrInvalid))
			c.fail("app", "weird", fmt.Errorf("the store answered garbage"))
			h := newHarness(t, nil, WithCatalog(c))
			for range 3 {
				r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"fresh"},{"event":"fresh","uid":"u"},{"event":"signup"},{"event":"odd"},{"event":"weird"}]`), "Content-Type", "application/json")
				a := decodeAnswer(t, r)
				if r.status != 200 || a.Accepted != 4 || len(a.Rejected) != 1 || a.Rejected[0].Index != 3 ||
					!strings.Contains(a.Rejected[0].Error, "cannot be in the catalog: name too long") {
					t.Fatalf("answer %s: want 4 accepted, the invalid key rejected", r)
				}
			}
			codes := map[string]int64{}
			for _, rec := range h.sink.onTopic("events") {
				code, f := recordCode(t, rec)
				codes[f["event"].(string)] = code
				if _, ok := header(rec, event.HeaderViolations); ok {
					t.Errorf("%s: violations header for an unresolved event", rec.Value)
				}
			}
			if codes["fresh"] != 0 || codes["weird"] != 0 || codes["signup"] != 11 {
				t.Errorf("codes %v: want none for the unresolved, 11 for signup", codes)
			}
			if n := len(h.sink.onTopic("events")); n != 12 {
				t.Errorf("%d events stored, want 12", n)
			}
			if got := testutil.ToFloat64(h.s.metrics.CatalogUnresolved.WithLabelValues("unavailable")); got != 6 {
				t.Errorf("inlet_catalog_unresolved_events_total{reason=unavailable} %v, want 6", got)
			}
			if got := testutil.ToFloat64(h.s.metrics.CatalogUnresolved.WithLabelValues("error")); got != 3 {
				t.Errorf("inlet_catalog_unresolved_events_total{reason=error} %v, want 3", got)
			}
			if n := h.logs.Count("without a catalog code"); n != 1 {
				t.Errorf("%d log lines for 9 unresolved events within the interval, want 1:\n%s", n, h.logs)
			}
		})
	}
}

// TestPlanPixel: the pixel's event gets its code, and is rejected (image
// still 200, dead-lettered) in mode block.
func TestPlanPixel(t *testing.T) {
	t.Parallel()
	c := planCatalog(catalog.ModeBlock)
	h := newHarness(t, nil, WithCatalog(c))
	if r := h.do(t, "GET", "/i?e=signup&p.plan=pro", nil); r.status != 200 {
		t.Fatalf("pixel: %s", r)
	}
	if r := h.do(t, "GET", "/i?e=mystery", nil); r.status != 200 || r.header.Get("Content-Type") != "image/gif" {
		t.Fatalf("pixel of an unplanned event: %s", r)
	}
	ev := h.sink.onTopic("events")
	if len(ev) != 1 {
		t.Fatalf("%d events stored, want 1", len(ev))
	}
	if code, _ := recordCode(t, ev[0]); code != 11 {
		t.Errorf("pixel event code %d, want 11", code)
	}
	dead := h.sink.onTopic("events.invalid")
	if hv, _ := header(dead[0], event.HeaderViolations); len(dead) != 1 || hv != `[{"type":"unplanned_event","path":""}]` {
		t.Errorf("dead letters %v", dead)
	}
}
