package catalog

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const testSchema = `{
  "type": "object",
  "properties": {
    "price": {"type": "number", "minimum": 0},
    "currency": {"type": "string", "enum": ["EUR", "USD"]},
    "sku": {"type": "string"},
    "at": {"type": "string", "format": "date-time"}
  },
  "required": ["price", "sku"],
  "additionalProperties": false
}`

func TestCheck(t *testing.T) {
	c := testCatalog(t, boltKit(t).open(t), nil)
	ctx := context.Background()
	e := must(c.Upsert(ctx, Entry{Group: "shop", Name: "purchase", Schema: json.RawMessage(testSchema)}))
	uneval := must(c.Upsert(ctx, Entry{Group: "shop", Name: "uneval", Schema: json.RawMessage(
		`{"type":"object","properties":{"a":{"type":"integer"}},"unevaluatedProperties":false}`)}))
	names := must(c.Upsert(ctx, Entry{Group: "shop", Name: "names", Schema: json.RawMessage(
		`{"type":"object","propertyNames":{"pattern":"^[a-z]+$"}}`)}))
	plain := must(c.Upsert(ctx, Entry{Group: "shop", Name: "plain"}))
	blocked := must(c.Block(ctx, Key{"shop", "bad"}))

	for _, tc := range []struct {
		name  string
		e     *Entry
		props string
		want  []Violation // Type and Path compared; Msg must be non-empty
	}{
		{"valid", &e, `{"price": 3.5, "sku": "a1", "currency": "EUR"}`, nil},
		{"unplanned", nil, `{}`, []Violation{{Type: ViolationUnplanned}}},
		{"blocked", &blocked, `{}`, []Violation{{Type: ViolationBlocked}}},
		{"no schema", &plain, `{"anything": [1]}`, nil},
		{"required missing", &e, `{"price": 1}`, []Violation{{Type: ViolationRequiredMissing, Path: "/sku"}}},
		{"props absent: {}", &e, ``, []Violation{{Type: ViolationRequiredMissing, Path: "/price"}, {Type: ViolationRequiredMissing, Path: "/sku"}}},
		{"props null: {}", &e, `null`, []Violation{{Type: ViolationRequiredMissing, Path: "/price"}, {Type: ViolationRequiredMissing, Path: "/sku"}}},
		{"datatype mismatch", &e, `{"price": "3.50", "sku": "a1"}`, []Violation{{Type: ViolationDatatypeMismatch, Path: "/price"}}},
		{"additional properties", &e, `{"price": 1, "sku": "a", "colour": "red", "size": 3}`,
			[]Violation{{Type: ViolationAdditionalProperties, Path: "/colour"}, {Type: ViolationAdditionalProperties, Path: "/size"}}},
		{"unevaluated properties", &uneval, `{"a": 1, "b": 2}`, []Violation{{Type: ViolationAdditionalProperties, Path: "/b"}}},
		{"property names", &names, `{"ok": 1, "Not/ok": 2}`, []Violation{{Type: ViolationAdditionalProperties, Path: "/Not~1ok"}}},
		{"invalid value: enum", &e, `{"price": 1, "sku": "a", "currency": "GBP"}`, []Violation{{Type: ViolationInvalidValue, Path: "/currency"}}},
		{"invalid value: minimum", &e, `{"price": -1, "sku": "a"}`, []Violation{{Type: ViolationInvalidValue, Path: "/price"}}},
		{"invalid value: format", &e, `{"price": 1, "sku": "a", "at": "yesterday"}`, []Violation{{Type: ViolationInvalidValue, Path: "/at"}}},
		{"valid format", &e, `{"price": 1, "sku": "a", "at": "2026-12-01T10:00:00Z"}`, nil},
		{"props not an object", &e, `[1]`, []Violation{{Type: ViolationDatatypeMismatch, Path: ""}}},
		{"props not JSON", &e, `{`, []Violation{{Type: ViolationInvalidValue, Path: ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var props []byte
			if tc.props != "" {
				props = []byte(tc.props)
			}
			got := c.Check(tc.e, props)
			if len(got) != len(tc.want) {
				t.Fatalf("Check: %+v, want %+v", got, tc.want)
			}
			// Order of several violations of one kind is not defined: match as a set.
			left := append([]Violation(nil), got...)
			for _, w := range tc.want {
				found := false
				for i, g := range left {
					if g.Type == w.Type && g.Path == w.Path {
						if g.Msg == "" {
							t.Errorf("violation %+v has no message", g)
						}
						left = append(left[:i], left[i+1:]...)
						found = true
						break
					}
				}
				if !found {
					t.Fatalf("Check: %+v, want %+v", got, tc.want)
				}
			}
		})
	}

	// Compiled once per entry version: four schema'd entries so far.
	before := c.compiles.Load()
	for range 100 {
		c.Check(&e, []byte(`{"price": 1, "sku": "a"}`))
	}
	if n := c.compiles.Load(); n != before || n != 3 {
		t.Fatalf("%d compilations (%d before 100 more checks), want 3: one per schema", n, before)
	}
	// A new version compiles again, and its schema applies.
	e2 := must(c.Upsert(ctx, Entry{Group: "shop", Name: "purchase", Schema: json.RawMessage(`{"required":["x"]}`)}))
	if got := c.Check(&e2, []byte(`{"price": 1, "sku": "a"}`)); len(got) != 1 || got[0].Path != "/x" {
		t.Fatalf("after a new schema: %+v", got)
	}
	if c.compiles.Load() != 4 {
		t.Fatalf("%d compilations after a new version, want 4", c.compiles.Load())
	}
}

func TestSchemaRejected(t *testing.T) {
	c := testCatalog(t, boltKit(t).open(t), nil)
	ctx := context.Background()
	for _, tc := range []struct{ schema, msg string }{
		{`{"type": "nonsense"}`, "at '/type': value must be one of"},
		{`{"type": `, "not JSON"},
		{`{"$ref": "file:///etc/passwd"}`, "only references within the schema"},
		{`{"minimum": "three"}`, "minimum"},
	} {
		_, err := c.Upsert(ctx, Entry{Group: "s", Name: "bad", Schema: json.RawMessage(tc.schema)})
		isErr(t, err, ErrInvalid)
		if !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("schema %s: error %q is not one line that says %q", tc.schema, err, tc.msg)
		}
	}
	if _, err := c.Get(ctx, Key{"s", "bad"}); err == nil {
		t.Fatal("an entry with a bad schema was stored")
	}
	// An internal reference is fine.
	must(c.Upsert(ctx, Entry{Group: "s", Name: "ref", Schema: json.RawMessage(
		`{"$defs":{"p":{"type":"number"}},"properties":{"price":{"$ref":"#/$defs/p"}}}`)}))
	// A stored schema that does not compile (written past Upsert) is not checked, not a crash.
	bad := Entry{Group: "s", Name: "x", Code: 42, Schema: json.RawMessage(`{"type":1}`), Updated: time.Now()}
	if v := c.Check(&bad, []byte(`{}`)); v != nil {
		t.Fatalf("Check with an uncompilable stored schema: %+v", v)
	}
}

func TestValidateKey(t *testing.T) {
	c := testCatalog(t, boltKit(t).open(t), nil)
	ctx := context.Background()
	long := strings.Repeat("x", 201)
	for _, k := range []Key{{"", "a"}, {"a", ""}, {long, "a"}, {"a", long}, {"a\xff", "b"}, {"a", "b\x00c"}, {"a", "tab\there"}, {"a\u0085", "b"}} {
		_, err := c.Lookup(ctx, k)
		isErr(t, err, ErrInvalid)
		_, err = c.Upsert(ctx, Entry{Group: k.Group, Name: k.Name})
		isErr(t, err, ErrInvalid)
	}
	must(c.Lookup(ctx, Key{strings.Repeat("é", 100), "名前 with spaces/and:colons"}))
	_, err := c.Upsert(ctx, Entry{Group: "a", Name: "b", Status: "gone"})
	isErr(t, err, ErrInvalid)
}
