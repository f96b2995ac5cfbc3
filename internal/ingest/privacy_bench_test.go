package ingest

import (
	"encoding/hex"
	"os"
	"testing"

	"github.com/inlet-dev/inlet/internal/privacy"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// BenchmarkIngestPrivacy is BenchmarkIngest (10 events a request) behind
// a routes file of one catch-all route: off (no policy, no rules), with
// --ip-policy truncate, and with 3 redaction rules on the route (hash
// props.path, drop props.ref, hash context.email, absent: every event
// rewritten). cpu-ns/event is the process's CPU time over the events.
func BenchmarkIngestPrivacy(b *testing.B) {
	key := b.TempDir() + "/key"
	if err := os.WriteFile(key, []byte(hex.EncodeToString(redactKey)), 0o600); err != nil {
		b.Fatal(err)
	}
	plain := routesOf(b, "routes:\n  - {name: all, topic: events}\n")
	rules := routesOf(b, `
routes:
  - name: all
    topic: events
    redact:
      - {path: props.path, action: hash}
      - {path: props.ref, action: drop}
      - {path: context.email, action: hash}
`)
	for _, tc := range []struct {
		name   string
		policy privacy.Policy
		rt     fixedRoutes
	}{
		{"off", privacy.Keep, plain},
		{"truncate", privacy.Truncate, plain},
		{"redact3", privacy.Keep, rules},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Privacy.IPPolicy = tc.policy
			cfg.Privacy.RedactKeyFile = key
			cpu0 := testkit.CPUTime(b)
			benchIngestConfig(b, cfg, benchBody(10), 10, WithRoutes(tc.rt))
			b.ReportMetric(float64(testkit.CPUTime(b)-cpu0)/float64(b.N*10), "cpu-ns/event")
		})
	}
}
