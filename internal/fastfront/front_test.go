package fastfront

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// seen is what the test handler tells of a request, as JSON.
type seen struct {
	Server        string              `json:"server"` // "fasthttp" or "net/http"
	Method        string              `json:"method"`
	Path          string              `json:"path"`
	RawQuery      string              `json:"raw_query"`
	RequestURI    string              `json:"request_uri"`
	Host          string              `json:"host"`
	Proto         string              `json:"proto"`
	Header        map[string][]string `json:"header"`
	ContentLength int64               `json:"content_length"`
	Chunked       bool                `json:"chunked"`
	Body          string              `json:"body"`
	RemoteAddr    string              `json:"remote_addr"`
	ConnValue     string              `json:"conn_value"`
}

type ctxKey struct{}

// echo answers what it saw of the request, with a header and status the
// request asks for (?status=N).
func echo(w http.ResponseWriter, r *http.Request) {
	s := seen{Server: "net/http", Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, RequestURI: r.RequestURI,
		Host: r.Host, Proto: r.Proto, Header: r.Header, ContentLength: r.ContentLength, RemoteAddr: r.RemoteAddr}
	if _, ok := w.(*writer); ok {
		s.Server = "fasthttp"
	}
	s.Chunked = len(r.TransferEncoding) == 1 && r.TransferEncoding[0] == "chunked"
	if v, ok := r.Context().Value(ctxKey{}).(string); ok {
		s.ConnValue = v
	}
	if r.URL.Query().Get("skipbody") == "" {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.Body = string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("X-Multi", "1")
	w.Header().Add("X-Multi", "2")
	status := http.StatusOK
	if st := r.URL.Query().Get("status"); st != "" {
		fmt.Sscan(st, &status)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(s)
}

// start serves echo on a Front over a loopback listener, with /fast and
// /fast2 on fasthttp; it returns the address.
func start(t *testing.T, cfg Config) (string, *Front, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(echo)
	if cfg.Handler == nil {
		cfg.Handler = h
	}
	if cfg.Fast == nil {
		cfg.Fast = []string{"/fast", "/fast2"}
	}
	if cfg.ConnContext == nil {
		cfg.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, "conn "+c.RemoteAddr().String())
		}
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	f := New(cfg)
	srv := &http.Server{Handler: cfg.Handler, Protocols: new(http.Protocols),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, "net/http conn")
		}}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 2)
	go func() { served <- f.Serve(ln) }()
	go func() { served <- srv.Serve(f.NetListener()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Shutdown(ctx)
		_ = srv.Shutdown(ctx)
		for range 2 {
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return ln.Addr().String(), f, srv
}

// conn is a raw HTTP/1.1 client connection.
type conn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &conn{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *conn) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads one answer and the echo it carries.
func (c *conn) answer() (*http.Response, seen) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading the answer's body: %v", err)
	}
	var s seen
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &s); err != nil {
			c.t.Fatalf("answer %q: %v", b, err)
		}
	}
	return resp, s
}

// closed reports whether the server closed the connection (EOF on read).
func (c *conn) closed() bool {
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.r.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

func TestFastPathsOnFasthttpTheRestHandedToNetHTTP(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	// One keep-alive connection: fast, fast with a chunked body, then a
	// path of net/http's (with a body fasthttp began to read), then fast
	// again, which net/http now serves.
	c.send("POST /fast?a=1&b=%20 HTTP/1.1\r\nHost: example.test\r\nUser-Agent: ua/1\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2, 10.0.0.3\r\nX-Custom-Header: v\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello")
	resp, s := c.answer()
	if resp.StatusCode != 200 || s.Server != "fasthttp" {
		t.Fatalf("POST /fast: %d by %s, want 200 by fasthttp", resp.StatusCode, s.Server)
	}
	if got := resp.Header.Values("X-Multi"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("X-Multi answered %q, want [1 2]", got)
	}
	want := seen{Server: "fasthttp", Method: "POST", Path: "/fast", RawQuery: "a=1&b=%20", RequestURI: "/fast?a=1&b=%20", Host: "example.test",
		Proto: "HTTP/1.1", ContentLength: 5, Body: "hello", RemoteAddr: c.c.LocalAddr().String(), ConnValue: "conn " + c.c.LocalAddr().String()}
	checkSeen(t, s, want)
	for k, v := range map[string][]string{"User-Agent": {"ua/1"}, "X-Forwarded-For": {"10.0.0.1", "10.0.0.2, 10.0.0.3"},
		"X-Custom-Header": {"v"}, "Content-Type": {"application/json"}, "Content-Length": {"5"}} {
		if got := s.Header[k]; fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("header %s: the handler saw %q, want %q", k, got, v)
		}
	}
	if _, ok := s.Header["Host"]; ok {
		t.Error("Host is in the header; net/http keeps it in Request.Host only")
	}

	c.send("POST /fast2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
	_, s = c.answer()
	checkSeen(t, s, seen{Server: "fasthttp", Method: "POST", Path: "/fast2", RequestURI: "/fast2", Host: "h", Proto: "HTTP/1.1",
		ContentLength: -1, Chunked: true, Body: "abcdefg", RemoteAddr: c.c.LocalAddr().String(), ConnValue: "conn " + c.c.LocalAddr().String()})

	big := strings.Repeat("x", 20000)
	c.send("POST /other?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 20000\r\n\r\n" + big[:100])
	time.Sleep(50 * time.Millisecond) // fasthttp has begun the body
	c.send(big[100:])
	resp, s = c.answer()
	if resp.StatusCode != 200 || s.Server != "net/http" || s.Body != big || s.Path != "/other" || s.RawQuery != "q=1" || s.Host != "h" {
		t.Fatalf("POST /other: %d by %s, path %q query %q host %q, body of %d bytes; want 200 by net/http with the 20000 bytes sent",
			resp.StatusCode, s.Server, s.Path, s.RawQuery, s.Host, len(s.Body))
	}
	if s.RemoteAddr != c.c.LocalAddr().String() {
		t.Errorf("net/http saw the peer %s, want %s", s.RemoteAddr, c.c.LocalAddr())
	}

	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	_, s = c.answer()
	if s.Server != "net/http" || s.Body != "hi" {
		t.Errorf("after the handover, POST /fast: by %s with body %q, want net/http with \"hi\"", s.Server, s.Body)
	}
	_, s = c.answer()
	if s.Server != "net/http" || s.Method != "GET" {
		t.Errorf("pipelined GET /fast: %s by %s", s.Method, s.Server)
	}
}

// TestHeaderFromRequestToRequest: the exchange keeps the previous
// request's header strings by position and uses them again when they are
// the same; a value, name or target that changed, or a header that moved
// or went, must be the new request's.
func TestHeaderFromRequestToRequest(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	reqs := []struct {
		target string
		header [][2]string
	}{
		{"/fast?a=1", [][2]string{{"User-Agent", "ua/1"}, {"X-A", "1"}, {"X-B", "2"}, {"Content-Length", "2"}}},
		{"/fast?a=1", [][2]string{{"User-Agent", "ua/1"}, {"X-A", "1"}, {"X-B", "2"}, {"Content-Length", "2"}}},
		{"/fast?a=2", [][2]string{{"User-Agent", "ua/1"}, {"X-A", "1"}, {"X-B", "3"}, {"Content-Length", "3"}}},
		{"/fast?a=2", [][2]string{{"User-Agent", "ua/2"}, {"X-C", "1"}, {"X-B", "3"}}},
		{"/fast2", [][2]string{{"X-B", "3"}, {"User-Agent", "ua/2"}, {"X-B", "4"}, {"X-C", "1"}, {"X-D", "ua/2"}}},
		{"/fast", [][2]string{{"X-B", "3"}}},
	}
	for i, rq := range reqs {
		var b strings.Builder
		fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: h\r\n", rq.target)
		want := map[string][]string{}
		body := ""
		for _, kv := range rq.header {
			fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
			want[kv[0]] = append(want[kv[0]], kv[1])
			if kv[0] == "Content-Length" {
				body = strings.Repeat("x", int(kv[1][0]-'0'))
			}
		}
		if want["Content-Length"] == nil {
			want["Content-Length"] = []string{"0"} // fasthttp's, where net/http has none
		}
		b.WriteString("\r\n" + body)
		c.send(b.String())
		resp, s := c.answer()
		if resp.StatusCode != 200 || s.Server != "fasthttp" {
			t.Fatalf("request %d: %d by %s, want 200 by fasthttp", i, resp.StatusCode, s.Server)
		}
		if s.RequestURI != rq.target || s.Body != body {
			t.Errorf("request %d: target %q body %q, want %q %q", i, s.RequestURI, s.Body, rq.target, body)
		}
		if fmt.Sprint(s.Header) != fmt.Sprint(want) {
			t.Errorf("request %d: the handler saw the header %v, want %v", i, s.Header, want)
		}
	}
}

func checkSeen(t *testing.T, got, want seen) {
	t.Helper()
	got.Header, want.Header = nil, nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("the handler saw\n%+v\nwant\n%+v", got, want)
	}
}

func TestHandoffFirstRequest(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, tc := range []struct{ name, raw, body string }{
		{"get", "GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", ""},
		{"chunked post", "POST /rpc HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "hello"},
		{"http/1.0", "GET /x HTTP/1.0\r\n\r\n", ""},
		// Not the fast path's exact spelling: net/http cleans or refuses it.
		{"escaped fast path", "GET /f%61st HTTP/1.1\r\nHost: h\r\n\r\n", ""},
		{"dot segment", "GET /x/../fast HTTP/1.1\r\nHost: h\r\n\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tc.raw)
			resp, s := c.answer()
			if s.Server != "net/http" || s.Body != tc.body {
				t.Fatalf("%d by %q with body %q, want net/http with %q", resp.StatusCode, s.Server, s.Body, tc.body)
			}
		})
	}
}

// TestExpectContinue: fasthttp sends 100 before a fast path's handler
// runs, but for a body Precheck refuses (here: over 10 bytes), 413 at once; a
// request handed over gets no second 100 from net/http.
func TestExpectContinue(t *testing.T) {
	addr, _, _ := start(t, Config{Precheck: func(w http.ResponseWriter, r *http.Request) bool {
		if r.ContentLength > 10 {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return false
		}
		return true
	}})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n")
	resp, _ := c.answer()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over Precheck's limit: %d, want 413 before any 100", resp.StatusCode)
	}
	if !c.closed() {
		t.Error("the connection stayed open after refusing a body the client may send")
	}
	for _, p := range []string{"/fast", "/other"} {
		c = dial(t, addr)
		c.send("POST " + p + " HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
		if line, err := c.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("%s: want 100 Continue, got %q (%v)", p, line, err)
		}
		if _, err := c.r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		c.send("hello")
		resp, s := c.answer() // http.ReadResponse would skip a second 100: check it is not there
		if resp.StatusCode != 200 || s.Body != "hello" {
			t.Fatalf("%s: %d with body %q, want 200 with \"hello\"", p, resp.StatusCode, s.Body)
		}
		if _, ok := s.Header["Expect"]; ok && p == "/other" {
			t.Errorf("%s: net/http saw Expect: 100-continue again, and would send a second 100", p)
		}
	}
}

// TestPrecheck: a fast path's request with Expect: 100-continue is put to
// Precheck on its header alone: refused, it is answered without a 100 (the
// body is never asked for) and the connection closes; let through, the
// client gets 100 and the handler the body.
func TestPrecheck(t *testing.T) {
	var checked []string
	precheck := func(w http.ResponseWriter, r *http.Request) bool {
		checked = append(checked, r.URL.Path)
		if r.ContentLength != 5 || r.Header.Get("Expect") == "" {
			t.Errorf("Precheck saw Content-Length %d, Expect %q", r.ContentLength, r.Header.Get("Expect"))
		}
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "credentials needed", http.StatusUnauthorized)
			return false
		}
		return true
	}
	addr, _, _ := start(t, Config{Precheck: precheck})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	resp, _ := c.answer() // a 100 first would be skipped by ReadResponse: see the status line below
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("refused by Precheck: %d (WWW-Authenticate %q), want 401 with its challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if !c.closed() {
		t.Error("the connection stayed open after a refusal whose body the client may still send")
	}
	c = dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	if line, err := c.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("let through by Precheck: want 100 Continue first, got %q (%v)", line, err)
	}
	if _, err := c.r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c.send("hello")
	if resp, s := c.answer(); resp.StatusCode != 200 || s.Body != "hello" || s.Server != "fasthttp" {
		t.Fatalf("%d by %s with body %q, want 200 by fasthttp with \"hello\"", resp.StatusCode, s.Server, s.Body)
	}
	// Without Expect, or off the fast paths, Precheck is not asked.
	c = dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
	if resp, _ := c.answer(); resp.StatusCode != 200 {
		t.Fatalf("without Expect: %d", resp.StatusCode)
	}
	if len(checked) != 2 {
		t.Errorf("Precheck was asked %d times (%q), want 2", len(checked), checked)
	}
}

func TestHeadAnswerLength(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	get, _ := c.answer()
	c.send("HEAD /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(c.r, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength <= 0 || resp.Header.Get("Content-Length") == "" {
		t.Fatalf("HEAD answered Content-Length %q, want the GET's (%d)", resp.Header.Get("Content-Length"), get.ContentLength)
	}
	// The connection carries on: nothing of a body was sent.
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, s := c.answer(); s.Server != "fasthttp" || s.Method != "GET" {
		t.Fatalf("after HEAD: %s by %s", s.Method, s.Server)
	}
}

func TestHandoffBodyTooLarge(t *testing.T) {
	addr, _, _ := start(t, Config{MaxHandoffBody: 100})
	c := dial(t, addr)
	c.send("POST /other HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n" + strings.Repeat("a", 101))
	resp, _ := c.answer()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if !c.closed() {
		t.Error("the connection stayed open after a body that could not be handed over")
	}
	c = dial(t, addr)
	c.send("POST /other HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("a", 100))
	if resp, s := c.answer(); resp.StatusCode != 200 || len(s.Body) != 100 {
		t.Fatalf("a body at the limit: status %d, %d bytes, want 200 with 100", resp.StatusCode, len(s.Body))
	}
}

func TestUnreadBodyThenNextRequest(t *testing.T) {
	addr, _, _ := start(t, Config{})
	c := dial(t, addr)
	// The handler answers without reading the body: fasthttp reads it out
	// before the next request.
	c.send("POST /fast?skipbody=1&status=401 HTTP/1.1\r\nHost: h\r\nContent-Length: 30000\r\n\r\n" + strings.Repeat("b", 30000) +
		"POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok")
	if resp, s := c.answer(); resp.StatusCode != 401 || s.Server != "fasthttp" {
		t.Fatalf("first: %d by %s", resp.StatusCode, s.Server)
	}
	if resp, s := c.answer(); resp.StatusCode != 200 || s.Body != "ok" {
		t.Fatalf("second: %d with body %q, want 200 with \"ok\"", resp.StatusCode, s.Body)
	}
}

func TestH2CGoesToNetHTTP(t *testing.T) {
	addr, _, _ := start(t, Config{})
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, p := range []string{"/fast", "/other"} {
		resp, err := cl.Post("http://"+addr+p, "text/plain", strings.NewReader("h2"))
		if err != nil {
			t.Fatal(err)
		}
		var s seen
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil || resp.ProtoMajor != 2 || s.Server != "net/http" || s.Body != "h2" {
			t.Fatalf("h2c %s: HTTP/%d by %s, body %q (%v); want HTTP/2 by net/http", p, resp.ProtoMajor, s.Server, s.Body, err)
		}
	}
}

func TestSlowStartAndSilentConnections(t *testing.T) {
	addr, _, _ := start(t, Config{ReadHeaderTimeout: 300 * time.Millisecond})
	// A request whose first bytes come one at a time still gets served.
	c := dial(t, addr)
	for _, b := range []byte("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n") {
		c.send(string(b))
		if b == 'P' || b == 'G' {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, s := c.answer(); s.Server != "fasthttp" {
		t.Fatalf("by %s, want fasthttp", s.Server)
	}
	// A connection that says nothing is closed after ReadHeaderTimeout.
	c = dial(t, addr)
	start := time.Now()
	if !c.closed() {
		t.Fatal("a silent connection was not closed")
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("closed after %v, want about the read header timeout (300ms)", d)
	}
	// One that stops inside its request line is answered 408, as one that
	// stops inside its header is (the sniffer waits for the whole line).
	c = dial(t, addr)
	c.send("POST /fa")
	if resp, _ := c.answer(); resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a request line cut short: %d, want 408", resp.StatusCode)
	}
}

func TestReadDeadlineFromHandler(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			http.Error(w, "SetReadDeadline: "+err.Error(), 500)
			return
		}
		_, err := io.ReadAll(r.Body)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			http.Error(w, "deadline", http.StatusRequestTimeout)
			return
		}
		http.Error(w, fmt.Sprintf("read: %v", err), 500)
	})
	addr, _, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc") // 7 bytes never come
	resp, _ := c.answer()
	if resp.StatusCode != http.StatusRequestTimeout {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d (%s), want 408 from the handler's read deadline", resp.StatusCode, b)
	}
}

func TestShutdownWaitsForFastRequests(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	addr, f, _ := start(t, Config{Handler: h})
	c := dial(t, addr)
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- f.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		// The listener may take a moment to close; a dial that connects
		// must at least not be served.
		t.Log("dialled during shutdown (the kernel's backlog); not served")
	}
	close(release)
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("the request in flight was not answered: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "done" {
		t.Errorf("answer %q", b)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// flakyListener fails its first Accept with a temporary error, as accept
// does out of file descriptors (EMFILE), then accepts from the listener.
type flakyListener struct {
	net.Listener
	failed bool
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, tempErr{}
	}
	return l.Listener.Accept()
}

// TestTemporaryAcceptError: Serve goes on after a temporary accept error.
func TestTemporaryAcceptError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{Fast: []string{"/fast"}, Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 5 * time.Second})
	served := make(chan error, 1)
	go func() { served <- f.Serve(&flakyListener{Listener: ln}) }()
	defer func() {
		f.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	}()
	c := dial(t, ln.Addr().String())
	c.send("GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, s := c.answer(); resp.StatusCode != 200 || s.Server != "fasthttp" {
		t.Fatalf("after a temporary accept error: %d by %s", resp.StatusCode, s.Server)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v on a temporary accept error", err)
	default:
	}
}

// TestMalformedRequestsQuoteNoSecrets: fasthttp's error for a request it
// cannot parse quotes the request's bytes unless told not to; neither the
// 400's body nor the log may carry what the client sent (an Authorization
// header, a cookie, a pixel's key).
func TestMalformedRequestsQuoteNoSecrets(t *testing.T) {
	log, logs := testkit.NewLogBuffer()
	addr, _, _ := start(t, Config{Log: log})
	const secret = "s3cret-Token-5b1f"
	head := "Authorization: Bearer " + secret + "\r\nCookie: sid=" + secret + "\r\n"
	for _, raw := range []string{
		"POST /fast?k=" + secret + " x HTTP/1.1\r\nHost: x\r\n" + head + "Content-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: x\r\n" + head + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
		"POST /fast HTTP/1.1\r\nHost: x\r\n" + head + "Content-Length: x2\r\n\r\n{}",
		"POST /fast HTTP/1.1\r\nHost: x\r\n" + head + "X-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
		"POST * HTTP/1.1\r\nHost: x\r\n" + head + "Content-Length: 0\r\n\r\n",
	} {
		c := dial(t, addr)
		c.send(raw)
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %d %s, want 400", raw, resp.StatusCode, body)
		}
		if strings.Contains(string(body), secret) {
			t.Errorf("%q: the answer quotes the request: %s", raw, body)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log quotes a request:\n%s", logs.String())
	}
}

// TestBareLFRequestLine: a request whose lines end in a bare LF (which RFC
// 9112 lets a server take for CRLF, and net/http does, but fasthttp waits
// on) is served, by net/http, on a fast path too; CRLF requests, empty
// lines before them or not, stay on fasthttp.
func TestBareLFRequestLine(t *testing.T) {
	addr, _, _ := start(t, Config{})
	for _, tc := range []struct{ raw, server string }{
		{"POST /fast HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}", "net/http"},
		{"POST /fast HTTP/1.1\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "net/http"},
		{"POST /other HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}", "net/http"},
		{"POST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "fasthttp"},
		{"\r\nPOST /fast HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "fasthttp"},
	} {
		c := dial(t, addr)
		_ = c.c.SetDeadline(time.Now().Add(3 * time.Second)) // under the 5 s header timeout
		c.send(tc.raw)
		resp, s := c.answer()
		if resp.StatusCode != http.StatusOK || s.Server != tc.server || s.Body != "{}" || s.Path != "/fast" && s.Path != "/other" {
			t.Errorf("%q: %d %+v, want 200 from %s with the body", tc.raw, resp.StatusCode, s, tc.server)
		}
	}
}
