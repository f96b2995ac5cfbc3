package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/inlet-dev/inlet/internal/ingest"
)

// DocsURL is where the root page sends a reader for the documentation.
const DocsURL = "https://github.com/inlet-dev/inlet#readme"

// Root is the JSON answer of GET / (to Accept: application/json): what
// this listener serves, for a person or a client finding its way. It
// shows nothing /readyz and the endpoints' own answers do not: no
// address, broker, topic or setting beyond which endpoints are on and
// whether ingest needs credentials.
type Root struct {
	Name    string `json:"name"` // "inlet"
	Version string `json:"version,omitempty"`
	Docs    string `json:"docs"`
	// Auth: ingest and request-reply need a client's credentials (--auth).
	Auth      bool          `json:"auth"`
	Endpoints RootEndpoints `json:"endpoints"`
}

// RootEndpoints are the paths a listener serves; empty when off or on the
// other listener (--ops-listen).
type RootEndpoints struct {
	Ingest  []string `json:"ingest,omitempty"` // POST /v1/batch, /v1/track; GET /i, /i.gif
	RPC     string   `json:"rpc,omitempty"`    // with --rpc-services
	SDK     string   `json:"sdk,omitempty"`
	UI      string   `json:"ui,omitempty"`
	Example string   `json:"example,omitempty"`
	Metrics string   `json:"metrics,omitempty"`
	Health  string   `json:"health"`
	Ready   string   `json:"ready"`
}

// onOpsKey marks a request that came in on --ops-listen (opsView).
type onOpsKey struct{}

// root is GET /'s answer on the listener (ops: --ops-listen).
func (g *Gateway) root(ops bool) Root {
	c := g.cfg
	public, operators := !ops, ops || c.OpsListen == ""
	rt := Root{Name: "inlet", Docs: DocsURL, Auth: c.Auth.HTTP,
		Endpoints: RootEndpoints{Health: "/healthz", Ready: "/readyz"}}
	// A public listener beside --ops-listen says no more than it must:
	// the version goes with the operators' endpoints.
	if operators {
		rt.Version = c.Version
		rt.Endpoints.Metrics = "/metrics"
		if c.UI.UI {
			rt.Endpoints.UI = "/ui/"
		}
	}
	if public {
		rt.Endpoints.Ingest = ingest.Paths()
		rt.Endpoints.SDK = "/sdk/inlet.js"
		if len(c.RPC.Services) > 0 {
			rt.Endpoints.RPC = "/v1/rpc/{service}"
		}
		if c.UI.Example {
			rt.Endpoints.Example = "/example/"
		}
	}
	return rt
}

// serveRoot answers GET /: a small HTML page to a browser (Accept names
// text/html ahead of application/json), else the JSON of Root. It needs
// no credentials, as /healthz: it lists what any caller can find by trying.
func (g *Gateway) serveRoot(w http.ResponseWriter, r *http.Request) {
	ops, _ := r.Context().Value(onOpsKey{}).(bool)
	rt := g.root(ops)
	h := w.Header()
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "no-store")
	if wantsHTML(r.Header.Get("Accept")) {
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		_, _ = io.WriteString(w, rootPage(rt))
		return
	}
	h.Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rt)
}

// wantsHTML reports whether accept (an Accept header) names text/html
// before application/json, at a quality above 0: browsers do, API clients
// and curl (*/*) do not.
func wantsHTML(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q <= 0 {
			continue // q=0: not acceptable
		}
		switch mt {
		case "text/html", "application/xhtml+xml":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// withOps marks r as come in on --ops-listen, for serveRoot.
func withOps(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), onOpsKey{}, true))
}

// rootHead is the root page up to its list, its style inline (the page's
// Content-Security-Policy allows nothing else).
const rootHead = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>inlet</title>
<style>
body { margin: 0 auto; max-width: 40rem; padding: 1.5rem; background: #0f1419; color: #d8dee9; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; }
a { color: #58a6ff; } a:visited { color: #bc8cff; }
h1 { font-size: 1.4rem; margin: 0 0 .2rem; } .muted { color: #9aa7b8; }
code { background: #161d26; padding: 1px 5px; border-radius: 3px; overflow-wrap: anywhere; }
li { margin: .3rem 0; }
</style>
</head>
<body>
<h1>inlet</h1>
`

// rootPage is the HTML of GET / for rt. Written with fmt and
// html.EscapeString rather than html/template, whose reflection would keep
// every exported method in the binary (10 MB, docs/container.md).
func rootPage(rt Root) string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(rootHead)
	b.WriteString(`<p class="muted">An event gateway for Kafka`)
	if rt.Version != "" {
		b.WriteString(" · " + esc(rt.Version))
	}
	b.WriteString(".</p>\n<ul>\n")
	e := rt.Endpoints
	link := func(path string) string { return `<a href="` + esc(path) + `">` }
	if e.UI != "" {
		admin := ""
		if rt.Auth {
			admin = " (admin clients)"
		}
		fmt.Fprintf(&b, "<li>%sLive events</a>: what arrives, as it arrives%s</li>\n", link(e.UI), admin)
	}
	if e.Example != "" {
		fmt.Fprintf(&b, "<li>%sThe example shop</a>: a page that sends events with inlet.js</li>\n", link(e.Example))
	}
	fmt.Fprintf(&b, "<li>%sDocumentation</a></li>\n", link(rt.Docs))
	fmt.Fprintf(&b, "<li>%s%s</a> (alive) · %s%s</a> (ready, and why not)", link(e.Health), esc(e.Health), link(e.Ready), esc(e.Ready))
	if e.Metrics != "" {
		fmt.Fprintf(&b, " · %s%s</a>", link(e.Metrics), esc(e.Metrics))
	}
	b.WriteString("</li>\n")
	if len(e.Ingest) > 0 {
		creds := ""
		if rt.Auth {
			creds = " with a client's credentials"
		}
		fmt.Fprintf(&b, "<li>Send events: <code>POST /v1/batch</code>, <code>POST /v1/track</code>%s</li>\n", creds)
	}
	if e.RPC != "" {
		fmt.Fprintf(&b, "<li>Request-reply: <code>POST %s</code></li>\n", esc(e.RPC))
	}
	b.WriteString("</ul>\n<p class=\"muted\">For programs: <code>curl -H 'Accept: application/json'</code> on this address.</p>\n</body>\n</html>\n")
	return b.String()
}
