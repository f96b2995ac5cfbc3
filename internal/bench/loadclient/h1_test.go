package loadclient

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
)

// rawServer answers each request with the bytes answers gives for its path,
// and closes the connection after it if close says so. It counts the
// connections it accepted.
func rawServer(tb testing.TB, answers map[string]string, closeAfter map[string]bool) (string, *atomic.Int64) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					answer := answers[req.URL.Path]
					if req.URL.Path == "/echo" {
						answer = "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)
					}
					if _, err := io.WriteString(c, answer); err != nil || closeAfter[req.URL.Path] {
						return
					}
				}
			}()
		}
	}()
	return "http://" + l.Addr().String(), &conns
}

func TestBenchH1Answers(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"/length":   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"/chunked":  "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"/continue": "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\nok",
		"/204":      "HTTP/1.1 204 No Content\r\n\r\n",
		"/503":      "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 4\r\n\r\nbusy",
		"/close":    "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"/http10":   "HTTP/1.0 200 OK\r\n\r\nuntil the end",
		"/garbage":  "SMTP ready\r\n\r\n",
		"/short":    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
		// A header past maxHeaderBytes in lines of 1 KiB: refused, not held.
		"/bigheader": "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("x", 1017)+"\r\n", 1100) + "Content-Length: 2\r\n\r\nok",
		// Keeps the connection open, then closes it without saying so.
		"/idle-close": "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	}
	closeAfter := map[string]bool{"/close": true, "/http10": true, "/short": true, "/idle-close": true}
	cases := []struct {
		path     string
		status   int
		received int64
		dials    int64 // connections for 3 requests
		kind     string
	}{
		{"/length", 200, 5, 1, ""},
		{"/chunked", 201, 11, 1, ""},
		{"/continue", 202, 2, 1, ""},
		{"/204", 204, 0, 1, ""},
		{"/503", 503, 4, 1, ""},
		{"/close", 200, 2, 3, ""},
		{"/http10", 200, 13, 3, ""},
		{"/idle-close", 200, 0, 3, ""}, // retried on a new connection
		{"/garbage", 0, 0, 3, bench.KindOther},
		{"/short", 200, 4, 3, bench.KindClosed},
		{"/bigheader", 0, 0, 3, bench.KindOther},
		{"/echo", 200, 9, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			base, conns := rawServer(t, answers, closeAfter)
			u, _ := url.Parse(base + tc.path + "?q=1")
			c := newH1Client(u, http.MethodPost, "", http.Header{"Content-Type": {"application/json"}}, 1, nil)
			defer c.close()
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				status, got, err := c.do(ctx, []byte(`{"a":1}`+"\n\n"))
				cancel()
				if tc.kind != "" {
					if err == nil || bench.Classify(err) != tc.kind {
						t.Fatalf("request %d: %d, %v (%s); want a %s error", i, status, err, bench.Classify(err), tc.kind)
					}
					continue
				}
				if err != nil || status != tc.status || got != tc.received {
					t.Fatalf("request %d: status %d, %d bytes, %v; want %d, %d bytes", i, status, got, err, tc.status, tc.received)
				}
			}
			if n := conns.Load(); n != tc.dials {
				t.Errorf("%d connections for 3 requests, want %d", n, tc.dials)
			}
		})
	}
}

func TestBenchH1Timeout(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // never answers
		}
	}()
	u, _ := url.Parse("http://" + l.Addr().String() + "/")
	c := newH1Client(u, http.MethodGet, "example.test", nil, 1, nil)
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = c.do(ctx, nil)
	if bench.Classify(err) != bench.KindTimeout || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %v: want a timeout", err, time.Since(start))
	}
	// Cancellation without a deadline ends a request too.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, _, err = c.do(ctx, nil)
	if bench.Classify(err) != bench.KindCanceled {
		t.Fatalf("%v: want the request canceled", err)
	}
}
