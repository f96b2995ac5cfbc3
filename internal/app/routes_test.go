package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/auth"
)

func TestRoutesCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("routes:\n  - {match: {group: shop}, topic: \"{group}.events\"}\nrules:\n  - {action: drop, match: {event: \"bot_*\"}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("routes:\n  - topic: a\n  - topic: \"{team}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv(nil)
		code := Main(context.Background(), append([]string{"routes"}, args...), env)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("check", good); code != 0 || !strings.Contains(out, "1 routes, 1 rules") {
		t.Errorf("check of a good file: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := run("check", bad); code != 1 || !strings.Contains(errs, "line 3: route 2 (route2)") || !strings.Contains(errs, "unknown field {team}") {
		t.Errorf("check of a bad file: exit %d, %q", code, errs)
	}
	if code, _, _ := run("check"); code != 2 {
		t.Errorf("check without FILE: exit %d, want 2", code)
	}
}

func TestClientsAddTopics(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "clients.json")
	env, _, errb := testEnv(nil)
	if code := Main(context.Background(), []string{"clients", "add", "--file", path, "shop", "--topics", "shop.*,shop-*"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	cs, err := auth.ReadFile(path)
	if err != nil || len(cs) != 1 || strings.Join(cs[0].Topics, ",") != "shop.*,shop-*" {
		t.Fatalf("clients %+v %v: want shop with its topics", cs, err)
	}
}
