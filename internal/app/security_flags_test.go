package app

import (
	"io"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/kafka"
)

// TestKafkaSecurityFlags: every command with Kafka clients takes the same
// --kafka-* flags and INLET_KAFKA_* variables into its kafka.Security.
func TestKafkaSecurityFlags(t *testing.T) {
	vars := map[string]string{
		"INLET_KAFKA_TLS_CA": "/ca.pem", "INLET_KAFKA_TLS_SERVER_NAME": "kafka.internal",
		"INLET_KAFKA_SASL": "scram-sha-256", "INLET_KAFKA_SASL_USER": "inlet", "INLET_KAFKA_SASL_PASSWORD": "pw",
	}
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return vars[k] }}
	want := kafka.Security{CAFile: "/ca.pem", ServerName: "kafka.internal", SASL: "scram-sha-512", User: "inlet", Password: "pw"}
	args := []string{"--kafka-sasl", "scram-sha-512"} // a flag wins over the environment
	parsers := map[string]func() (kafka.Security, error){
		"serve": func() (kafka.Security, error) {
			c, _, err := ParseServe(append(args, "--brokers", "k:9092"), env)
			return c.Kafka.Security, err
		},
		"worker": func() (kafka.Security, error) {
			c, _, _, err := ParseWorker(append(args, "--service", "s", "--echo"), env)
			return c.Security, err
		},
		"verify": func() (kafka.Security, error) {
			c, err := ParseVerify(args, env)
			return c.Security, err
		},
		"bench kafka": func() (kafka.Security, error) {
			c, err := ParseBenchKafka(append(args, "--brokers", "k:9092"), env)
			return c.Kafka.Security, err
		},
		"ship": func() (kafka.Security, error) {
			c, err := ParseShip(args, env)
			return c.Security, err
		},
	}
	for name, parse := range parsers {
		got, err := parse()
		// The CA file does not exist: the commands that validate at parse
		// time say so; the others carry the settings to their start.
		if err != nil && !strings.Contains(err.Error(), "usage") {
			t.Errorf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s: security %v, want %v", name, got, want)
		}
	}
}
