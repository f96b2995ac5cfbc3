package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var testLayout = &Layout{
	Groups: []Group{
		{Name: "kafka", Title: "Kafka", Flags: []string{"brokers"}},
		{Name: "spool", Title: "Spool"},
		{Name: "spool-x", Title: "A longer prefix"},
		{Name: "ui", Title: "UI"},
		{Name: "config", Title: "Config", Flags: []string{"print-config"}},
	},
	CommandOnly: []string{"config", "print-config"},
}

type testFlags struct {
	brokers           []string
	password          string
	linger            time.Duration
	maxBytes          int64
	sync, xy, topFlag string
	ui                bool
	fs                *flag.FlagSet
}

func newTestFlags() *testFlags {
	t := &testFlags{brokers: []string{"localhost:9092"}, linger: time.Millisecond, maxBytes: 1 << 30, sync: "always", ui: true}
	fs := flag.NewFlagSet("inlet serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	List(fs, &t.brokers, "brokers", "")
	fs.StringVar(&t.password, "kafka-sasl-password", "", "")
	fs.DurationVar(&t.linger, "kafka-linger", t.linger, "")
	Bytes(fs, &t.maxBytes, "spool-max-bytes", "")
	fs.StringVar(&t.sync, "spool-sync", t.sync, "")
	fs.StringVar(&t.xy, "spool-x-y", "", "")
	fs.StringVar(&t.topFlag, "loner", "", "")
	fs.BoolVar(&t.ui, "ui", t.ui, "")
	fs.String("config", "", "")
	fs.Bool("print-config", false, "")
	t.fs = fs
	return t
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "inlet.yaml")
	if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestLayoutKey(t *testing.T) {
	for _, tc := range []struct{ flag, path string }{
		{"brokers", "kafka.brokers"},            // listed
		{"kafka-linger", "kafka.linger"},        // prefix dropped
		{"spool-max-bytes", "spool.max-bytes"},  //
		{"spool-x-y", "spool-x.y"},              // the longest prefix wins
		{"ui", "ui.ui"},                         // named as its group
		{"loner", "loner"},                      // no group: a key of its own
		{"print-config", "config.print-config"}, //
	} {
		if got := testLayout.Path(tc.flag); got != tc.path {
			t.Errorf("%s: %s, want %s", tc.flag, got, tc.path)
		}
	}
}

// TestConfigPrecedence: flags over the environment over the file over the
// defaults, each value's source as --print-config shows it, and what it
// prints reads back as a config file.
func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, `
kafka:
  brokers: [k1:9092, k2:9092]
  linger: 5ms
  sasl-password: hunter2
spool:
  max-bytes: 2GiB
  sync: interval
loner: from-file
ui: {ui: false}
`)
	env := map[string]string{"INLET_CONFIG": file, "INLET_SPOOL_SYNC": "always", "INLET_KAFKA_LINGER": "7ms"}
	tf := newTestFlags()
	p, err := ParseConfig(tf.fs, []string{"--kafka-linger", "9ms"}, func(k string) string { return env[k] }, testLayout, "config")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tf.brokers, ",") != "k1:9092,k2:9092" || tf.linger != 9*time.Millisecond || tf.maxBytes != 2<<30 ||
		tf.sync != "always" || tf.topFlag != "from-file" || tf.ui || tf.password != "hunter2" || tf.xy != "" {
		t.Fatalf("values: %+v", tf)
	}
	var out bytes.Buffer
	if err := PrintConfig(&out, tf.fs, testLayout, p, "config"); err != nil {
		t.Fatal(err)
	}
	norm := regexp.MustCompile(` +#`).ReplaceAllString(out.String(), " #")
	for _, want := range []string{
		"loner: from-file # file\n",
		"  brokers: k1:9092,k2:9092 # file\n",
		"  linger: 9ms # flag --kafka-linger\n",
		"  sasl-password: " + Redacted + " # file\n",
		"  max-bytes: 2GiB # file\n",
		"  sync: always # env INLET_SPOOL_SYNC\n",
		"spool-x:\n  y: # default\n",
		"ui:\n  ui: false # file\n",
	} {
		if !strings.Contains(norm, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "hunter2") || strings.Contains(out.String(), "print-config") {
		t.Errorf("--print-config shows a secret or a command-line-only flag:\n%s", out.String())
	}
	// What it prints is a config file giving the same values.
	back := newTestFlags()
	printed := strings.ReplaceAll(out.String(), Redacted, "hunter2")
	if _, err := ParseConfig(back.fs, []string{"--config", writeFile(t, printed)}, func(string) string { return "" }, testLayout, "config"); err != nil {
		t.Fatalf("--print-config's output does not read back: %v\n%s", err, printed)
	}
	back.fs, tf.fs = nil, nil
	if strings.Join(back.brokers, ",") != strings.Join(tf.brokers, ",") || back.linger != tf.linger || back.sync != tf.sync || back.maxBytes != tf.maxBytes || back.ui != tf.ui {
		t.Errorf("read back %+v, want %+v", back, tf)
	}
}

// TestConfigFileErrors: each refusal is one line naming the file, line,
// key and value, with the form expected or a "did you mean".
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"unknown key", "kafka:\n  brokerz: x\n", `inlet.yaml:2: unknown key kafka.brokerz; did you mean kafka.brokers?`},
		{"key outside its group", "brokers: x\n", `inlet.yaml:1: unknown key brokers; did you mean kafka.brokers?`},
		{"flag's name as the key", "spool: {spool-max-bytes: 1GiB}\n", `unknown key spool.spool-max-bytes; did you mean spool.max-bytes?`},
		{"underscore", "spool: {max_bytes: 1GiB}\n", `did you mean spool.max-bytes?`},
		{"misspelt group", "kafak: {brokers: x}\n", `unknown key kafak; did you mean kafka?`},
		{"nothing near", "zzzzzzzzzz: 1\n", `inlet.yaml:1: unknown key zzzzzzzzzz`},
		{"bad size", "spool:\n  max-bytes: lots\n", `inlet.yaml:2: spool.max-bytes "lots" (--spool-max-bytes): want a size`},
		{"bad duration", "kafka: {linger: 5}\n", `kafka.linger "5" (--kafka-linger): want a duration such as 500ms, 10s or 2m`},
		{"bad bool", "ui: {ui: maybe}\n", `ui.ui "maybe" (--ui): want true or false`},
		{"list for a single value", "kafka: {linger: [1s, 2s]}\n", `kafka.linger (--kafka-linger): want a single value: a duration`},
		{"group as a value", "kafka: x\n", `kafka: want a mapping of its keys`},
		{"twice", "spool: {sync: always}\nspool: {sync: interval}\n", `inlet.yaml:2: spool is set twice`},
		{"command-line only", "config: {print-config: true}\n", `inlet.yaml:1: unknown key config`},
		{"not yaml", "kafka: {brokers: x\n", `inlet.yaml: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tf := newTestFlags()
			_, err := ParseConfig(tf.fs, []string{"--config", writeFile(t, tc.file)}, func(string) string { return "" }, testLayout, "config")
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(ue.Msg, tc.want) || strings.Contains(ue.Msg, "\n") {
				t.Fatalf("error %v, want one line with %q", err, tc.want)
			}
		})
	}
}

// TestFlagErrors: a refused flag or environment variable is one line with
// the flag, the value and the form expected.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--kafka-linger", "banana"}, want: `--kafka-linger "banana": want a duration such as 500ms, 10s or 2m`},
		{env: map[string]string{"INLET_KAFKA_LINGER": "banana"}, want: `INLET_KAFKA_LINGER="banana" (--kafka-linger): want a duration`},
		{env: map[string]string{"INLET_UI": "banana"}, want: `INLET_UI="banana" (--ui): want true or false`},
		{args: []string{"--ui=banana"}, want: `--ui "banana": want true or false`},
		{args: []string{"--spool-max-bytes", "lots"}, want: `--spool-max-bytes "lots": want a size`},
		{args: []string{"--brokrs", "x"}, want: `unknown flag --brokrs; did you mean --brokers?`},
		{args: []string{"--nothing-like-it"}, want: `unknown flag --nothing-like-it`},
		{args: []string{"--kafka-linger"}, want: `--kafka-linger needs a value: a duration`},
	} {
		tf := newTestFlags()
		var out bytes.Buffer
		tf.fs.SetOutput(&out)
		_, err := Parse(tf.fs, tc.args, func(k string) string { return tc.env[k] })
		var ue *UsageError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUsage) || !strings.Contains(ue.Msg, tc.want) || ue.Cmd != "inlet serve" {
			t.Errorf("%q %v: error %v, want %q", tc.args, tc.env, err, tc.want)
		}
		if out.Len() > 0 {
			t.Errorf("%q: printed %q besides the error", tc.args, out.String())
		}
	}
}

func TestSecret(t *testing.T) {
	for name, want := range map[string]bool{
		"kafka-sasl-password": true, "secret": true, "token": true, "client-secret": true,
		"kafka-sasl-password-file": false, "secret-file": false, "auth-token-ttl": false, "tls-key": false, "auth-token-key-file": false,
	} {
		if Secret(name) != want {
			t.Errorf("Secret(%q) = %v", name, !want)
		}
	}
}

func TestPrintUsage(t *testing.T) {
	tf := newTestFlags()
	var out bytes.Buffer
	PrintUsage(&out, tf.fs, testLayout)
	for _, want := range []string{"\nKafka (config file: kafka):\n  --brokers list\n", "\nSpool (config file: spool):\n  --spool-max-bytes size\n", "\nOther:\n  --loner string\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func TestEnvSlips(t *testing.T) {
	tf := newTestFlags()
	environ := []string{"INLET_BROKER=x", "INLET_BROKERS=y", "INLET_TEST_BROKERS=z", "INLET_OTHER_COMMANDS=1", "INLET_UIX=1", "PATH=/bin", "INLET_SPOOL_SYNCS=a", "INLET_BIN=./inlet"}
	got := EnvSlips(tf.fs, environ, func(k string) bool { return k == "INLET_UIX" })
	want := []string{
		"inlet serve: INLET_BROKER is not read (no such flag); did you mean INLET_BROKERS?",
		"inlet serve: INLET_SPOOL_SYNCS is not read (no such flag); did you mean INLET_SPOOL_SYNC?",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("EnvSlips: %q, want %q", got, want)
	}
}
