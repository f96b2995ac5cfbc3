package routes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedactRules: a route's redact rules reach its Decision; a bad rule
// is refused with its line; a hash rule without a key is refused at Open
// and on reload, where the routes loaded before keep serving.
func TestRedactRules(t *testing.T) {
	t.Parallel()
	const good = `
routes:
  - name: signup
    match: {event: signup}
    topic: signups
    redact:
      - {path: props.email, action: hash}
      - {path: /traits/address/street, action: drop}
`
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p, "events", nil, nil); err == nil || !strings.Contains(err.Error(), "--redact-key-file") {
		t.Fatalf("a hash rule without a key: %v, want it refused", err)
	}
	w, err := Open(p, "events", nil, nil, WithRedactKey(true))
	if err != nil {
		t.Fatal(err)
	}
	var d Decision
	w.Load().Decide(&Input{Event: []byte("signup")}, &d)
	if d.Redact.Len() != 2 {
		t.Errorf("signup's decision has %d rules, want 2", d.Redact.Len())
	}
	w.Load().Decide(&Input{Event: []byte("view")}, &d)
	if d.Redact != nil {
		t.Errorf("the default route has rules %+v", d.Redact)
	}
	for _, tc := range []struct{ rule, want string }{
		{`{path: email, action: drop}`, `line 2: route 1 (signup): redact rule 1 ("email"): names a top-level field`},
		{`{path: props.email, action: scramble}`, `action "scramble"`},
		{`{path: "/props/a~3", action: drop}`, `bad JSON pointer`},
		{`{path: props.x, action: drop, extra: 1}`, `field extra not found`},
	} {
		bad := "routes:\n  - name: signup\n    topic: signups\n    redact:\n      - " + tc.rule + "\n"
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w.Reload(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.rule, err, tc.want)
		}
		w.Load().Decide(&Input{Event: []byte("signup")}, &d)
		if d.Redact.Len() != 2 || d.Topic != "signups" {
			t.Errorf("%s: the routes loaded before were not kept", tc.rule)
		}
	}
}
