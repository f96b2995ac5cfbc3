package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/privacy"
)

// TestClientPrivacy: a client's ip_policy and redact rules are read from
// the clients file and compiled; a bad rule or policy is refused at Open
// with what is wrong and where; on reload the clients loaded before stay;
// a hash rule without a key (--redact-key-file) is refused.
func TestClientPrivacy(t *testing.T) {
	t.Parallel()
	c, secret := client(t, "shop")
	hash := c.SecretSHA256
	good := `{"clients":[{"id":"shop","secret_sha256":"` + hash + `","ip_policy":"drop",
		"redact":[{"path":"props.email","action":"hash"},{"path":"/traits/phone","action":"drop"}]}]}`
	path := filepath.Join(t.TempDir(), "clients.json")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{ClientsFile: path}, nil, nil); err == nil || !strings.Contains(err.Error(), "--redact-key-file") {
		t.Fatalf("a hash rule without a key: %v, want it refused", err)
	}
	a, err := Open(Config{ClientsFile: path, RedactKey: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Authenticate("shop", secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Client.Policy(privacy.Keep); got != privacy.Drop {
		t.Errorf("policy %s, want drop", got)
	}
	if rs := p.Client.Redaction(); rs.Len() != 2 || !rs.Hashes() {
		t.Errorf("rules %+v, want 2 compiled, one hashing", rs)
	}
	// Written back (inlet clients add) as read.
	cs := a.Clients()
	if err := WriteFile(path, cs); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"ip_policy": "drop"`) || !strings.Contains(string(b), `"path": "/traits/phone"`) {
		t.Errorf("written file:\n%s", b)
	}

	for _, tc := range []struct{ field, want string }{
		{`"redact":[{"path":"email","action":"drop"}]`, `client "shop": redact: redact rule 1 ("email"): names a top-level field`},
		{`"redact":[{"path":"props.email","action":"mask"}]`, `action "mask": want drop or hash`},
		{`"redact":[{"path":"props.email"}]`, `action "": want drop or hash`},
		{`"ip_policy":"anonymize"`, `ip policy "anonymize": want keep, truncate or drop`},
	} {
		bad := `{"clients":[{"id":"shop","secret_sha256":"` + hash + `",` + tc.field + `}]}`
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Config{ClientsFile: path, RedactKey: true}, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open error %v, want %q", tc.field, err, tc.want)
		}
		if err := a.Reload(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Reload error %v, want %q", tc.field, err, tc.want)
		}
		if p, err := a.Authenticate("shop", secret); err != nil || p.Client.Redaction().Len() != 2 {
			t.Errorf("%s: after the bad reload: %v, %+v; want the rules loaded before", tc.field, err, p.Client)
		}
	}
}
