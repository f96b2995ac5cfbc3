package app

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/auth"
)

func TestClientsCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clients.json")
	run := func(vars map[string]string, args ...string) (int, string, string) {
		env, out, errb := testEnv(vars)
		code := Main(context.Background(), append([]string{"clients"}, args...), env)
		return code, out.String(), errb.String()
	}

	// NAME before and between flags.
	code, out, errs := run(nil, "add", "--file", path, "web", "--groups", "web,ios", "--topics", "web.*", "--default-group", "web", "--rate", "5", "--burst", "10")
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, errs)
	}
	secret := strings.TrimSuffix(out, "\n")
	if len(secret) != 43 || strings.Contains(secret, "\n") {
		t.Fatalf("add printed %q on stdout: want the secret alone", out)
	}
	if !strings.Contains(errs, "only this once") || strings.Contains(errs, secret) {
		t.Errorf("stderr %q: want a hint, without the secret", errs)
	}
	code, out2, errs := run(map[string]string{"INLET_FILE": path}, "add", "--admin", "ops")
	if code != 0 {
		t.Fatalf("add with INLET_FILE: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || !strings.Contains(string(b), auth.HashSecret(secret)) {
		t.Errorf("the file must hold the hash, not the secret:\n%s", b)
	}

	// The printed secret authenticates, alone or with the id.
	a, err := auth.Open(auth.Config{ClientsFile: path}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Authenticate("", secret)
	if err != nil || p.Client.ID != "web" || !slices.Equal(p.Client.Groups, []string{"web", "ios"}) ||
		p.Client.DefaultGroup != "web" || p.Client.Rate != 5 || p.Client.Burst != 10 || p.Client.Admin {
		t.Errorf("web: %+v, %v", p.Client, err)
	}
	if p, err := a.Authenticate("ops", strings.TrimSpace(out2)); err != nil || !p.Client.Admin {
		t.Errorf("ops: %+v, %v", p, err)
	}

	if code, _, errs := run(nil, "add", "--file", path, "web"); code != 1 || !strings.Contains(errs, "already") {
		t.Errorf("duplicate: exit %d: %s", code, errs)
	}
	if code, _, errs := run(nil, "add", "--file", path, "crm", "--ip-policy", "drop", "--redact", "props.email=drop,props.phone=drop"); code != 0 {
		t.Fatalf("add crm: exit %d: %s", code, errs)
	}
	code, out, errs = run(nil, "list", "--file", path)
	if !strings.Contains(out, "drop") || !strings.Contains(out, "2 rules") {
		t.Errorf("list: want crm's IP policy and its 2 redaction rules:\n%s", out)
	}
	if code != 0 || !strings.Contains(out, "web,ios") || !strings.Contains(out, "web.*") || !strings.Contains(out, "5/s") || !strings.Contains(out, "ops") {
		t.Errorf("list: exit %d:\n%s%s", code, out, errs)
	}
	if strings.Contains(out, secret) || strings.Contains(out, auth.HashSecret(secret)) {
		t.Errorf("list shows a secret or its hash:\n%s", out)
	}
	if code, _, errs := run(nil, "remove", "--file", path, "web"); code != 0 {
		t.Errorf("remove: exit %d: %s", code, errs)
	}
	if code, _, errs := run(nil, "remove", "--file", path, "web"); code != 1 || !strings.Contains(errs, `no client "web"`) {
		t.Errorf("remove again: exit %d: %s", code, errs)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("", secret); err == nil {
		t.Error("a removed client's secret still works")
	}
	if _, out, _ := run(nil, "list", "--file", path); strings.Contains(out, "web") {
		t.Errorf("list after remove:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "Usage"},
		{[]string{"frob"}, 2, "unknown command"},
		{[]string{"add", "web"}, 2, "--file"},
		{[]string{"add", "--file", path}, 2, "one client NAME"},
		{[]string{"add", "--file", path, "x", "y"}, 2, "one client NAME"},
		{[]string{"add", "--file", path, "bad name"}, 1, "client id"},
		{[]string{"add", "--file", path, "--rate", "-1", "x"}, 1, "negative"},
		{[]string{"add", "--file", path, "--nope", "x"}, 2, "unknown flag --nope"},
		{[]string{"list"}, 2, "--file"},
		{[]string{"list", "--file", path + ".none"}, 1, "does not exist"},
		{[]string{"remove", "--file", path}, 2, "one client NAME"},
	} {
		if code, _, errs := run(nil, c.args...); code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("clients %v: exit %d, %q: want %d and %q", c.args, code, errs, c.code, c.msg)
		}
	}
}
