package gateway_test

import (
	"bufio"
	"errors"
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

// hiddenRequest is a whole ingest request of one event named name: the
// request a smuggling shape hides where one reading of HTTP/1.1 sees a body
// and another a request.
func hiddenRequest(name string) string {
	body := `[{"event":"` + name + `"}]`
	return fmt.Sprintf("POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// smugglingShapes are requests whose body is read one way by one HTTP
// parser and another way by another (a proxy in front, the old fasthttp
// front): each hides a request of event hidden. Shared with FuzzFraming's
// seeds.
func smugglingShapes(hidden string) []struct{ name, raw string } {
	h := hiddenRequest(hidden)
	const head = "POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(h), h)
	return []struct{ name, raw string }{
		// Finding 6: the fasthttp front answered 400, kept the connection
		// and stored the hidden event.
		{"Transfer-Encoding identity, no length", head + "Transfer-Encoding: identity\r\n\r\n" + h},
		{"chunked, and a Content-Length over the hidden request (CL.TE)",
			head + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(h), h)},
		{"a short Content-Length, and chunked (TE.CL)", head + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + chunk},
		{"two Content-Lengths", head + fmt.Sprintf("Content-Length: 0\r\nContent-Length: %d\r\n\r\n%s", len(h), h)},
		{"Transfer-Encoding folded (obs-fold)", head + "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + h},
		{"a bare CR in a header", head + "X-A: b\rTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding chunked, identity", head + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding identity, chunked", head + "Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n" + h},
		{"two Transfer-Encodings", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding xchunked", head + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding with a space before the colon", head + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + h},
		{"Transfer-Encoding chunked on HTTP/1.0", strings.Replace(head, "HTTP/1.1", "HTTP/1.0", 1) +
			"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + h},
		{"a chunk size line ending in a bare LF", head + "Transfer-Encoding: chunked\r\n\r\n0\n\r\n" + h},
		{"Content-Length with a sign", head + fmt.Sprintf("Content-Length: +%d\r\n\r\n%s", len(h), h)},
		{"Content-Length in hex", head + fmt.Sprintf("Content-Length: 0x%x\r\n\r\n%s", len(h), h)},
	}
}

// TestSmuggling sends each smuggling shape to a gateway (--ack kafka: what
// was acknowledged is in Kafka) on a connection of its own: the server
// answers no more than one 2xx, closes the connection, and the hidden
// event never reaches Kafka. Finding 6 of issue 27; the CL.TE and obs-fold
// shapes stored the hidden event on plain net/http too until closeChunked.
func TestSmuggling(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "smuggle-")
	cfg := gatewaytest.Config(t, brokers, topic)
	cfg.Ack = gateway.AckKafka
	g := gatewaytest.Start(t, cfg)
	for _, tc := range smugglingShapes("hidden") {
		t.Run(tc.name, func(t *testing.T) {
			answers, closed := exchange(t, g.Addr(), tc.raw)
			if !closed {
				t.Errorf("the connection is still open 10 s after the shape; answers %v", answers)
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
