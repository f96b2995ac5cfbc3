package app

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/internal/verify"
)

// runVerifyMain runs `inlet verify args...` and decodes the report it
// printed, if any.
func runVerifyMain(t *testing.T, args ...string) (code int, rep verify.Report, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = Main(ctx, append([]string{"verify"}, args...), env)
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("verify printed no JSON report: %v\n%s", err, out.String())
		}
	}
	return code, rep, errb.String()
}

// TestVerify runs the checker against a healthy gateway: everything sent is
// acknowledged and delivered, once.
func TestVerify(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	cfg.DataDir = t.TempDir()
	g := gatewaytest.Start(t, cfg)
	common := []string{"--target", "http://" + g.Addr(), "--brokers", strings.Join(brokers, ","), "--topic", topic,
		"--settle", "10s"}

	t.Run("events", func(t *testing.T) {
		code, rep, stderr := runVerifyMain(t, append(common, "--events", "2000", "--batch", "5", "--concurrency", "8",
			"--run", "vtest-events")...)
		if code != 0 {
			t.Fatalf("exit %d, report %+v\n%s", code, rep, stderr)
		}
		if rep.Run != "vtest-events" || rep.Sent != 2000 || rep.Acknowledged != 2000 || rep.Delivered != 2000 ||
			rep.Lost != 0 || rep.Duplicates != 0 || rep.DeliveredUnacknowledged != 0 || rep.Status["200"] != 400 {
			t.Errorf("report %+v, want 2000 sent, acknowledged and delivered in 400 requests answered 200", rep)
		}
		if rep.Target != "http://"+g.Addr() || rep.Topic != topic {
			t.Errorf("report names target %q, topic %q", rep.Target, rep.Topic)
		}
		if !strings.Contains(stderr, "run vtest-events: sending 2000 events") {
			t.Errorf("no progress on stderr:\n%s", stderr)
		}
	})
	// The topic now holds the first run: the second one reads past it.
	t.Run("duration", func(t *testing.T) {
		code, rep, stderr := runVerifyMain(t, append(common, "--duration", "1s", "--rate", "400", "--batch", "4")...)
		if code != 0 {
			t.Fatalf("exit %d, report %+v\n%s", code, rep, stderr)
		}
		// At most rate × duration; how many fewer depends on the machine's
		// load (a loaded CI machine sent 196), which is not what this checks.
		if rep.Sent == 0 || rep.Sent > 400 || rep.Acknowledged != rep.Sent || rep.Delivered != rep.Sent || rep.Lost != 0 {
			t.Errorf("report %+v, want at most 400 sent, all acknowledged and delivered", rep)
		}
		if !strings.HasPrefix(rep.Run, "v") || rep.Run == "vtest-events" {
			t.Errorf("run id %q: want a new one", rep.Run)
		}
	})
}

// TestVerifyCatchesLoss: a gateway that acknowledges (ack=none, 202) but
// cannot reach its Kafka loses everything; verify must say so and exit 1.
func TestVerifyCatchesLoss(t *testing.T) {
	brokers := testkit.Brokers(t) // where verify looks for the events
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, topic)
	cfg.Ack = gateway.AckNone
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = time.Second // nothing can be flushed anyway
	g := gatewaytest.Start(t, cfg)

	start := time.Now()
	code, rep, stderr := runVerifyMain(t, "--target", "http://"+g.Addr(), "--brokers", strings.Join(brokers, ","),
		"--topic", topic, "--events", "200", "--settle", "1s", "--run", "vloss")
	if code != 1 {
		t.Fatalf("exit %d, want 1; report %+v\n%s", code, rep, stderr)
	}
	if rep.Sent != 200 || rep.Acknowledged != 200 || rep.Delivered != 0 || rep.Lost != 200 || rep.Status["202"] != 40 {
		t.Errorf("report %+v, want 200 acknowledged with 202 and all lost", rep)
	}
	if len(rep.LostIDs) != verify.MaxLostIDs || rep.LostIDs[0] != "vloss-0" || rep.LostIDs[19] != "vloss-19" {
		t.Errorf("lost ids %q, want vloss-0 ... vloss-19", rep.LostIDs)
	}
	if !strings.Contains(stderr, "verify: 200 acknowledged events lost") {
		t.Errorf("stderr lacks the verdict:\n%s", stderr)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("verify took %v with --settle 1s", d)
	}
}

// TestVerifyNothingAcknowledged: a target that answers nothing is not a pass.
func TestVerifyNothingAcknowledged(t *testing.T) {
	brokers := testkit.Brokers(t)
	code, rep, stderr := runVerifyMain(t, "--target", "http://"+testkit.FreeAddr(t), "--brokers", strings.Join(brokers, ","),
		"--topic", testkit.Unique(t, "t-"), "--events", "10", "--settle", "1s")
	if code != 1 || rep.Sent != 10 || rep.Acknowledged != 0 || rep.Status["refused"] != 2 ||
		!strings.Contains(stderr, "acknowledged no event") {
		t.Errorf("exit %d, report %+v, stderr:\n%s\nwant exit 1 with 2 refused requests", code, rep, stderr)
	}
}

func TestVerifyUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing to send", []string{"--events", "0"}, "nothing to send"},
		{"events and duration", []string{"--events", "5", "--duration", "1s"}, "not both"},
		{"zero batch", []string{"--batch", "0"}, "batch"},
		{"negative rate", []string{"--rate", "-1"}, "rate"},
		{"target without scheme", []string{"--target", "127.0.0.1:8080"}, "want http://host:port"},
		{"zero settle", []string{"--settle", "0s"}, "--settle"},
		{"bad run id", []string{"--run", "a b"}, "run id"},
		{"extra arg", []string{"now"}, `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runVerifyMain(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

// TestVerifyAckGap puts a proxy in front of a healthy gateway that answers
// 503 itself, without forwarding, for 1.5 s from the 20th request on: the
// report gives that gap in acknowledgements, when it began, and nothing
// lost.
func TestVerifyAckGap(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	cfg.DataDir = t.TempDir()
	g := gatewaytest.Start(t, cfg)

	const outage = 1500 * time.Millisecond
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: g.Addr()})
	var (
		mu       sync.Mutex
		requests int
		first    time.Time // the first request
		from, to time.Time // of the outage
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		if requests == 1 {
			first = time.Now()
		}
		if requests == 20 {
			from = time.Now()
			to = from.Add(outage)
		}
		down := !from.IsZero() && time.Now().Before(to)
		mu.Unlock()
		if down {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	code, rep, stderr := runVerifyMain(t, "--target", proxy.URL, "--brokers", strings.Join(brokers, ","), "--topic", topic,
		"--settle", "10s", "--duration", "4s", "--rate", "200", "--batch", "5", "--concurrency", "4")
	if code != 0 {
		t.Fatalf("exit %d, report %+v\n%s", code, rep, stderr)
	}
	mu.Lock()
	outageAfter := from.Sub(first)
	mu.Unlock()
	gap := rep.AckGaps
	longest, err := time.ParseDuration(gap.Longest)
	if err != nil {
		t.Fatalf("ack_gaps.longest %q: %v", gap.Longest, err)
	}
	after, _ := time.ParseDuration(gap.LongestAfter)
	// The gap holds the outage: it starts with the last 2xx before it
	// (requests arrive every 25 ms) and ends with the first 2xx after it.
	// That last 2xx may be recorded after the outage began (4 requests in
	// flight; on a loaded machine an answer takes longer than 25 ms), so
	// the gap may be a little shorter than the outage (it was 1.499 s once).
	// longest_s and longest are both rounded to the millisecond; as
	// floats they may differ in the last bit.
	if longest < outage-250*time.Millisecond || longest > outage+time.Second || gap.AtLeast1s != 1 || math.Abs(gap.LongestSeconds-longest.Seconds()) > 1e-9 {
		t.Errorf("ack gaps %+v, want one of %v to %v\n%s", gap, outage-250*time.Millisecond, outage+time.Second, stderr)
	}
	if after > outageAfter+200*time.Millisecond || after < outageAfter-time.Second || gap.LongestStart.IsZero() {
		t.Errorf("the longest gap began %v after the start (at %v), the outage %v after the first request", after, gap.LongestStart, outageAfter)
	}
	if rep.Lost != 0 || rep.Status["503"] == 0 || rep.Acknowledged == 0 {
		t.Errorf("report %+v, want some 503s, the rest acknowledged, nothing lost", rep)
	}
	if want := "longest time without a 2xx answer " + gap.Longest; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

// TestVerifyHTTPS checks a gateway serving HTTPS with a test CA's
// certificate: with --tls-ca the check passes; without it, with another CA,
// or with a CA file missing or not PEM, verify fails before sending, in one
// line that says why; --tls-insecure-skip-verify passes with a warning.
func TestVerifyHTTPS(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	ca, other := testkit.NewCA(t), testkit.NewCA(t)
	dir := t.TempDir()
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	cfg.DataDir = t.TempDir()
	cfg.TLSCert, cfg.TLSKey = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cfg.TLSListen = "127.0.0.1:0"
	ca.ServerCert(t, cfg.TLSCert, cfg.TLSKey, "gateway", time.Time{}, time.Time{})
	g := gatewaytest.Start(t, cfg)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	target := "https://" + g.TLSAddr()
	common := []string{"--target", target, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--settle", "10s", "--events", "100"}

	for _, tt := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"the gateway's CA", []string{"--tls-ca", ca.File}, "delivered 100, lost 0"},
		{"insecure", []string{"--tls-insecure-skip-verify"}, "warning: --tls-insecure-skip-verify: the certificate of " + target + " is not checked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, rep, stderr := runVerifyMain(t, append(common, tt.args...)...)
			if code != 0 || rep.Acknowledged != 100 || rep.Lost != 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, report %+v; want 0, 100 acknowledged, none lost, and %q in stderr:\n%s", code, rep, tt.want, stderr)
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		want string // the one line of stderr after the progress
	}{
		{"no CA", nil, "verify: " + target + ": the gateway's certificate is not signed by a CA this system trusts: give its CA with --tls-ca"},
		{"another CA", []string{"--tls-ca", other.File}, "verify: " + target + ": the gateway's certificate is not signed by --tls-ca " + other.File},
		{"CA missing", []string{"--tls-ca", missing}, "verify: --tls-ca: open " + missing + ": no such file or directory"},
		{"CA not PEM", []string{"--tls-ca", notPEM}, "verify: --tls-ca " + notPEM + " holds no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, rep, stderr := runVerifyMain(t, append(common, tt.args...)...)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != 1 || rep.Sent != 0 || !strings.HasSuffix(lines[len(lines)-1], tt.want) {
				t.Errorf("exit %d, sent %d; want 1, nothing sent, and stderr ending in\n%s\ngot:\n%s", code, rep.Sent, tt.want, stderr)
			}
		})
	}
	t.Run("CA for http", func(t *testing.T) {
		code, _, stderr := runVerifyMain(t, "--target", "http://"+g.Addr(), "--tls-ca", ca.File)
		if code != 2 || !strings.Contains(stderr, "are for an https:// target") {
			t.Errorf("exit %d, stderr %q; want 2 and a usage error", code, stderr)
		}
	})
}
