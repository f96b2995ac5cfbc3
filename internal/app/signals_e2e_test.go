package app

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// served is `inlet serve` on a free port, run by a test.
type served struct {
	*testkit.Process
	addr string
}

// serveBinary starts `inlet serve` on a free port with args (its log into
// stderr when not nil) and waits until it listens.
func serveBinary(t *testing.T, stderr io.Writer, args ...string) *served {
	t.Helper()
	addr := testkit.FreeAddr(t)
	p := testkit.Start(t, stderr, append([]string{"serve", "--listen", addr, "--data-dir", t.TempDir()}, args...)...)
	testkit.WaitListening(t, addr, 20*time.Second)
	return &served{Process: p, addr: addr}
}

func (s *served) post(t *testing.T, n int, name string) {
	t.Helper()
	for i := range n {
		r := testkit.Do(t, "POST", "http://"+s.addr+"/v1/batch", testkit.Batch(5, fmt.Sprintf("%s%d-", name, i), testkit.JSONArray), "Content-Type", "application/json")
		if r.Status/100 != 2 {
			t.Fatalf("batch %d: %s", i, r)
		}
	}
}

// TestSIGHUPStopsGracefully: SIGHUP (a closing terminal, a supervisor) stops
// inlet like SIGTERM: with --ack none the events it buffered are flushed to
// Kafka, and it exits 0. It used to kill the process and lose them.
func TestSIGHUPStopsGracefully(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	brokers, topic := testkit.Brokers(t), testkit.Unique(t, "t-")
	s := serveBinary(t, nil, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--ack", "none",
		"--linger", "3s", "--compression", "none") // the events wait in memory when the signal comes
	s.post(t, 8, "hup")
	if err := s.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := s.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGHUP, want 0", code)
	}
	testkit.ConsumeN(t, brokers, topic, 40, time.Second)
}

// TestSIGHUPReloads: with files inlet reads while it runs (here --clients,
// polled only every hour), SIGHUP reads them at once rather than stopping:
// a client added to the file is taken right after the signal; SIGTERM still
// stops inlet with 0.
func TestSIGHUPReloads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	clients := filepath.Join(t.TempDir(), "clients.json")
	if _, err := auth.AddClient(clients, auth.Client{ID: "first"}); err != nil {
		t.Fatal(err)
	}
	// --ack spool takes events with Kafka unreachable: no broker needed.
	s := serveBinary(t, nil, "--brokers", testkit.FreeAddr(t), "--clients", clients, "--auth",
		"--clients-reload-interval", "1h", "--shutdown-timeout", "3s")
	secret, err := auth.AddClient(clients, auth.Client{ID: "second"})
	if err != nil {
		t.Fatal(err)
	}
	post := func() testkit.Response {
		return testkit.Do(t, "POST", "http://"+s.addr+"/v1/batch", []byte(`[{"event":"hup"}]`), "Content-Type", "application/json",
			"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("second:"+secret)))
	}
	if r := post(); r.Status != http.StatusUnauthorized {
		t.Fatalf("a client added to the file, before SIGHUP: %s, want 401", r)
	}
	if err := s.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the client added taken after SIGHUP", func() bool { return post().Status == http.StatusOK })
	if !strings.Contains(s.Logs.String(), ": reloading") {
		t.Errorf("no \"reloading\" in the log:\n%s", s.Logs)
	}
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, s.Logs)
	}
}

// TestSecondSignalExitsAtOnce: a shutdown that waits for Kafka (here
// unreachable, with events buffered and a long --shutdown-timeout) is cut
// short by a second SIGTERM: exit at once with 128+15.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	s := serveBinary(t, nil, "--brokers", testkit.FreeAddr(t), "--ack", "none", "--shutdown-timeout", "60s")
	s.post(t, 2, "stuck")
	s.Cmd.Process.Signal(syscall.SIGTERM)
	testkit.WaitFor(t, 10*time.Second, "the first signal is taken", func() bool { return strings.Contains(s.Logs.String(), "stopping gracefully") })
	start := time.Now()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if code := s.Wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d after a second SIGTERM, want %d", code, 128+int(syscall.SIGTERM))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the second signal took %v to end inlet, want at once", took)
	}
}

// TestShutdownDelay: with --shutdown-delay, SIGTERM turns /readyz 503
// while events are still acknowledged; a second SIGTERM skips the rest of the delay, and inlet then
// stops gracefully (exit 0, every acknowledged event in Kafka) instead of
// exiting at once.
func TestShutdownDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	brokers, topic := testkit.Brokers(t), testkit.Unique(t, "t-")
	s := serveBinary(t, nil, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--ack", "kafka", "--shutdown-delay", "5m")
	testkit.WaitReady(t, "http://"+s.addr, 30*time.Second)
	s.post(t, 2, "before")
	s.Cmd.Process.Signal(syscall.SIGTERM)
	testkit.WaitFor(t, 10*time.Second, "the drain starts", func() bool { return strings.Contains(s.Logs.String(), "draining: /readyz answers 503") })
	if r := testkit.Do(t, "GET", "http://"+s.addr+"/readyz", nil); r.Status != 503 || !strings.Contains(string(r.Body), `"shutting down"`) {
		t.Fatalf("/readyz during the delay: %s, want 503 shutting down", r)
	}
	r := testkit.Do(t, "POST", "http://"+s.addr+"/v1/batch", testkit.Batch(5, "during-", testkit.JSONArray), "Content-Type", "application/json")
	if r.Status != 200 {
		t.Fatalf("a batch during the delay: %s, want 200", r)
	}
	start := time.Now()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if code := s.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after a second SIGTERM during the delay, want 0 (a graceful stop)", code)
	}
	if !strings.Contains(s.Logs.String(), "skipping the rest of --shutdown-delay") || !strings.Contains(s.Logs.String(), "msg=stopped") {
		t.Fatalf("no skipped delay and clean stop in the log (after %v):\n%s", time.Since(start), s.Logs)
	}
	testkit.ConsumeN(t, brokers, topic, 15, time.Second)
}

// TestClosedLogPipe: when whatever reads inlet's log goes away, writing the
// log fails but inlet keeps serving and stops cleanly (it used to die of
// SIGPIPE at its next log line).
func TestClosedLogPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	brokers, topic := testkit.Brokers(t), testkit.Unique(t, "t-")
	pr, pw, err := os.Pipe() // an OS pipe, as a shell's `inlet serve 2>&1 | logger` has
	if err != nil {
		t.Fatal(err)
	}
	s := serveBinary(t, pw, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--ack", "kafka", "--log-level", "debug")
	pw.Close() // the child has its own copy
	// Read until it serves, then stop reading: the pipe's read end closes.
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.Contains(sc.Text(), "msg=serving") {
	}
	pr.Close()
	s.post(t, 3, "pipe")
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if code := s.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d with its log pipe closed, want 0", code)
	}
	testkit.ConsumeN(t, brokers, topic, 15, time.Second)
}

// TestSlowUploaderDoesNotFailShutdown: an upload that never ends takes the
// HTTP drain's share of --shutdown-timeout and is then cut (it was not
// acknowledged); the flush still gets its share, everything acknowledged
// is in Kafka, and inlet exits 0. It used to spend the whole budget on the
// upload and exit 1.
func TestSlowUploaderDoesNotFailShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	brokers, topic := testkit.Brokers(t), testkit.Unique(t, "t-")
	s := serveBinary(t, nil, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--ack", "kafka",
		"--shutdown-timeout", "6s", "--read-timeout", "5m")
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[{\"event\":")
	s.post(t, 4, "slow")
	start := time.Now()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	if code := s.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after %v with a slow upload in flight, want 0", code, time.Since(start))
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("shutdown took %v, beyond its 6 s budget", took)
	}
	testkit.ConsumeN(t, brokers, topic, 20, time.Second)
}
