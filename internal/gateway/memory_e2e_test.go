package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestHeldBodiesMemory runs inlet serve and opens 1,000 connections that
// each announce a 1 MiB body on a path that is not ingest's (one that does
// not exist, and request-reply's), send all of it but its last KiB, and
// then trickle it a byte a second. The server's RSS stays under
// --max-inflight-bytes plus 100 MB, and ingest answers 200 meanwhile
// (checked on the path that does not exist; while request-reply uploads
// stall, ingest's own share of the budget is another change's, issue 27
// item 2, and is only logged here).
// Finding 2 of issue 27: the fasthttp front read up to 1 MiB of such a
// body outside the budget before handing the connection to net/http, 1.21
// GB with 1,000 connections.
func TestHeldBodiesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 connections of 1 MiB each: not in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads the server's RSS from /proc")
	}
	brokers := testkit.Brokers(t)
	for _, path := range []string{"/no-such-path", "/v1/rpc/held"} {
		t.Run(path, func(t *testing.T) {
			const budget = 64 << 20
			addr := testkit.FreeAddr(t)
			p := testkit.Start(t, nil, "serve", "--listen", addr, "--brokers", strings.Join(brokers, ","),
				"--topic", testkit.Unique(t, "held-"), "--data-dir", t.TempDir(), "--ack", "kafka",
				"--max-inflight-bytes", strconv.Itoa(budget), "--rpc-services", "*", "--log-level", "warn")
			base := "http://" + addr
			testkit.WaitReady(t, base, 60*time.Second)
			pid := p.Cmd.Process.Pid
			idle := procKB(t, pid, "VmRSS")

			const conns, size = 1000, 1 << 20
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var opened atomic.Int64
			body := make([]byte, size-1<<10)
			for range conns {
				wg.Go(func() {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						return
					}
					defer c.Close()
					opened.Add(1)
					_ = c.SetWriteDeadline(time.Now().Add(60 * time.Second))
					if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, size); err != nil {
						return
					}
					if _, err := c.Write(body); err != nil {
						return
					}
					tick := time.NewTicker(time.Second)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := c.Write([]byte{' '}); err != nil {
								return
							}
						}
					}
				})
			}
			defer func() { close(stop); wg.Wait() }()

			// While they are held: RSS sampled, ingest asked.
			limit := int64(budget>>10 + 100<<10) // KiB
			var peak int64
			var answers []int
			end := time.Now().Add(15 * time.Second)
			for time.Now().Before(end) {
				peak = max(peak, procKB(t, pid, "VmRSS"))
				if len(answers) < 10 {
					answers = append(answers, ingestStatus(t, base))
				}
				time.Sleep(250 * time.Millisecond)
			}
			peak = max(peak, procKB(t, pid, "VmHWM"))
			t.Logf("%d connections opened; RSS idle %d MB, peak %d MB; ingest answered %v", opened.Load(), idle>>10, peak>>10, answers)
			if peak > limit {
				t.Errorf("peak RSS %d MB, over --max-inflight-bytes plus 100 MB (%d MB)", peak>>10, limit>>10)
			}
			for _, s := range answers {
				if s != http.StatusOK {
					t.Errorf("ingest answered %v while the bodies were held, want 200 each", answers)
					break
				}
			}
		})
	}
}

// ingestStatus posts one event to base and returns the status (0: no answer).
func ingestStatus(t *testing.T, base string) int {
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Post(base+"/v1/batch", "application/json", strings.NewReader(`[{"event":"probe"}]`))
	if err != nil {
		t.Logf("ingest: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// procKB returns field (VmRSS, VmHWM) of /proc/pid/status, in KiB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
