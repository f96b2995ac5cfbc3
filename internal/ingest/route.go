package ingest

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/privacy"
	"github.com/inlet-dev/inlet/internal/routes"
)

// routing is the routes file's decisions on one request's events.
type routing struct {
	t   *routes.Table
	in  routes.Input
	evs []routed // per event; nil until one needs it (ev)
	n   int      // events in the request
	// drops is how many events were dropped.
	drops int
}

// routed is what routing made of one event.
type routed struct {
	rt   event.Route    // where its record goes
	dead string         // its dead-letter topic, "" for the gateway's
	red  *privacy.Rules // its route's redaction rules
	prop string         // the props field its key came from (KeyProp); ""
	drop bool           // dropped by a rule
}

// init readies rt for the Decide calls of one request's n events.
func (rt *routing) init(t *routes.Table, r *http.Request, endpoint, client string, n int) {
	*rt = routing{t: t, n: n}
	rt.in.Endpoint = endpoint
	rt.in.Header = r.Header
	rt.in.Client = client
	t.Prepare(&rt.in)
}

// ev is the i-th event's routed, made for the first event the default
// route does not deliver unchanged (most requests have none).
func (rt *routing) ev(i int) *routed {
	if rt.evs == nil {
		rt.evs = make([]routed, rt.n)
	}
	return &rt.evs[i]
}

// deadLetter is the i-th event's dead-letter topic, "" for the gateway's.
func (rt *routing) deadLetter(i int) string {
	if rt.evs == nil {
		return ""
	}
	return rt.evs[i].dead
}

// rejected reports whether routing rejected an event for bad: its answer
// says the reason.
func (rt *routing) rejected(bad *event.Invalid) bool {
	switch bad.Reason {
	case event.ReasonForbiddenTopic, event.ReasonBadTopic, event.ReasonRouteRule:
		return true
	}
	return false
}

func (rt *routing) dropped(i int) bool { return rt.evs != nil && rt.evs[i].drop }

// redactKey is the record key of the i-th event once its value was
// redacted to v: a key taken from a props field follows what redaction
// did to the field (hashed: the hash; dropped: the event's id, so that
// the clear value is not kept in the key). Other keys are key.
func (rt *routing) redactKey(i int, key, v []byte, id string) []byte {
	if rt == nil || rt.evs == nil || rt.evs[i].prop == "" {
		return key
	}
	if k := propString(topObject(v, "props"), rt.evs[i].prop); k != nil {
		return k
	}
	return []byte(id)
}

// topObject is the top-level field name of the JSON object v when it is
// an object, or nil. It is a copy.
func topObject(v []byte, name string) []byte {
	if m := member(v, name); m.Kind() == '{' {
		return bytes.Clone(m)
	}
	return nil
}

// member is the value of the top-level field name of the JSON object v;
// nil when v is not one or has no such field. It aliases a decoder's
// buffer: valid until the next call.
func member(v []byte, name string) jsontext.Value {
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	for dec.PeekKind() != '}' {
		k, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		if k.String() == name {
			m, err := dec.ReadValue()
			if err != nil {
				return nil
			}
			return m
		}
		if dec.SkipValue() != nil {
			return nil
		}
	}
	return nil
}

// redaction is the i-th event's route's redaction rules; nil: none, and
// for every event without routes (nil rt).
func (rt *routing) redaction(i int) *privacy.Rules {
	if rt == nil || rt.evs == nil {
		return nil
	}
	return rt.evs[i].red
}

// route decides the i-th event of b, of group e.Group, from client:
// its record's route (SetRoute), or its rejection (dead-lettered to the
// route's dead-letter topic), or its drop (no record, no rejection). An
// event routed to a topic outside its client's topics is rejected
// (forbidden_topic): the topic a route chose is checked, not a redirect
// or overflow topic, which the operator chose.
func (rt *routing) route(b *event.Batch, i int, e *planned, p auth.Principal) *event.Invalid {
	in := &rt.in
	var decision routes.Decision // on the stack: the routing kept per request stays small
	d := &decision
	client := in.Client
	in.Group, in.Event = e.Group, b.NameBytes(i)
	in.UID, in.AnonID, in.ID = b.UID(i), b.AnonID(i), b.ClientID(i)
	rt.t.Decide(in, d)
	if d.Default && d.DeadLetter == "" && d.Redact == nil && (p.Client == nil || p.Client.AllowTopic(d.RouteTopic)) {
		return nil // the batch's topic and key, no route headers: as without a routes file
	}
	ev := rt.ev(i)
	ev.dead, ev.red = d.DeadLetter, d.Redact
	switch d.Action {
	case routes.Drop:
		ev.drop = true
		rt.drops++
		return dropped
	case routes.DeadLetter:
		return &event.Invalid{Reason: event.Reason(d.Reason), Msg: d.Msg}
	}
	if p.Client != nil && !p.Client.AllowTopic(d.RouteTopic) {
		return &event.Invalid{Reason: event.ReasonForbiddenTopic,
			Msg: fmt.Sprintf("client %q may not send events to topic %q (route %q)", client, d.RouteTopic, d.Route)}
	}
	r := &ev.rt
	*r = event.Route{Topic: d.Topic, Name: d.Route, RouteTopic: d.RouteTopic}
	switch d.Key {
	case routes.KeyUID:
		r.Key = event.KeyUID
	case routes.KeyAnonID:
		r.Key = event.KeyAnonID
	case routes.KeyID:
		r.Key = event.KeyID
	case routes.KeyProp:
		if v := propString(b.Props(i), d.KeyProp); v != nil {
			r.Key, r.KeyValue = event.KeyValue, v
			ev.prop = d.KeyProp
		}
	}
	b.SetRoute(i, r)
	return nil
}

// dropped marks an event a rule dropped: Build makes no record of it.
var dropped = &event.Invalid{Reason: "dropped", Msg: "dropped by a routes rule"}

// propString is the top-level field name of props (a JSON object) as a
// record key: a string's contents, a number or boolean as written; nil
// when absent, null or an object or array. It is a copy.
func propString(props []byte, name string) []byte {
	if props == nil {
		return nil
	}
	m := member(props, name)
	switch m.Kind() {
	case '"':
		u, err := jsontext.AppendUnquote(nil, m)
		if err != nil {
			return nil
		}
		return u
	case '0', 't', 'f':
		return bytes.Clone(m)
	}
	return nil
}
