package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestKafkaSecurity runs inlet serve (--ack kafka and --ack spool), tail,
// worker and verify against a 3-node cluster of the test's own over
// SASL_SSL with SCRAM-SHA-512 and over mTLS, then with a wrong password,
// an unknown CA and an expired client certificate: the one-shot commands
// fail at start with one line naming the cause, serve starts and its
// /readyz answers 503 naming it. No log line of any run, nor /metrics,
// holds a password. One cluster for all (it takes 30-80 s to start).
func TestKafkaSecurity(t *testing.T) {
	c := testkit.Cluster(t)
	wrong := "wrong-" + c.ScramPassword
	secrets := []string{c.ScramPassword, wrong}
	a := &secAudit{}
	t.Cleanup(func() { a.check(t, secrets) })

	scram := func(pass string) []string {
		return []string{"--brokers", strings.Join(c.SASLSSL, ","), "--kafka-tls-ca", c.CAFile,
			"--kafka-sasl", "scram-sha-512", "--kafka-sasl-user", c.ScramUser, "--kafka-sasl-password", pass}
	}
	mtls := func(ca, cert, key string) []string {
		return []string{"--brokers", strings.Join(c.SSL, ","), "--kafka-tls-ca", ca, "--kafka-tls-cert", cert, "--kafka-tls-key", key}
	}

	t.Run("SASL_SSL SCRAM-SHA-512", func(t *testing.T) { secureRoundTrip(t, a, c, scram(c.ScramPassword)) })
	t.Run("mTLS", func(t *testing.T) { secureRoundTrip(t, a, c, mtls(c.CAFile, c.ClientCert, c.ClientKey)) })

	for _, tc := range []struct {
		name string
		args []string
		want string // in every command's error and in /readyz
	}{
		{"wrong password", scram(wrong), `SASL authentication failed for user "` + c.ScramUser + `" with SCRAM-SHA-512: wrong user or password`},
		{"unknown CA", append(scram(c.ScramPassword)[:2:2], "--kafka-tls-ca", c.OtherCAFile, "--kafka-sasl", "scram-sha-512",
			"--kafka-sasl-user", c.ScramUser, "--kafka-sasl-password", c.ScramPassword), "the brokers' certificate is not signed by --kafka-tls-ca " + c.OtherCAFile},
		{"expired client certificate", mtls(c.CAFile, c.ExpiredCert, c.ExpiredKey), "--kafka-tls-cert " + c.ExpiredCert + " expired on 2020-"},
	} {
		t.Run(tc.name, func(t *testing.T) { secureFailure(t, a, tc.args, tc.want) })
	}
}

// secAudit collects the output of every process a test ran, to look for
// secrets in it.
type secAudit struct {
	mu   sync.Mutex
	outs []func() string
	what []string
}

func (a *secAudit) add(what string, out func() string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outs, a.what = append(a.outs, out), append(a.what, what)
}

// start runs `inlet args...` and keeps its output for check.
func (a *secAudit) start(t *testing.T, args ...string) *testkit.Process {
	t.Helper()
	p := testkit.Start(t, nil, args...)
	a.add(t.Name()+" inlet "+args[0], p.Logs.String)
	return p
}

// check fails the test if any output holds one of secrets.
func (a *secAudit) check(t *testing.T, secrets []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.outs) == 0 && !t.Skipped() {
		t.Error("no output audited")
	}
	for i, out := range a.outs {
		o := out()
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("%s: the output holds a password:\n%s", a.what[i], o)
			}
		}
	}
}

// secureServe starts `inlet serve` with the Kafka args and mode, debug
// logs (kgo's included) audited, and returns its base URL.
func secureServe(t *testing.T, a *secAudit, kafkaArgs []string, extra ...string) (string, *testkit.Process) {
	t.Helper()
	addr := testkit.FreeAddr(t)
	args := append([]string{"serve", "--listen", addr, "--data-dir", t.TempDir(), "--log-level", "debug"}, kafkaArgs...)
	p := a.start(t, append(args, extra...)...)
	testkit.WaitListening(t, addr, 30*time.Second)
	base := "http://" + addr
	t.Cleanup(func() { // /metrics is audited too
		r, err := http.Get(base + "/metrics")
		if err != nil {
			return
		}
		defer r.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, r.Header)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		s := b.String()
		a.add(t.Name()+" /metrics", func() string { return s })
	})
	return base, p
}

// run runs a one-shot command to its end and returns its exit code and
// output.
func (a *secAudit) run(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	p := a.start(t, args...)
	code := p.Wait(t, timeout)
	return code, p.Logs.String()
}

// secureRoundTrip: serve in both modes, tail, verify and a worker behind
// serve's request-reply, all with kafkaArgs.
func secureRoundTrip(t *testing.T, a *secAudit, c *testkit.KafkaCluster, kafkaArgs []string) {
	for _, ack := range []string{"kafka", "spool"} {
		t.Run("ack "+ack, func(t *testing.T) {
			topic := testkit.Unique(t, "sec-")
			service := testkit.Unique(t, "svc-")
			base, _ := secureServe(t, a, kafkaArgs, "--ack", ack, "--topic", topic, "--rpc-services", service)
			testkit.WaitReady(t, base, 60*time.Second)
			for i := range 4 {
				r := testkit.Do(t, "POST", base+"/v1/batch", testkit.Batch(5, fmt.Sprintf("s%d-", i), testkit.JSONArray), "Content-Type", "application/json")
				if r.Status != http.StatusOK {
					t.Fatalf("batch %d: %s", i, r)
				}
			}
			// tail reads them back over the same listener.
			code, out := a.run(t, 90*time.Second, append([]string{"tail", "--topic", topic, "--from", "beginning", "-n", "20", "--idle", "60s"}, kafkaArgs...)...)
			if n := strings.Count(out, `"topic":"`+topic+`"`); code != 0 || n != 20 {
				t.Fatalf("tail: exit %d, %d records, want 0 and 20:\n%s", code, n, out)
			}
			// verify: sent through serve, read back with the security args.
			code, out = a.run(t, 120*time.Second, append([]string{"verify", "--target", base, "--topic", topic, "--events", "300", "--batch", "10", "--settle", "20s"}, kafkaArgs...)...)
			if code != 0 || !strings.Contains(out, `"lost": 0`) || !strings.Contains(out, `"acknowledged": 300`) {
				t.Fatalf("verify: exit %d:\n%s", code, out)
			}
			// A worker answers the request-reply calls serve sends.
			w := a.start(t, append([]string{"worker", "--service", service, "--echo", "--log-level", "debug"}, kafkaArgs...)...)
			var last testkit.Response
			testkit.WaitFor(t, 60*time.Second, "a call answered by the worker", func() bool {
				last = testkit.Do(t, "POST", base+"/v1/rpc/"+service, []byte(`{"ping":1}`), "Content-Type", "application/json", "Inlet-Timeout", "3s")
				return last.Status == http.StatusOK
			})
			if string(last.Body) != `{"ping":1}` {
				t.Fatalf("call answered %s, want the echo", last)
			}
			if strings.Contains(w.Logs.String(), "level=ERROR") {
				t.Fatalf("worker logged errors:\n%s", w.Logs)
			}
			// And the events are in the cluster (read over plaintext).
			testkit.ConsumeN(t, c.Plaintext, topic, 20+300, 2*time.Second)
		})
	}
}

// secureFailure: tail, verify and worker fail at start with one line
// naming want; serve starts in both modes, takes events into the spool,
// and /readyz answers 503 naming want.
func secureFailure(t *testing.T, a *secAudit, kafkaArgs []string, want string) {
	topic := testkit.Unique(t, "secf-")
	for _, cmd := range [][]string{
		{"tail", "--topic", topic},
		{"verify", "--target", "http://127.0.0.1:1", "--topic", topic, "--events", "1"},
		{"worker", "--service", "s", "--echo"},
	} {
		code, out := a.run(t, 60*time.Second, append(cmd, kafkaArgs...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if code == 0 || !strings.HasPrefix(last, "inlet") || !strings.Contains(last, want) {
			t.Errorf("inlet %s: exit %d, last line %q, want a failure naming %q; output:\n%s", cmd[0], code, last, want, out)
		}
		if cmd[0] != "worker" && len(lines) != 1 {
			t.Errorf("inlet %s: %d lines, want one:\n%s", cmd[0], len(lines), out)
		}
	}
	for _, ack := range []string{"spool", "kafka"} {
		t.Run("serve ack "+ack, func(t *testing.T) {
			base, p := secureServe(t, a, kafkaArgs, "--ack", ack, "--topic", topic)
			var rd struct {
				Ready bool   `json:"ready"`
				Error string `json:"error"`
				Kafka string `json:"kafka"`
			}
			var last testkit.Response
			testkit.WaitFor(t, 60*time.Second, "/readyz 503 naming the cause", func() bool {
				last = testkit.Do(t, "GET", base+"/readyz", nil)
				return last.Status == http.StatusServiceUnavailable && json.Unmarshal(last.Body, &rd) == nil && strings.Contains(rd.Error, want)
			})
			if rd.Ready || strings.Contains(rd.Error, "\n") {
				t.Fatalf("/readyz %s", last)
			}
			r := testkit.Do(t, "POST", base+"/v1/batch", testkit.Batch(3, "f-", testkit.JSONArray), "Content-Type", "application/json")
			switch {
			case ack == "spool" && r.Status != http.StatusOK:
				t.Fatalf("--ack spool refused events with kafka misconfigured: %s", r)
			case ack == "kafka" && r.Status/100 == 2:
				t.Fatalf("--ack kafka acknowledged events kafka refused: %s", r)
			}
			if l := p.Logs.String(); !strings.Contains(l, "not ready: kafka refuses this gateway's TLS or SASL settings") || !strings.Contains(strings.ReplaceAll(l, `\"`, `"`), want) {
				t.Fatalf("serve did not log the cause %q:\n%s", want, p.Logs)
			}
		})
	}
}

// TestKafkaSecretNotPrinted: the SASL password, from a flag, from
// INLET_KAFKA_SASL_PASSWORD or from a file, is not in the log of a serve
// run (debug level, Kafka unreachable, then stopped), nor in /readyz,
// /metrics, an error or the help text of any command. No cluster needed.
func TestKafkaSecretNotPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	const secret = "s3cr3t-Pa55word-Never-Printed"
	a := &secAudit{}
	defer a.check(t, []string{secret})
	brokers := testkit.FreeAddr(t)
	sasl := []string{"--brokers", brokers, "--kafka-sasl", "scram-sha-512", "--kafka-sasl-user", "u"}

	// A serve run with the password as a flag.
	base, p := secureServe(t, a, append(sasl, "--kafka-sasl-password", secret), "--ack", "spool", "--topic", "t", "--shutdown-timeout", "2s")
	for _, path := range []string{"/readyz", "/metrics", "/healthz"} {
		r := testkit.Do(t, "GET", base+path, nil)
		a.add(path, func() string { return string(r.Body) })
	}
	r := testkit.Do(t, "POST", base+"/v1/batch", testkit.Batch(3, "x-", testkit.JSONArray), "Content-Type", "application/json")
	if r.Status != http.StatusOK {
		t.Fatalf("batch: %s", r)
	}
	testkit.WaitFor(t, 20*time.Second, "the forwarder tried kafka", func() bool { return strings.Contains(p.Logs.String(), "unable to open connection") })
	if !strings.Contains(p.Logs.String(), "password=REDACTED") {
		t.Fatalf("the serving line does not say the password is set (redacted):\n%s", p.Logs)
	}
	p.Signal(t, syscall.SIGTERM)
	p.Wait(t, 30*time.Second)

	// From the environment and a file, in help texts and errors.
	t.Setenv("INLET_KAFKA_SASL_PASSWORD", secret)
	for _, cmd := range []string{"serve", "tail", "verify", "worker", "ship", "bench kafka"} {
		args := append(strings.Fields(cmd), "-h")
		code, out := a.run(t, 20*time.Second, args...)
		if code != 0 || !strings.Contains(out, "-kafka-sasl-password-file") || !strings.Contains(out, "-kafka-tls-ca") {
			t.Errorf("inlet %s -h: exit %d, want 0 and the --kafka-* flags:\n%s", cmd, code, out)
		}
	}
	// Two passwords: an error that names both flags, not the value.
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"tail", "--topic", "t"}, {"verify", "--topic", "t"}, {"worker", "--service", "s", "--echo"}, {"serve"}, {"ship", "--topic", "t"}} {
		code, out := a.run(t, 20*time.Second, append(append(cmd, sasl...), "--kafka-sasl-password-file", file)...)
		if code == 0 || !strings.Contains(out, "give --kafka-sasl-password or --kafka-sasl-password-file, not both") {
			t.Errorf("inlet %s with both passwords: exit %d:\n%s", cmd[0], code, out)
		}
	}
}
