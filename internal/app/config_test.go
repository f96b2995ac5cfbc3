package app

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// TestServeFlagsHaveGroups: every flag of inlet serve and inlet catalog
// serve has a group in serveLayout (a new flag without one fails here:
// add it to a group's Flags), and no two share a key of the config file.
func TestServeFlagsHaveGroups(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"catalog", "serve"}} {
		fs, err := commandFlags(cmd...)
		if err != nil {
			t.Fatal(err)
		}
		paths := map[string]string{}
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if _, _, ok := serveLayout.Key(f.Name); !ok {
				t.Errorf("inlet %s --%s has no group: add it to a group's Flags in serveLayout (internal/app/config.go)", strings.Join(cmd, " "), f.Name)
			}
			p := serveLayout.Path(f.Name)
			if other, dup := paths[p]; dup {
				t.Errorf("--%s and --%s share the key %s", f.Name, other, p)
			}
			paths[p] = f.Name
		})
		if n < 20 {
			t.Fatalf("inlet %s: only %d flags seen", strings.Join(cmd, " "), n)
		}
	}
}

// TestConfigReferenceCurrent: docs/configuration.md's generated part is
// what the flags say now.
func TestConfigReferenceCurrent(t *testing.T) {
	name := filepath.Join("..", "..", "docs", "configuration.md")
	doc, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	want, err := UpdateReference(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, want) {
		t.Fatalf("%s is not current: run 'go generate ./internal/app' (make generate) and commit it", name)
	}
}

// TestServeConfigFile: a config file, the environment and flags together,
// in the documented precedence as --print-config shows it, a secret from
// each of them redacted; an unknown key and a bad value refused in one
// line each.
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(file, []byte(`
kafka:
  brokers: [k1:9092, k2:9092]
  compression: zstd
  linger: 5ms
  sasl: plain
  sasl-user: gw
  sasl-password: file-secret
ingest:
  topic: from-file
  max-events: 100
spool:
  max-bytes: 2GiB
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env, out, errb := testEnv(map[string]string{
		"INLET_CONFIG": file, "INLET_TOPIC": "from-env", "INLET_MAX_EVENTS": "200", "INLET_LINGER": "7ms",
	})
	if code := Main(context.Background(), []string{"serve", "--max-events", "300", "--print-config"}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	got := regexp.MustCompile(` +#`).ReplaceAllString(out.String(), " #")
	for _, want := range []string{
		"\nkafka:\n",
		"  brokers: k1:9092,k2:9092 # file\n",
		"  compression: zstd # file\n",
		"  linger: 7ms # env INLET_LINGER\n",
		"  sasl-password: " + cliflag.Redacted + " # file\n",
		"  max-events: 300 # flag --max-events\n",
		"  topic: from-env # env INLET_TOPIC\n",
		"  max-bytes: 2GiB # file\n",
		"  sync: always # default\n",
		"\nhttp:\n  body-idle-timeout: 5s # default\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "file-secret") {
		t.Errorf("--print-config shows the SASL password:\n%s", out)
	}
	// The environment's password and a client secret on a command line
	// are redacted too.
	env, out, _ = testEnv(map[string]string{"INLET_KAFKA_SASL_PASSWORD": "env-secret"})
	if code := Main(context.Background(), []string{"serve", "--print-config"}, env); code != 0 || strings.Contains(out.String(), "env-secret") ||
		!strings.Contains(out.String(), "sasl-password: "+cliflag.Redacted) {
		t.Errorf("exit %d; the environment's password shown or not marked:\n%s", code, out)
	}

	for _, tc := range []struct{ name, file, want string }{
		{"unknown key", "kafka:\n  broker: k1:9092\n", "inlet.yaml:2: unknown key kafka.broker; did you mean kafka.brokers?"},
		{"bad value", "spool:\n  max-bytes: lots\n", `inlet.yaml:2: spool.max-bytes "lots" (--spool-max-bytes): want a size`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			env, out, errb := testEnv(nil)
			code := Main(context.Background(), []string{"serve", "--config", file}, env)
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			if code != 2 || out.Len() > 0 || len(lines) != 2 || !strings.Contains(lines[0], tc.want) || lines[1] != "run 'inlet serve -h' for the flags" {
				t.Fatalf("exit %d, stderr %q; want 2 and two lines, the first with %q", code, errb, tc.want)
			}
		})
	}
}

// TestServeHelp: -h lists the flags by group with the environment and
// the file; a bad flag prints two lines, not the usage.
func TestServeHelp(t *testing.T) {
	env, out, errb := testEnv(nil)
	if code := Main(context.Background(), []string{"serve", "-h"}, env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := errb.String() + out.String()
	for _, want := range []string{"INLET_MAX_EVENTS", "--config FILE", "\nKafka: producer, TLS and SASL (config file: kafka):\n  --brokers list\n", "\nAck mode, spool and local state (config file: spool):\n  --ack string\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve -h lacks %q", want)
		}
	}
	if strings.Contains(help, "\nOther") {
		t.Errorf("serve -h has flags without a group:\n%s", help)
	}
	env, _, errb = testEnv(nil)
	if code := Main(context.Background(), []string{"serve", "--max-evnts", "3"}, env); code != 2 ||
		errb.String() != "inlet serve: unknown flag --max-evnts; did you mean --max-events?\nrun 'inlet serve -h' for the flags\n" {
		t.Errorf("exit %d, stderr %q", code, errb)
	}
}

// TestEnvSlipWarned: a variable one letter off a flag's is named with the
// one meant; another command's variable is not.
func TestEnvSlipWarned(t *testing.T) {
	env, _, errb := testEnv(nil)
	env.Environ = func() []string {
		return []string{"INLET_BROKER=k:9092", "INLET_SERVICE=s", "INLET_REPLY_COMPRESSION=zstd"}
	}
	if code := Main(context.Background(), []string{"serve", "--print-config"}, env); code != 0 ||
		errb.String() != "inlet serve: INLET_BROKER is not read (no such flag); did you mean INLET_BROKERS?\n" {
		t.Errorf("exit %d, stderr %q", code, errb)
	}
}
