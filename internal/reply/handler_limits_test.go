package reply

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// rawRequest sends head (a request line and headers, without the blank
// line) and then body over a new TCP connection to srv, and returns the
// connection and a reader of what the server answers.
func rawRequest(tb testing.TB, srv *httptest.Server, head, body string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n\r\n"); err != nil {
		tb.Fatal(err)
	}
	// The server may refuse the body while it is on its way.
	_, _ = io.WriteString(conn, body)
	return conn, bufio.NewReader(conn)
}

// statusLine reads the next status line within 5 s.
func statusLine(tb testing.TB, conn net.Conn, br *bufio.Reader) string {
	tb.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil {
		tb.Fatalf("reading a status line: %v (read %q)", err, line)
	}
	return strings.TrimSpace(line)
}

// TestHandlerRefusesBeforeContinue: a Content-Length past the limit, or past
// what the body budget can take, is answered before the body is asked for:
// no "100 Continue" (it was sent, and the client uploaded its huge body),
// and a call within the limits still gets one.
func TestHandlerRefusesBeforeContinue(t *testing.T) {
	t.Parallel()
	budget := membudget.New(1 << 20)
	f := newFixture(t, func(c *Config) { c.MaxBodyBytes, c.Budget = 1<<20, budget })
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close) // after the connections close
	head := func(length int64) string {
		return fmt.Sprintf("POST /v1/rpc/billing HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nExpect: 100-continue", length)
	}

	conn, br := rawRequest(t, srv, head(1<<40), "")
	if got := statusLine(t, conn, br); got != "HTTP/1.1 413 Request Entity Too Large" {
		t.Errorf("Content-Length 1 TiB with Expect: 100-continue answered %q, want 413 at once", got)
	}

	// The budget cannot take a body of the limit while another holds half
	// of it: 503, before the body is asked for. (It gets a 100 Continue if it
	// is read anyway.)
	if !budget.Take(1 << 19) {
		t.Fatal("the budget is taken")
	}
	conn, br = rawRequest(t, srv, head(1<<20), "")
	if got := statusLine(t, conn, br); got != "HTTP/1.1 503 Service Unavailable" {
		t.Errorf("a body the budget cannot take answered %q first, want 503", got)
	}
	budget.Release(1 << 19)

	conn, br = rawRequest(t, srv, head(5), "")
	if got := statusLine(t, conn, br); got != "HTTP/1.1 100 Continue" {
		t.Fatalf("a call within the limits answered %q, want 100 Continue", got)
	}
	io.WriteString(conn, "hello")
	statusLine(t, conn, br) // the blank line after 100 Continue
	if got := statusLine(t, conn, br); got != "HTTP/1.1 200 OK" {
		t.Errorf("then %q, want 200", got)
	}
	if n := budget.Used(); n != 0 {
		t.Errorf("%d bytes of the budget still taken after the calls", n)
	}
}

// TestHandlerBodyBudget: request bodies are charged to the budget as they
// arrive; uploads that stall mid-body hold what they sent, and once the
// budget is full the next ones are answered 503 at once, while the memory
// charged never goes past the budget. A small call goes through while the
// stalled uploads hold what they sent, and everything is given back when
// they go. Before, request-reply had no budget: 1,000 stalled 1 MiB
// uploads took RSS to 1.6 GB.
func TestHandlerBodyBudget(t *testing.T) {
	t.Parallel()
	const (
		max     = 1 << 20 // --rpc-max-body-bytes
		stalled = 24      // uploads
		sent    = 200 << 10
	)
	budget := membudget.New(4 << 20)
	f := newFixture(t, func(c *Config) { c.MaxBodyBytes, c.Budget = max, budget })
	srv := httptest.NewServer(f.mux)
	t.Cleanup(srv.Close) // after the connections close

	var peak sync.WaitGroup
	stop := make(chan struct{})
	var most int64
	peak.Go(func() {
		for {
			most = maxInt(most, budget.Used())
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})

	// Each sends a fifth of its 1 MiB and stalls: 24 of them would hold
	// 4.8 MiB, past the 4 MiB budget.
	type upload struct {
		conn net.Conn
		br   *bufio.Reader
	}
	var ups []upload
	head := fmt.Sprintf("POST /v1/rpc/billing HTTP/1.1\r\nHost: gw\r\nContent-Length: %d", max)
	for range stalled {
		conn, br := rawRequest(t, srv, head, strings.Repeat("x", sent))
		ups = append(ups, upload{conn, br})
	}
	// Those refused are answered at once; the others wait for their body.
	refused := 0
	deadline := time.Now().Add(time.Second)
	for _, u := range ups {
		// Past the first deadline, an answer sent already is in the buffer.
		u.conn.SetReadDeadline(later(deadline, time.Now().Add(100*time.Millisecond)))
		line, err := u.br.ReadString('\n')
		var ne net.Error
		switch {
		case err == nil && strings.HasPrefix(line, "HTTP/1.1 503 "):
			refused++
		case err == nil:
			t.Errorf("a stalled upload answered %q", line)
		case errors.As(err, &ne) && ne.Timeout(): // waiting for the rest of its body
		default:
			t.Errorf("a stalled upload: %v", err)
		}
	}
	if refused == 0 || refused == stalled {
		t.Errorf("%d of %d stalled uploads refused, want some (those past the budget)", refused, stalled)
	}
	if n := budget.Used(); n > budget.Max() || n < int64(stalled-refused)*sent {
		t.Errorf("%d bytes charged for %d uploads holding %d bytes each, budget %d", n, stalled-refused, sent, budget.Max())
	}
	t.Logf("%d of %d stalled uploads refused; %d bytes charged", refused, stalled, budget.Used())

	// The budget is about full; stalled uploads that go give back their
	// share, and a small call goes through.
	for _, u := range ups[:4] {
		u.conn.Close()
	}
	testkit.WaitFor(t, 5*time.Second, "closed uploads to give back their share", func() bool {
		return budget.Used() <= budget.Max()-64<<10
	})
	w := httptest.NewRecorder() // not f.serve: the closed uploads leave the router meanwhile
	f.mux.ServeHTTP(w, post("billing", "legitimate"))
	if w.Code != http.StatusOK || w.Body.String() != "legitimate" {
		t.Errorf("a small call while uploads stall: %d %q", w.Code, w.Body)
	}

	for _, u := range ups {
		u.conn.Close()
	}
	testkit.WaitFor(t, 5*time.Second, "every upload to give back its share", func() bool { return budget.Used() == 0 })
	close(stop)
	peak.Wait()
	if most > budget.Max() {
		t.Errorf("%d bytes charged at most, past the budget of %d", most, budget.Max())
	}
	if n := testutil.ToFloat64(f.router.metrics.Requests.WithLabelValues("503")); int(n) != refused {
		t.Errorf("inlet_rpc_requests_total{code=503} = %v, want %d", n, refused)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// TestHandlerWriteDeadline: a call may wait past the server's WriteTimeout
// (--rpc-max-timeout is above it); its answer, the reply or a 504, still
// reaches the caller. It was cut: a reset or an empty reply, and the
// caller retried work that was done.
func TestHandlerWriteDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var timers sync.WaitGroup
	f.producer.worker = func(req Request) (Reply, bool) {
		if string(req.Body) == "late" {
			timers.Go(func() {
				time.Sleep(700 * time.Millisecond) // past the WriteTimeout
				f.router.Deliver(Reply{ID: req.ID, Status: 201, Body: []byte("done late")})
			})
		}
		return Reply{}, false
	}
	srv := httptest.NewUnstartedServer(f.mux)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	defer timers.Wait()
	client := srv.Client()
	defer client.CloseIdleConnections()

	for _, tt := range []struct {
		body, timeout string
		want          int
		wantBody      string
	}{
		{body: "late", timeout: "3s", want: 201, wantBody: "done late"},
		{body: "never", timeout: "600ms", want: 504, wantBody: `no reply from service \"billing\" within 600ms`},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/rpc/billing", strings.NewReader(tt.body))
		req.Header.Set("Inlet-Timeout", tt.timeout)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: the call past the server's write timeout: %v", tt.body, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tt.want || !strings.Contains(string(b), tt.wantBody) {
			t.Errorf("%s: answer %d %q (%v), want %d ...%s...", tt.body, resp.StatusCode, b, err, tt.want, tt.wantBody)
		}
	}
}
