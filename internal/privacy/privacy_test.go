package privacy

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var defIP = IP{V4Bits: DefaultV4Bits, V6Bits: DefaultV6Bits}

// TestApply: each policy on IPv4 and IPv6, with the default and other
// prefix lengths.
func TestApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ip   IP
		p    Policy
		addr string
		want string
	}{
		{defIP, Keep, "203.0.113.77", "203.0.113.77"},
		{defIP, Keep, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{defIP, Truncate, "203.0.113.77", "203.0.113.0"},
		{defIP, Truncate, "2001:db8:abcd:12:3:4:5:6", "2001:db8:abcd::"},
		{defIP, Truncate, "::ffff:203.0.113.77", "203.0.113.0"},
		{defIP, Truncate, "fe80::1%eth0", "fe80::"},
		{IP{V4Bits: 16, V6Bits: 32}, Truncate, "203.0.113.77", "203.0.0.0"},
		{IP{V4Bits: 16, V6Bits: 32}, Truncate, "2001:db8:abcd:12::1", "2001:db8::"},
		{defIP, Truncate, "not-an-address", ""},
		{defIP, Drop, "203.0.113.77", ""},
		{defIP, Drop, "2001:db8::1", ""},
	} {
		if got := tc.ip.Apply(tc.p, tc.addr); got != tc.want {
			t.Errorf("%+v %s %q: %q, want %q", tc.ip, tc.p, tc.addr, got, tc.want)
		}
	}
}

// TestFromHeader: X-IP-Policy and SP-Anonymous; a misspelt value is drop.
func TestFromHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    http.Header
		want Policy
	}{
		{http.Header{}, Keep},
		{http.Header{"X-Ip-Policy": {"keep"}}, Keep},
		{http.Header{"X-Ip-Policy": {" Truncate "}}, Truncate},
		{http.Header{"X-Ip-Policy": {"drop"}}, Drop},
		{http.Header{"X-Ip-Policy": {"trunc"}}, Drop},
		{http.Header{"X-Ip-Policy": {"truncate", "keep"}}, Truncate},
		{http.Header{"Sp-Anonymous": {"*"}}, Drop},
		{http.Header{"Sp-Anonymous": {""}, "X-Ip-Policy": {"keep"}}, Drop},
	} {
		if got := FromHeader(tc.h); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.h, got, tc.want)
		}
	}
	if Stricter(Drop, Keep) != Drop || Stricter(Keep, Truncate) != Truncate {
		t.Error("Stricter is not the stricter")
	}
}

// TestScrub: addresses in log lines, with ports and brackets, truncated or
// dropped; other words and numbers left alone.
func TestScrub(t *testing.T) {
	t.Parallel()
	line := "http: TLS handshake error from 198.51.100.23:51234: EOF; [2001:db8:abcd:12::9]:443 and 2001:db8:abcd:12::7, at 12:30:01.5 v1.2.3 deadbeef"
	if got := defIP.Scrub(Keep, line); got != line {
		t.Errorf("keep changed the line: %q", got)
	}
	got := defIP.Scrub(Truncate, line)
	want := "http: TLS handshake error from 198.51.100.0: EOF; 2001:db8:abcd:: and 2001:db8:abcd::, at 12:30:01.5 v1.2.3 deadbeef"
	if got != want {
		t.Errorf("truncate:\n got %q\nwant %q", got, want)
	}
	got = defIP.Scrub(Drop, line)
	for _, a := range []string{"198.51.100", "2001:db8"} {
		if strings.Contains(got, a) {
			t.Errorf("drop left %s in %q", a, got)
		}
	}
	if !strings.Contains(got, "12:30:01.5 v1.2.3 deadbeef") {
		t.Errorf("drop changed what is no address: %q", got)
	}

	var buf bytes.Buffer
	log := slog.New(defIP.LogHandler(slog.NewTextHandler(&buf, nil), Drop)).With("peer", "192.0.2.9:80")
	log.Warn("error from 192.0.2.8:1234", "err", os.ErrDeadlineExceeded, "remote", "[2001:db8::5]:9")
	slog.NewLogLogger(defIP.LogHandler(slog.NewTextHandler(&buf, nil), Drop), slog.LevelWarn).Printf("http: panic serving 192.0.2.7:4431: boom")
	if s := buf.String(); strings.Contains(s, "192.0.2") || strings.Contains(s, "2001:db8") || !strings.Contains(s, "(ip dropped)") {
		t.Errorf("log under drop:\n%s", s)
	}
}

// TestCompileRefused: every bad rule is refused, with what is wrong.
func TestCompileRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{Path: "", Action: "drop"}}, "empty path"},
		{[]Rule{{Path: "email", Action: "drop"}}, "top-level field"},
		{[]Rule{{Path: "/props", Action: "drop"}}, "top-level field"},
		{[]Rule{{Path: "props..email", Action: "drop"}}, "empty name"},
		{[]Rule{{Path: "/props/a~2b", Action: "drop"}}, "bad JSON pointer"},
		{[]Rule{{Path: "props.email", Action: "mask"}}, `action "mask"`},
		{[]Rule{{Path: "props.email", Action: "drop"}, {Path: "/props/email", Action: "hash"}}, "rule 2"},
		{[]Rule{{Path: "props.user", Action: "drop"}, {Path: "props.user.email", Action: "hash"}}, "already redacts props.user"},
		{[]Rule{{Path: "props.user.email", Action: "hash"}, {Path: "props.user", Action: "drop"}}, "inside this one"},
	} {
		_, err := Compile(tc.rules)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.rules, err, tc.want)
		}
	}
	if rs, err := Compile(nil); rs != nil || err != nil {
		t.Errorf("no rules: %v, %v", rs, err)
	}
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

// TestApplyRules: nested fields of props, context and traits dropped and
// hashed; unknown paths and paths through non-objects ignored; the hash
// is the HMAC of the string, the same for any spacing of other values.
func TestApplyRules(t *testing.T) {
	t.Parallel()
	rs, err := Compile([]Rule{
		{Path: "props.user.email", Action: "hash"},
		{Path: "/props/card", Action: "drop"},
		{Path: "context.device.ip", Action: "drop"},
		{Path: "/context/a~1b/c~0d", Action: "hash"},
		{Path: "traits.address.street", Action: "drop"},
		{Path: "traits.phone", Action: "hash"},
		{Path: "props.nothing.here", Action: "drop"},
		{Path: "props.name.first", Action: "drop"}, // props.name is a string: ignored
	})
	if err != nil {
		t.Fatal(err)
	}
	in := `{"event":"e", "props": {"user": {"email":"a@example.com","plan":"pro"},"card":[1,2],"name":"x"},
	"context":{"device":{"ip":"192.0.2.1","os":"linux"},"a/b":{"c~d":{"n": 1}}},
	"traits":{"address":{"street":"Main St 1","city":"Ghent"},"phone":"+32 555"},"received_at":"t"}`
	out, err := rs.Apply(nil, []byte(in), testKey)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"event":"e","props":{"user":{"email":"` + Hash(testKey, "a@example.com") + `","plan":"pro"},"name":"x"},` +
		`"context":{"device":{"os":"linux"},"a/b":{"c~d":"` + Hash(testKey, `{"n":1}`) + `"}},` +
		`"traits":{"address":{"city":"Ghent"},"phone":"` + Hash(testKey, "+32 555") + `"},"received_at":"t"}`
	if string(out) != want {
		t.Errorf("redacted:\n got %s\nwant %s", out, want)
	}
	if !json.Valid(out) {
		t.Errorf("not JSON: %s", out)
	}
	// The hash is the documented one: hex HMAC-SHA256 of the string
	// (computed apart: python3 hmac.new(key, b"a@example.com", sha256)).
	if h := Hash(testKey, "a@example.com"); h != "f9a936aaaaa5aac3ad349e31bfa5ad446546ccd6aa879fd35997da22a9b0527a" {
		t.Errorf("hash %s", h)
	}
	// Another key, another hash.
	out2, _ := rs.Apply(nil, []byte(in), []byte("another key of sixteen+ bytes"))
	if bytes.Equal(out, out2) {
		t.Error("two keys made the same hashes")
	}
	// MayApply: a rule's name, or an escape that may spell one.
	for v, want := range map[string]bool{
		`{"props":{"user":{"mail":"x"}}}`:          false,
		`{"props":{"user":{"email":"x"}}}`:         true,
		`{"props":{"user":{"em\u0061il":"x"}}}`:    true,
		`{"props":{"note":"my \"phone\" is off"}}`: true,
	} {
		if got := rs.MayApply([]byte(v)); got != want {
			t.Errorf("MayApply(%s) = %v, want %v", v, got, want)
		}
	}
	esc, err := rs.Apply(nil, []byte(`{"props":{"user":{"em\u0061il":"a@example.com"}}}`), testKey)
	if err != nil || !strings.Contains(string(esc), Hash(testKey, "a@example.com")) {
		t.Errorf("an escaped name: %s, %v; want its value hashed", esc, err)
	}
	for _, bad := range []string{`[1]`, `{"a":`, `not json`, `{"a":1} {"b":2}`, ``} {
		if _, err := rs.Apply(nil, []byte(bad), testKey); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestReadKey: hex is decoded, anything else taken as it is, a newline
// dropped, a short key refused.
func TestReadKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	k, err := ReadKey(write("hex", "000102030405060708090a0b0c0d0e0f\n"))
	if err != nil || len(k) != 16 || k[15] != 15 {
		t.Errorf("hex key: %x, %v", k, err)
	}
	k, err = ReadKey(write("raw", "a passphrase that is long\n"))
	if err != nil || string(k) != "a passphrase that is long" {
		t.Errorf("raw key: %q, %v", k, err)
	}
	if _, err := ReadKey(write("short", "short\n")); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short key: %v", err)
	}
	if _, err := ReadKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing key file: no error")
	}
}

// FuzzApplyValid: on any JSON object, compacted (as inlet's records are),
// ApplyValid writes what Apply writes; and on the object as sent (spaces
// and all) too, by falling back.
func FuzzApplyValid(f *testing.F) {
	for _, s := range []string{
		`{"props":{"user":{"email":"a@example.com","plan":"pro"},"card":[1,{"x":"}"}]},"context":{"a/b":{"c~d":{"n":1}}}}`,
		`{"props":{"user":{"em\u0061il":"a\"b\\c","x":null}},"traits":{"phone":12.5e3,"address":{"street":{"no":[1,2]}}}}`,
		`{"props":"x","context":[],"traits":{}}`,
		`{"props": {"card" : true, "user": {"email": {"k": [ 1, 2 ]}}}}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	rs, err := Compile([]Rule{
		{Path: "props.user.email", Action: ActionHash},
		{Path: "props.card", Action: ActionDrop},
		{Path: "/context/a~1b/c~0d", Action: ActionHash},
		{Path: "traits.address.street", Action: ActionDrop},
		{Path: "traits.phone", Action: ActionHash},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) || bytes.TrimSpace(v)[0] != '{' {
			return
		}
		want, err := rs.Apply(nil, v, testKey)
		if err != nil {
			return // duplicate names and the like: Apply's to refuse
		}
		got, err := rs.ApplyValid([]byte("x"), v, testKey)
		if err != nil || string(got) != "x"+string(want) {
			t.Errorf("as sent %s:\n ApplyValid %s (%v)\n      Apply %s", v, got, err, want)
		}
		var c bytes.Buffer
		if json.Compact(&c, v) != nil {
			return
		}
		got, err = rs.ApplyValid(nil, c.Bytes(), testKey)
		if err != nil || string(got) != string(want) {
			t.Errorf("compact %s:\n ApplyValid %s (%v)\n      Apply %s", c.Bytes(), got, err, want)
		}
	})
}

// TestConfigFlags: the flags set the config; bad values are refused.
func TestConfigFlags(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--ip-policy", "truncate", "--ip-truncate-v4", "16", "--ip-truncate-v6", "32", "--redact-key-file", "k"}); err != nil {
		t.Fatal(err)
	}
	if c.IPPolicy != Truncate || c.IP != (IP{16, 32}) || c.RedactKeyFile != "k" || c.Validate() != nil {
		t.Errorf("config %+v (%v)", c, c.Validate())
	}
	if err := fs.Parse([]string{"--ip-policy", "anonymize"}); err == nil {
		t.Error("--ip-policy anonymize: no error")
	}
	for _, bad := range []IP{{33, 48}, {24, 129}, {-1, 48}} {
		if err := (Config{IP: bad}).Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
