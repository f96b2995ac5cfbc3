package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway"
	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestSmuggling sends each smuggling shape to a gateway (--ack kafka: what
// was acknowledged is in Kafka) on a connection of its own: the server
// answers (the request it sees, or the malformed one), no more than one
// 2xx, closes the connection, and the hidden event never reaches Kafka. Finding 6 of issue 27; the CL.TE and obs-fold
// shapes stored the hidden event on plain net/http too until closeAmbiguous.
func TestSmuggling(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "smuggle-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	g := gatewaytest.Start(t, cfg)
	for _, tc := range gateway.SmugglingShapes("hidden") {
		t.Run(tc.Name, func(t *testing.T) {
			answers, closed := exchange(t, g.Addr(), tc.Raw)
			if !closed {
				t.Errorf("the connection is still open 10 s after the shape; answers %v", answers)
			}
			if len(answers) == 0 {
				t.Error("no answer: the server closed the connection without answering the shape")
			}
			for i, a := range answers {
				if i > 0 && a/100 == 2 {
					t.Errorf("answers %v: a 2xx after the first (a hidden request served)", answers)
				}
			}
		})
	}
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"event":"marker"}]`), "Content-Type", "application/json")
	if r.Status != http.StatusOK {
		t.Fatalf("marker: %s", r)
	}
	recs := testkit.Consume(t, brokers, topic, 30*time.Second, func(rs []testkit.Record) bool {
		for _, r := range rs {
			if r.Fields["event"] == "marker" {
				return true
			}
		}
		return false
	})
	for _, r := range recs {
		if r.Fields["event"] == "hidden" {
			t.Errorf("a hidden event is in Kafka: %s", r.Value)
		}
	}
}

// exchange writes raw on a new connection to addr and reads answers until
// the server closes it (closed) or 10 s pass; it returns their statuses.
func exchange(tb testing.TB, addr, raw string) (statuses []int, closed bool) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
		statuses = append(statuses, resp.StatusCode)
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestLongBareLFRequestLine: a request whose lines end in a bare LF, its
// request line over 1,024 bytes, is answered at once. Finding 8 of issue
// 27: the fasthttp front's sniffing buffer waited for more and answered
// 408 after 5 s.
func TestLongBareLFRequestLine(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "barelf-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	body := `[{"event":"bare_lf"}]`
	raw := fmt.Sprintf("POST /v1/batch?q=%s HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Length: %d\n\n%s",
		strings.Repeat("a", 1100), len(body), body)
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != http.StatusOK || took > 3*time.Second {
		t.Fatalf("answer %d after %v, want 200 at once", resp.StatusCode, took)
	}
}

// TestHTTPFrontDeprecated: --http-front, whose fasthttp front is gone,
// still parses for a release: fasthttp starts with a warning that it was
// removed, nethttp with a note, both serve ingest on net/http; another
// value is refused, naming the flag.
func TestHTTPFrontDeprecated(t *testing.T) {
	for _, tc := range []struct{ value, log string }{
		{gateway.FrontFast, `level=WARN msg="--http-front fasthttp: the fasthttp front was removed; net/http serves every listener`},
		{gateway.FrontNetHTTP, `level=INFO msg="--http-front nethttp: net/http serves every listener`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			cfg := gatewaytest.Config(t, []string{testkit.FreeAddr(t)}, "events") // --ack spool: no Kafka needed
			cfg.ShutdownTimeout = time.Second                                     // nothing to drain to
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			if err := fs.Parse([]string{"--http-front", tc.value}); err != nil {
				t.Fatal(err)
			}
			log, logs := testkit.NewLogBuffer()
			g, err := gateway.Start(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
				defer cancel()
				_ = g.Shutdown(ctx)
			})
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log without %q:\n%s", tc.log, logs)
			}
			if r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"event":"e"}]`), "Content-Type", "application/json"); r.Status != http.StatusOK {
				t.Errorf("ingest: %s, want 200", r)
			}
		})
	}
	cfg := gateway.DefaultConfig()
	cfg.HTTPFront = "fast"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `--http-front "fast"`) {
		t.Errorf("--http-front fast: %v, want an error naming the flag", err)
	}
}
