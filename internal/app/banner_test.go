package app

import (
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/gateway"
)

// TestBanner: the serve banner names every endpoint that is on, on its
// listener, and the commands to run next; under --auth its curl carries a
// placeholder for the credentials (it got 401), never a secret.
func TestBanner(t *testing.T) {
	cfg := gateway.DefaultConfig()
	cfg.UI.Example = true
	cfg.RPC.Services = []string{"billing"}
	cfg.Auth.HTTP = true
	cfg.Kafka.Security.Password = "hunter2"
	var b strings.Builder
	printBanner(&b, bannerInfo{http: "127.0.0.1:8080", ops: "127.0.0.1:9090", brokers: "k1:9092", cmd: "inlet"}, cfg)
	out := b.String()
	for _, want := range []string{
		"http://127.0.0.1:8080/v1/batch",
		"http://127.0.0.1:8080/v1/rpc/{service}",
		"http://127.0.0.1:9090/ui/", // with --ops-listen, the live page is there
		"http://127.0.0.1:8080/example/",
		"http://127.0.0.1:9090/metrics",
		"-u 'CLIENT_ID:SECRET' -d",
		"inlet tail --brokers k1:9092 --topic events -n 10",
		"inlet worker --service billing --brokers k1:9092",
		"Next: open http://127.0.0.1:9090/ui/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("banner lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "Development broker") {
		t.Errorf("banner shows a secret or a development broker it does not run:\n%s", out)
	}

	cfg = gateway.DefaultConfig()
	b.Reset()
	printBanner(&b, bannerInfo{http: "127.0.0.1:8080", broker: "127.0.0.1:9092", brokers: "127.0.0.1:9092", cmd: "go run ./cmd/inlet"}, cfg)
	out = b.String()
	for _, bad := range []string{"/example/", "/v1/rpc/", "worker", "-u '"} {
		if strings.Contains(out, bad) {
			t.Errorf("banner names %q, which is off:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "Development broker: 127.0.0.1:9092") || !strings.Contains(out, "go run ./cmd/inlet tail") {
		t.Errorf("banner of the development setup:\n%s", out)
	}
}
