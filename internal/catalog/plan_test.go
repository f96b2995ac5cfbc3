package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const testPlan = `{"events": [
  {"group": "shop", "name": "purchase", "display_name": "Purchase", "status": "planned",
   "schema": {"type": "object", "required": ["price"], "properties": {"price": {"type": "number"}}}},
  {"group": "shop", "name": "view"},
  {"group": "app", "name": "crash", "status": "blocked", "display_name": "Crash"}
]}`

func TestImportExport(t *testing.T) {
	for _, kit := range kits(t) {
		t.Run(kit.name, func(t *testing.T) {
			ctx := context.Background()
			c := testCatalog(t, kit.open(t), nil)
			must(c.Lookup(ctx, Key{"app", "open"})) // observed, code 1
			n := must(c.Import(ctx, strings.NewReader(testPlan)))
			if n != 3 {
				t.Fatalf("imported %d, want 3", n)
			}
			var out bytes.Buffer
			if err := c.Export(ctx, &out); err != nil {
				t.Fatal(err)
			}
			var p struct {
				Events []struct {
					Group, Name, Status string
					Code                int64
					DisplayName         string `json:"display_name"`
					Schema              json.RawMessage
				}
			}
			if err := json.Unmarshal(out.Bytes(), &p); err != nil {
				t.Fatalf("export is not JSON: %v\n%s", err, out.String())
			}
			var got []string
			for _, e := range p.Events {
				got = append(got, e.Group+"/"+e.Name+":"+e.Status+":"+e.DisplayName)
			}
			want := "app/crash:blocked:Crash app/open:observed: shop/purchase:planned:Purchase shop/view:planned:"
			if strings.Join(got, " ") != want {
				t.Fatalf("exported %v, want %s\n%s", got, want, out.String())
			}
			if p.Events[1].Code != 1 || p.Events[0].Code == 0 || !strings.Contains(string(p.Events[2].Schema), `"required"`) {
				t.Fatalf("exported codes or schema wrong:\n%s", out.String())
			}

			// Importing the export again (codes given) and the plan again keeps every code.
			codes := map[string]int64{}
			for _, e := range p.Events {
				codes[e.Group+"/"+e.Name] = e.Code
			}
			if n := must(c.Import(ctx, bytes.NewReader(out.Bytes()))); n != 4 {
				t.Fatalf("re-import of the export: %d, want 4", n)
			}
			must(c.Import(ctx, strings.NewReader(testPlan)))
			var again bytes.Buffer
			if err := c.Export(ctx, &again); err != nil {
				t.Fatal(err)
			}
			if again.String() != out.String() {
				t.Fatalf("export after re-imports differs:\n%s\nwant\n%s", again.String(), out.String())
			}
			all := must(c.List(ctx, "", Key{}, 100))
			for _, e := range all {
				if codes[e.Group+"/"+e.Name] != e.Code {
					t.Fatalf("%s/%s has code %d after re-import, had %d", e.Group, e.Name, e.Code, codes[e.Group+"/"+e.Name])
				}
			}
			// The imported schema applies.
			e := must(c.Lookup(ctx, Key{"shop", "purchase"}))
			if v := c.Check(&e, []byte(`{"price":"x"}`)); len(v) != 1 || v[0].Type != ViolationDatatypeMismatch {
				t.Fatalf("imported schema: %+v", v)
			}

			// A code that differs from the catalog's is an error, and nothing is written.
			_, err := c.Import(ctx, strings.NewReader(`{"events":[{"group":"new","name":"one"},{"group":"app","name":"open","code":77}]}`))
			isErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), "event 1") || !strings.Contains(err.Error(), "code 77") {
				t.Fatalf("error %q does not name event 1 and its code", err)
			}
			if _, err := c.Get(ctx, Key{"new", "one"}); err == nil {
				t.Fatal("an import that failed wrote some of its events")
			}
		})
	}
}

func TestImportStrict(t *testing.T) {
	c := testCatalog(t, boltKit(t).open(t), nil)
	ctx := context.Background()
	for _, tc := range []struct{ name, plan, msg string }{
		{"unknown field", `{"events":[{"group":"a","name":"b"},{"group":"a","name":"c","colour":"red"}]}`, `event 1: unknown field "colour"`},
		{"wrong case", `{"events":[{"Group":"a","name":"b"}]}`, `event 0: unknown field "Group"`},
		{"duplicate key", `{"events":[{"group":"a","name":"b","name":"c"}]}`, `event 0: duplicate field "name"`},
		{"bad UTF-8", "{\"events\":[{\"group\":\"a\",\"name\":\"b\"},{\"group\":\"a\",\"name\":\"b\xff\"}]}", `event 1: invalid UTF-8 in the value of "name"`},
		{"unknown top-level field", `{"events":[],"version":2}`, `unknown field "version"`},
		// A user's words, not the decoder's Go types (catalog.PlanEvent, int64).
		{"wrong type", `{"events":[{"group":"a","name":7}]}`, `event 0: field "name" is a number, want a string`},
		{"code a string", `{"events":[{"group":"a","name":"b","code":"7"}]}`, `event 0: field "code" is a string, want a whole number`},
		{"events an object", `{"events":{"group":"a","name":"b"}}`, `field "events" is an object, want an array of events`},
		{"plan an array", `[{"group":"a","name":"b"}]`, `the plan is an array, want an object: {"events":[`},
		{"event a string", `{"events":["a/b"]}`, `event 0: the event is a string, want an object`},
		{"bad status", `{"events":[{"group":"a","name":"b","status":"maybe"}]}`, `event 0: status "maybe"`},
		{"bad schema", `{"events":[{"group":"a","name":"b","schema":{"type":"nope"}}]}`, "event 0 (a/b): schema:"},
		{"bad name", `{"events":[{"group":"a","name":""}]}`, "event 0: catalog: invalid entry: empty event name"},
		{"the same key twice", `{"events":[{"group":"a","name":"b"},{"group":"a","name":"b"}]}`, "event 1: a/b is event 0 already"},
		{"not JSON", `{"events":[`, "tracking plan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Import(ctx, strings.NewReader(tc.plan))
			isErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "Go ") {
				t.Fatalf("error %q is not one line with %q", err, tc.msg)
			}
			t.Log(err)
		})
	}
	if l := must(c.List(ctx, "", Key{}, 10)); len(l) != 0 {
		t.Fatalf("rejected plans wrote %v", names(l))
	}
}
