package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Plan is a tracking plan as Import reads and Export writes it:
//
//	{"events":[{"group":"shop","name":"purchase","code":7,"display_name":"Purchase",
//	            "status":"planned","schema":{...}}]}
//
// Decoding is strict: field names exactly as above (case-sensitive),
// unknown fields, duplicate names and invalid UTF-8 are errors.
type Plan struct {
	Events []PlanEvent `json:"events"`
}

// PlanEvent is one event type of a Plan. Code is written by Export; on
// Import it may be left out (0), and when given must match the code the
// catalog already has for the key (codes are never chosen by a plan).
type PlanEvent struct {
	Group       string         `json:"group"`
	Name        string         `json:"name"`
	Code        int64          `json:"code,omitzero"`
	DisplayName string         `json:"display_name,omitzero"`
	Status      Status         `json:"status,omitzero"`
	Schema      jsontext.Value `json:"schema,omitzero"`
}

// DecodePlan reads a tracking plan strictly (see Plan); an error names the
// event's index and the field.
func DecodePlan(r io.Reader) (Plan, error) {
	var p Plan
	err := json.UnmarshalRead(r, &p, json.RejectUnknownMembers(true))
	if err != nil {
		return Plan{}, fmt.Errorf("%w: tracking plan: %s", ErrInvalid, planErr(err))
	}
	return p, nil
}

// planErr says where in the plan err happened: "event 3: ...".
func planErr(err error) string {
	var ptr jsontext.Pointer
	var msg string
	var se *json.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &se):
		ptr = se.JSONPointer
		msg = se.Error()
		switch {
		case errors.Is(err, json.ErrUnknownName):
			msg = "unknown field " + strconv.Quote(ptr.LastToken()) + " (the fields are group, name, code, display_name, status, schema; names are case-sensitive)"
		case se.GoType != nil:
			// Not the Go type: what a plan's author wrote and should write.
			msg = wrongKind(ptr, se)
		}
	case errors.As(err, &sy):
		ptr = sy.JSONPointer
		msg = sy.Error()
		switch {
		case strings.Contains(msg, "duplicate"):
			msg = "duplicate field " + strconv.Quote(ptr.LastToken())
		case strings.Contains(msg, "invalid UTF-8"):
			msg = "invalid UTF-8 in the value of " + strconv.Quote(ptr.LastToken())
		}
	default:
		return err.Error()
	}
	toks := strings.Split(strings.TrimPrefix(string(ptr), "/"), "/")
	if len(toks) >= 2 && toks[0] == "events" {
		if _, err := strconv.Atoi(toks[1]); err == nil {
			return "event " + toks[1] + ": " + msg
		}
	}
	return msg
}

// wrongKind says, in a plan's terms, that the value at ptr is not of the
// kind the plan wants there: `field "code" is a JSON string, want a whole
// number`, rather than the decoder's Go type.
func wrongKind(ptr jsontext.Pointer, se *json.SemanticError) string {
	got := "this value"
	switch se.JSONKind {
	case '{':
		got = "an object"
	case '[':
		got = "an array"
	case '"':
		got = "a string"
	case '0':
		got = "the number " + string(se.JSONValue)
		if len(se.JSONValue) == 0 {
			got = "a number"
		}
	case 't', 'f':
		got = "a boolean"
	case 'n':
		got = "null"
	}
	toks := strings.Split(strings.TrimPrefix(string(ptr), "/"), "/")
	switch {
	case ptr == "":
		return "the plan is " + got + `, want an object: {"events":[{"group":"shop","name":"purchase"}]}`
	case len(toks) == 1 && toks[0] == "events":
		return `field "events" is ` + got + `, want an array of events: [{"group":"shop","name":"purchase"}]`
	case len(toks) == 2:
		return "the event is " + got + `, want an object: {"group":"shop","name":"purchase"}`
	}
	field := ptr.LastToken()
	want := "a string"
	if field == "code" {
		want = "a whole number"
	}
	return "field " + strconv.Quote(field) + " is " + got + ", want " + want
}

// Import reads a tracking plan (strictly; see Plan) and upserts each of
// its events: status "" is planned, an existing key keeps its code (so
// importing the same plan again changes nothing but updated times). Every
// event is checked (key, status, schema, code) before any is written; the
// error names the first bad one's index. n is the number written.
func (c *Catalog) Import(ctx context.Context, r io.Reader) (n int, err error) {
	p, err := DecodePlan(r)
	if err != nil {
		return 0, err
	}
	seen := make(map[Key]int, len(p.Events))
	for i, ev := range p.Events {
		k := Key{Group: ev.Group, Name: ev.Name}
		if err := ValidateKey(k); err != nil {
			return 0, fmt.Errorf("tracking plan: event %d: %w", i, err)
		}
		if j, dup := seen[k]; dup {
			return 0, fmt.Errorf("%w: tracking plan: event %d: %s/%s is event %d already", ErrInvalid, i, k.Group, k.Name, j)
		}
		seen[k] = i
		if ev.Status != "" && !validStatus(ev.Status) {
			return 0, fmt.Errorf("%w: tracking plan: event %d: status %q: want planned, observed or blocked", ErrInvalid, i, ev.Status)
		}
		if !isNullSchema(ev.Schema) {
			if _, err := compileSchema(ev.Schema); err != nil {
				return 0, fmt.Errorf("%w: tracking plan: event %d (%s/%s): schema: %v", ErrInvalid, i, k.Group, k.Name, err)
			}
		}
		if ev.Code != 0 {
			e, err := c.Get(ctx, k)
			switch {
			case err == nil && e.Code != ev.Code:
				return 0, fmt.Errorf("%w: tracking plan: event %d (%s/%s): code %d, but the catalog has code %d for it (codes cannot be changed)",
					ErrInvalid, i, k.Group, k.Name, ev.Code, e.Code)
			case err != nil && !errors.Is(err, ErrNotFound):
				return 0, err
			}
		}
	}
	for i, ev := range p.Events {
		var schema []byte
		if !isNullSchema(ev.Schema) {
			schema = append([]byte(nil), ev.Schema...)
		}
		if _, err := c.Upsert(ctx, Entry{Group: ev.Group, Name: ev.Name, DisplayName: ev.DisplayName,
			Status: ev.Status, Schema: schema}); err != nil {
			return n, fmt.Errorf("tracking plan: event %d (%s/%s): %w", i, ev.Group, ev.Name, err)
		}
		n++
	}
	return n, nil
}

// exportPage is how many entries Export reads from the store at a time.
const exportPage = 1000

// Export writes the whole catalog as a tracking plan (see Plan), in
// (group, name) order, that Import reads back.
func (c *Catalog) Export(ctx context.Context, w io.Writer) error {
	p := Plan{Events: []PlanEvent{}}
	var after Key
	for {
		es, err := c.List(ctx, "", after, exportPage)
		if err != nil {
			return err
		}
		for _, e := range es {
			p.Events = append(p.Events, PlanEvent{Group: e.Group, Name: e.Name, Code: e.Code,
				DisplayName: e.DisplayName, Status: e.Status, Schema: jsontext.Value(e.Schema)})
		}
		if len(es) < exportPage {
			break
		}
		after = es[len(es)-1].Key()
	}
	if err := json.MarshalWrite(w, p, jsontext.WithIndent("  ")); err != nil {
		return fmt.Errorf("catalog: writing the tracking plan: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}
