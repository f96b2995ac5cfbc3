package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaCacheSize bounds the compiled schemas Check keeps.
const schemaCacheSize = 4096

// schemaKey names one version of an entry's schema.
type schemaKey struct {
	code    int64
	updated int64
	sum     uint64 // of the schema's bytes, for entries made up by callers
}

var schemaSeed = maphash.MakeSeed()

// compiled is a compiled schema, or why it did not compile.
type compiled struct {
	sch *jsonschema.Schema
	err error
}

var printer = message.NewPrinter(language.English)

// noLoader refuses every $ref outside the schema itself: a schema must not
// make inlet read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %s: only references within the schema are allowed", url)
}

func isNullSchema(s []byte) bool {
	t := bytes.TrimSpace(s)
	return len(t) == 0 || string(t) == "null"
}

// compileSchema compiles a JSON Schema (draft 2020-12 unless it names
// another $schema), with "format" asserted and no references outside it.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	// "format" is an assertion in a tracking plan, not an annotation.
	c.AssertFormat()
	const loc = "inlet:schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return sch, nil
}

// oneLine joins the lines of a multi-line message with "; ".
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- ")); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// schema returns e's compiled schema (nil for none), compiling it once per
// entry version.
func (c *Catalog) schema(e *Entry) (*jsonschema.Schema, error) {
	if isNullSchema(e.Schema) {
		return nil, nil
	}
	k := schemaKey{code: e.Code, updated: e.Updated.UnixNano(), sum: maphash.Bytes(schemaSeed, e.Schema)}
	if cs, ok := c.schemas.get(k); ok {
		return cs.sch, cs.err
	}
	sch, err := compileSchema(e.Schema)
	c.compiles.Add(1)
	if err != nil {
		c.log.Warn("catalog: an entry's schema does not compile; its events are not checked against it",
			"group", e.Group, "name", e.Name, "code", e.Code, "err", err)
	}
	c.schemas.add(k, &compiled{sch: sch, err: err})
	return sch, err
}

// Check returns how an event of entry e with props (a JSON object; nil,
// empty or null: {}) breaks the tracking plan: nil e is an unplanned
// event; a blocked entry is blocked_event; else one violation per schema
// error, by type (required_missing, datatype_mismatch,
// additional_properties, invalid_value), each with the JSON pointer of the
// property. An entry whose stored schema does not compile is not checked
// (logged). Schemas are compiled once per entry version and cached.
func (c *Catalog) Check(e *Entry, props []byte) []Violation {
	if e == nil {
		return []Violation{{Type: ViolationUnplanned, Msg: "the tracking plan has no such event type"}}
	}
	if e.Status == StatusBlocked {
		return []Violation{{Type: ViolationBlocked, Msg: fmt.Sprintf("event type %s/%s is blocked", e.Group, e.Name)}}
	}
	sch, err := c.schema(e)
	if sch == nil || err != nil {
		return nil
	}
	var v any = map[string]any{}
	if !isNullSchema(props) {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(props)); err != nil {
			return []Violation{{Type: ViolationInvalidValue, Msg: fmt.Sprintf("props is not JSON: %v", err)}}
		}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Type: ViolationInvalidValue, Msg: oneLine(err.Error())}}
	}
	var out []Violation
	violations(ve, &out)
	if len(out) == 0 {
		out = append(out, Violation{Type: ViolationInvalidValue, Path: pointer(ve.InstanceLocation), Msg: oneLine(ve.Error())})
	}
	return out
}

// violations appends the leaves of ve, by type.
func violations(ve *jsonschema.ValidationError, out *[]Violation) {
	loc := ve.InstanceLocation
	switch k := ve.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		for _, c := range ve.Causes {
			violations(c, out)
		}
		if len(ve.Causes) > 0 {
			return
		}
	case *kind.Required:
		for _, p := range k.Missing {
			*out = append(*out, Violation{Type: ViolationRequiredMissing, Path: pointer(append(loc[:len(loc):len(loc)], p)),
				Msg: fmt.Sprintf("required property %q is missing", p)})
		}
		return
	case *kind.Type:
		*out = append(*out, Violation{Type: ViolationDatatypeMismatch, Path: pointer(loc),
			Msg: fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))})
		return
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, Violation{Type: ViolationAdditionalProperties, Path: pointer(append(loc[:len(loc):len(loc)], p)),
				Msg: fmt.Sprintf("property %q is not allowed", p)})
		}
		return
	case *kind.PropertyNames:
		*out = append(*out, Violation{Type: ViolationAdditionalProperties, Path: pointer(append(loc[:len(loc):len(loc)], k.Property)),
			Msg: fmt.Sprintf("property name %q is not allowed", k.Property)})
		return
	case *kind.FalseSchema:
		// unevaluatedProperties: false (and additionalProperties given as a
		// false schema) fail at the property itself.
		if strings.HasSuffix(ve.SchemaURL, "/unevaluatedProperties") || strings.HasSuffix(ve.SchemaURL, "/additionalProperties") {
			*out = append(*out, Violation{Type: ViolationAdditionalProperties, Path: pointer(loc),
				Msg: fmt.Sprintf("property %q is not allowed", lastOf(loc))})
			return
		}
	}
	*out = append(*out, Violation{Type: ViolationInvalidValue, Path: pointer(loc), Msg: ve.ErrorKind.LocalizedString(printer)})
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// pointer is the JSON pointer (RFC 6901) of a location.
func pointer(loc []string) string {
	var b strings.Builder
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}
