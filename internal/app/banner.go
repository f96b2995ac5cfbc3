package app

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/inlet-dev/inlet/internal/gateway"
)

// bannerInfo is what the serve banner shows: the addresses the gateway
// listens on, taken once it started.
type bannerInfo struct {
	http, https, ops string // host:port; https and ops empty when off
	broker           string // the development broker's address; "" with --brokers
	brokers          string // the brokers to read from: --brokers or the development broker
	cmd              string // how the reader runs inlet: "inlet" or "go run ./cmd/inlet"
}

// printBanner tells the person who started inlet serve where everything is
// (every endpoint that is on, on its listener) and what to run next. It
// names no secret: with --auth, the curl has a placeholder for one.
func printBanner(w io.Writer, b bannerInfo, cfg gateway.Config) {
	base := "http://" + b.http
	if cfg.TLSCert != "" {
		if b.https != "" {
			base = "https://" + b.https
		} else {
			base = "https://" + b.http
		}
	}
	ops := base // the operators' endpoints: /metrics, /ui/
	if b.ops != "" {
		ops = "http://" + b.ops
	}
	var s strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&s, format, a...) }
	p("\ninlet is listening on %s, writing to topic %q (ack=%s).\n", base, cfg.Ingest.Topic, cfg.Ack)
	if b.broker != "" {
		p("\n  Development broker: %s — a single-node Kafka-compatible broker inside\n"+
			"  this process, data under %s. For development only: use --brokers in production.\n", b.broker, cfg.DataDir)
	}
	creds := ""
	p("\n  Endpoints:\n")
	p("    %-50s events: POST JSON", base+"/v1/batch, /v1/track")
	if cfg.Auth.HTTP {
		creds = "-u 'CLIENT_ID:SECRET' "
		p(", with a client's credentials (--auth)")
	}
	p("\n")
	// The Segment-compatible API (issue 33's other part) adds its line here.
	if len(cfg.RPC.Services) > 0 {
		p("    %-50s request-reply, services: %s\n", base+"/v1/rpc/{service}", strings.Join(cfg.RPC.Services, ", "))
	}
	if cfg.UI.UI {
		p("    %-50s live events", ops+"/ui/")
		if cfg.Auth.HTTP {
			p(" (admin clients)")
		}
		p("\n")
	}
	if cfg.UI.Example {
		p("    %-50s the example shop, with inlet.js\n", base+"/example/")
	}
	p("    %-50s metrics · liveness · readiness\n", ops+"/metrics, /healthz, /readyz")
	p("\n  Send an event:\n")
	p("    curl -H 'Content-Type: application/json' %s-d '[{\"event\":\"page_view\",\"uid\":\"u1\",\"props\":{\"path\":\"/\"}}]' %s/v1/batch\n", creds, base)
	sec := ""
	if cfg.Kafka.Security.TLSEnabled() || cfg.Kafka.Security.SASL != "" {
		sec = " [your --kafka-tls/--kafka-sasl flags]"
	}
	p("  Read them:\n")
	p("    %s tail --brokers %s --topic %s -n 10%s\n", b.cmd, b.brokers, cfg.Ingest.Topic, sec)
	if b.broker != "" {
		p("    kcat -b %s -C -t %s -f '%%k %%s\\n'\n", b.broker, cfg.Ingest.Topic)
	}
	if len(cfg.RPC.Services) > 0 {
		svc := cfg.RPC.Services[0]
		if svc == "*" {
			svc = "echo"
		}
		p("  Answer request-reply calls (a worker per service):\n")
		p("    %s worker --service %s --brokers %s --echo%s\n", b.cmd, svc, b.brokers, sec)
	}
	if cfg.UI.UI {
		p("\n  Next: open %s/ui/ and send the event above: it shows there within a second.\n\n", ops)
	} else {
		p("\n  Next: send the event above, then read it back with tail.\n\n")
	}
	_, _ = io.WriteString(w, s.String())
}

// commandName is how the banner tells the reader to run inlet: "go run
// ./cmd/inlet" when this binary is one go run built (it lives in the go
// command's temporary directory), else "inlet".
func commandName() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, string(os.PathSeparator)+"go-build") {
		return "go run ./cmd/inlet"
	}
	return "inlet"
}
