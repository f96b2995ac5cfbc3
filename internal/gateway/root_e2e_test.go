package gateway_test

import (
	"encoding/json"
	"html"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestRoot: GET / gives a browser a small page that links the live page,
// the docs and the probes, and an API client (or curl's */*) the JSON of
// gateway.Root. It was a plain-text 404. Beside --ops-listen, the public
// listener's answer names only its own endpoints, and no version; neither
// names a broker or another address.
func TestRoot(t *testing.T) {
	brokers := testkit.Brokers(t)
	cfg := gatewaytest.Config(t, brokers, testkit.Unique(t, "root-"))
	cfg.Version = "v9.9.9 (commit 0123456789ab)"
	cfg.UI.Example = true
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()

	page := testkit.Do(t, "GET", base+"/", nil, "Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	if page.Status != 200 || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / from a browser: %s", page)
	}
	for _, want := range []string{`href="/ui/"`, `href="/example/"`, `href="/healthz"`, `href="/readyz"`, `href="` + gateway.DocsURL + `"`, "v9.9.9"} {
		if !strings.Contains(string(page.Body), want) {
			t.Errorf("the page lacks %s:\n%s", want, page.Body)
		}
	}
	for _, accept := range []string{"application/json", "*/*", ""} {
		r := testkit.Do(t, "GET", base+"/", nil, "Accept", accept)
		var rt gateway.Root
		if err := json.Unmarshal(r.Body, &rt); r.Status != 200 || err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET / with Accept %q: %s (%v)", accept, r, err)
		}
		e := rt.Endpoints
		if rt.Version != cfg.Version || e.UI != "/ui/" || e.Example != "/example/" || e.Ready != "/readyz" || len(e.Ingest) == 0 || rt.Auth {
			t.Errorf("GET / JSON: %s", r.Body)
		}
		if strings.Contains(string(r.Body), brokers[0]) {
			t.Errorf("GET / names the brokers: %s", r.Body)
		}
	}
	if r := testkit.Do(t, "GET", base+"/nothing", nil); r.Status != 404 {
		t.Errorf("GET /nothing: %s, want 404 (only / is the root)", r)
	}

	cfg = gatewaytest.Config(t, brokers, testkit.Unique(t, "root-"))
	cfg.Version = "v9.9.9"
	cfg.OpsListen = "127.0.0.1:0"
	g = gatewaytest.Start(t, cfg)
	var pub, ops gateway.Root
	for addr, rt := range map[string]*gateway.Root{g.Addr(): &pub, g.OpsAddr(): &ops} {
		r := testkit.Do(t, "GET", "http://"+addr+"/", nil, "Accept", "application/json")
		if err := json.Unmarshal(r.Body, rt); r.Status != 200 || err != nil {
			t.Fatalf("GET / on %s: %s", addr, r)
		}
	}
	if pub.Version != "" || pub.Endpoints.UI != "" || pub.Endpoints.Metrics != "" || len(pub.Endpoints.Ingest) == 0 {
		t.Errorf("public listener beside --ops-listen: %+v; want ingest, no version, no /ui/ or /metrics", pub)
	}
	if ops.Version != "v9.9.9" || ops.Endpoints.UI != "/ui/" || ops.Endpoints.Metrics != "/metrics" || len(ops.Endpoints.Ingest) != 0 {
		t.Errorf("--ops-listen: %+v; want the version, /ui/ and /metrics, no ingest", ops)
	}
}

// TestLivePageCurl: the command the live page shows to send one event,
// run as shown (with curl), gets 200. It got 415: curl -d sends a form's
// content type, which inlet does not read as JSON.
func TestLivePageCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	cfg := gatewaytest.Config(t, testkit.Brokers(t), testkit.Unique(t, "curl-"))
	g := gatewaytest.Start(t, cfg)
	base := "http://" + g.Addr()
	page := testkit.Do(t, "GET", base+"/ui/", nil)
	m := regexp.MustCompile(`(?s)<code id="send-one">(.*?)</code>`).FindSubmatch(page.Body)
	if m == nil {
		t.Fatalf("the live page shows no command to send one:\n%s", page.Body)
	}
	cmd := string(m[1])
	// As the page shows it without --auth: the credentials hidden, the
	// page's origin filled in (live.js), the tags gone.
	cmd = regexp.MustCompile(`<span id="send-auth" hidden>.*?</span>`).ReplaceAllString(cmd, "")
	cmd = strings.ReplaceAll(cmd, `<span class="origin"></span>`, base)
	cmd = html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(cmd, ""))
	if !strings.HasPrefix(cmd, "curl ") {
		t.Fatalf("command %q", cmd)
	}
	out, err := exec.Command("sh", "-c", curl+cmd[len("curl"):]+" -sS -o /dev/stderr -w '%{http_code}'").CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "200") {
		t.Fatalf("%s\n=> %s (%v); want 200", cmd, out, err)
	}
}
