package app

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
)

func testEnv(vars map[string]string) (Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}, &out, &errb
}

func TestParseServe(t *testing.T) {
	env, _, _ := testEnv(map[string]string{
		"INLET_BROKERS":         "k1:9092,k2:9092",
		"INLET_PRODUCE_TIMEOUT": "3s",
		"INLET_MAX_BODY_BYTES":  "2MiB",
		"INLET_TOPIC":           "from-env",
	})
	cfg, _, err := ParseServe([]string{"--topic", "from-flag", "--max-event-bytes", "64KiB", "--trusted-proxies", "10.0.0.0/8,192.0.2.1"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "k1:9092,k2:9092" || cfg.Ingest.WriteTimeout != 3*time.Second ||
		cfg.Ingest.MaxBodyBytes != 2<<20 || cfg.Ingest.MaxEventBytes != 64<<10 {
		t.Errorf("environment not applied: %+v", cfg)
	}
	if cfg.Ingest.Topic != "from-flag" {
		t.Errorf("topic %q: the flag must win over INLET_TOPIC", cfg.Ingest.Topic)
	}
	if len(cfg.Ingest.TrustedProxies) != 2 || !cfg.Ingest.TrustedProxies[1].Contains(netip.MustParseAddr("192.0.2.1")) {
		t.Errorf("trusted proxies %v", cfg.Ingest.TrustedProxies)
	}
	if cfg, _, err = ParseServe([]string{"--rpc-linger", "5ms", "--rpc-compression", "zstd", "--client-id", "gw", "--spool-max-bytes", "2GiB", "--broker-listen", "127.0.0.1:0"}, env); err != nil {
		t.Fatal(err)
	}
	if cfg.RPCLinger != 5*time.Millisecond || cfg.RPCCompression != "zstd" || cfg.Kafka.ClientID != "gw" || cfg.Kafka.Compression != "lz4" ||
		cfg.Spool.MaxBytes != 2<<30 || cfg.Broker.Listen != "127.0.0.1:0" {
		t.Errorf("--rpc-linger, --rpc-compression, --client-id, --spool-max-bytes, --broker-listen: %+v", cfg)
	}
	d := gateway.DefaultConfig()
	if d.Ingest.MaxBodyBytes != 1<<20 || d.Ingest.MaxEvents != 500 || d.Ingest.MaxEventBytes != 32<<10 || d.Ack != gateway.AckSpool {
		t.Errorf("documented defaults changed: %+v", d)
	}
}

func TestMainErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{"no command", nil, nil, 2, "Usage:"},
		{"unknown command", []string{"nope"}, nil, 2, `unknown command "nope"`},
		{"misspelt command", []string{"serv"}, nil, 2, `unknown command "serv"; did you mean serve?`},
		{"bad env", []string{"serve"}, map[string]string{"INLET_PRODUCE_TIMEOUT": "soon"}, 2, "INLET_PRODUCE_TIMEOUT=\"soon\" (--produce-timeout): want a duration"},
		{"bad size", []string{"serve", "--max-body-bytes", "lots"}, nil, 2, "--max-body-bytes \"lots\": want a size"},
		{"bad ack", []string{"serve", "--ack", "maybe"}, nil, 1, `--ack "maybe"`},
		{"bad spool sync", []string{"serve", "--spool-sync", "sometimes"}, nil, 1, `sync "sometimes"`},
		{"spool smaller than a segment", []string{"serve", "--spool-max-bytes", "1MiB"}, nil, 1, "below the segment size"},
		{"bad proxies", []string{"serve", "--trusted-proxies", "nope"}, nil, 2, "not an IP or CIDR"},
		{"bad origin", []string{"serve", "--cors-origins", "example.com"}, nil, 1, "CORS origin"},
		{"bad rpc compression", []string{"serve", "--rpc-compression", "brotli"}, nil, 1, `--rpc-compression: kafka: unknown compression "brotli"`},
		{"negative rpc linger", []string{"serve", "--rpc-linger", "-1ms"}, nil, 1, "--rpc-linger must not be negative"},
		{"bad reply compression", []string{"worker", "--service", "s", "--brokers", "k:9092", "--echo", "--reply-compression", "brotli"}, nil, 2, `reply compression: kafka: unknown compression "brotli"`},
		{"extra arg", []string{"tail", "extra"}, nil, 2, `unexpected argument "extra"`},
		{"bad tail from", []string{"tail", "--from", "middle"}, nil, 1, "--from \"middle\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, out, errb := testEnv(tc.env)
			code := Main(context.Background(), tc.args, env)
			if code != tc.code || !strings.Contains(errb.String()+out.String(), tc.msg) {
				t.Fatalf("exit %d, output %q; want %d with %q", code, errb.String()+out.String(), tc.code, tc.msg)
			}
		})
	}
	env, out, _ := testEnv(nil)
	if code := Main(context.Background(), []string{"version"}, env); code != 0 || !strings.HasPrefix(out.String(), "inlet ") {
		t.Fatalf("version: %d %q", code, out)
	}
}
