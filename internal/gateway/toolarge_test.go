package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// refuseOver1000 answers 413 to a body over 1000 bytes, as ingest and
// request-reply do: by its Content-Length before reading any of it, or
// through http.MaxBytesReader when its length is not announced.
func refuseOver1000(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > 1000 {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1000)); err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// TestTooLarge413AfterTheWholeBody: a client that writes its whole body
// before it reads (Python's http.client, ab, most simple clients) reads
// the 413 of a body over the limit, however large the body: the server
// reads the rest of it before closing, rather than closing with unread
// data, which resets the connection and takes the 413 with it.
func TestTooLarge413AfterTheWholeBody(t *testing.T) {
	t.Parallel()
	addr := serveHTTP(t, DefaultConfig(), http.HandlerFunc(refuseOver1000))
	const size = 4 << 20
	body := bytes.Repeat([]byte("x"), size)
	for _, tc := range []struct {
		name, header string
		body         []byte
	}{
		{"announced", fmt.Sprintf("Content-Length: %d\r\n", size), body},
		{"chunked", "Transfer-Encoding: chunked\r\n", append(append(fmt.Appendf(nil, "%x\r\n", size), body...), "\r\n0\r\n\r\n"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: h\r\n%s\r\n", tc.header); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(tc.body); err != nil {
				t.Fatalf("writing the body: %v (the server reset the connection before the client read its answer)", err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer after the whole body: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("answer %s, want 413", resp.Status)
			}
			// The header went out before the body was read: net/http closes
			// the connection after it, once the body is read out.
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("bytes after the 413, want the connection closed")
			}
		})
	}
}

// TestTooLargeReadOutBounded: the read-out after a 413 does not hold a
// connection whose client stops sending: the client has its answer at
// once, and the connection is closed after readOutIdle without a byte.
func TestTooLargeReadOutBounded(t *testing.T) {
	t.Parallel()
	addr := serveHTTP(t, DefaultConfig(), http.HandlerFunc(refuseOver1000))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := fmt.Fprintf(c, "POST /v1/batch HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", 100<<20, bytes.Repeat([]byte("x"), 10<<10)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("answer %v, %v; want 413", resp, err)
	}
	if d := time.Since(start); d > readOutIdle {
		t.Errorf("the 413 came after %v: it waited for the read-out", d)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("bytes after the answer, want the connection closed")
	}
	if d := time.Since(start); d < readOutIdle || d > readOutTotal+5*time.Second {
		t.Errorf("connection closed after %v; want after the read-out's %v without a byte, within %v", d, readOutIdle, readOutTotal)
	}
}
