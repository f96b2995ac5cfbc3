package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/reply"
)

// MaxReplyBody bounds the reply body the HTTP and Exec handlers take: it
// fits, with its headers, in Kafka's default record size limit (about 1 MB).
const MaxReplyBody = 960 << 10

// errTooLarge is returned for a reply body over MaxReplyBody.
var errTooLarge = fmt.Errorf("worker: reply body over %d bytes", MaxReplyBody)

// Echo returns a handler that answers each request with its own body and
// content type, status 200, after sleeping a uniformly random time in
// [minDelay, maxDelay] (synthetic work). The sleep ends early, with an error,
// when ctx ends.
func Echo(minDelay, maxDelay time.Duration) Handler {
	return func(ctx context.Context, req Request) (reply.Reply, error) {
		d := minDelay
		if maxDelay > minDelay {
			d += rand.N(maxDelay - minDelay + 1)
		}
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return reply.Reply{}, fmt.Errorf("echo: %w", context.Cause(ctx))
			}
		}
		return reply.Reply{Status: http.StatusOK, ContentType: req.ContentType, Body: req.Body}, nil
	}
}

// hopHeaders are not forwarded by the HTTP handler: they describe one
// connection, or are set by the client from the request itself.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true, "Content-Type": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true,
}

// ClientHeader is the header through which HTTP tells target the id of the
// client that made the call, when the gateway authenticated it (inlet
// serve --auth); a caller's own header of that name is not passed on.
const ClientHeader = "Inlet-Client"

// HTTP returns a handler that POSTs each request's body, with its content
// type, forwarded headers, the calling client (ClientHeader) and query
// string (appended to target's), to target;
// the response's status, content type and body are the reply. A transport
// error, or a response body over MaxReplyBody, is a handler error (the caller
// gets 502). client nil means a client keeping up to DefaultConcurrency idle
// connections to target; the request's deadline bounds each call.
func HTTP(target string, client *http.Client) (Handler, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("worker: HTTP target %q: want http://host[:port]/path", target)
	}
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = DefaultConcurrency
		tr.MaxIdleConnsPerHost = DefaultConcurrency
		client = &http.Client{Transport: tr}
	}
	return func(ctx context.Context, req Request) (reply.Reply, error) {
		to := *u
		if req.Query != "" {
			if to.RawQuery != "" {
				to.RawQuery += "&"
			}
			to.RawQuery += req.Query
		}
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, to.String(), bytes.NewReader(req.Body))
		if err != nil {
			return reply.Reply{}, fmt.Errorf("http: %w", err)
		}
		for k, vs := range req.Headers {
			if !hopHeaders[http.CanonicalHeaderKey(k)] {
				hr.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
		if req.ContentType != "" {
			hr.Header.Set("Content-Type", req.ContentType)
		}
		// The gateway's word on who called, never the caller's own.
		hr.Header.Del(ClientHeader)
		if req.Client != "" {
			hr.Header.Set(ClientHeader, req.Client)
		}
		resp, err := client.Do(hr)
		if err != nil {
			return reply.Reply{}, fmt.Errorf("http: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBody+1))
		if err != nil {
			return reply.Reply{}, fmt.Errorf("http: reading the response of %s: %w", target, err)
		}
		if len(body) > MaxReplyBody {
			return reply.Reply{}, fmt.Errorf("http: %s: %w", target, errTooLarge)
		}
		return reply.Reply{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}, nil
	}, nil
}

// Exec returns a handler that runs `sh -c command` for each request, with
// the request body on stdin and its metadata in the environment (RPC_ID,
// RPC_SERVICE, RPC_CONTENT_TYPE, RPC_QUERY, RPC_DEADLINE in Unix
// milliseconds, RPC_CLIENT: the client the gateway authenticated, if any). Its stdout, up to MaxReplyBody, is the reply body (status
// 200, no content type). A non-zero exit is a handler error carrying the
// last line of stderr. The request's deadline kills the command (its whole
// process group where the system has them).
func Exec(command string) Handler {
	return func(ctx context.Context, req Request) (reply.Reply, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(req.Body)
		cmd.Env = append(os.Environ(),
			"RPC_ID="+req.ID,
			"RPC_SERVICE="+req.Service,
			"RPC_CONTENT_TYPE="+req.ContentType,
			"RPC_QUERY="+req.Query,
			"RPC_DEADLINE="+strconv.FormatInt(req.Deadline.UnixMilli(), 10),
			"RPC_CLIENT="+req.Client)
		stdout := &capped{max: MaxReplyBody}
		stderr := &tail{max: 4 << 10}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		killGroup(cmd)
		// A grandchild holding the pipes open must not outlive the deadline.
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		switch {
		case ctx.Err() != nil:
			return reply.Reply{}, fmt.Errorf("exec: %w", context.Cause(ctx))
		case stdout.over:
			return reply.Reply{}, fmt.Errorf("exec: %w", errTooLarge)
		case err != nil:
			if line := stderr.lastLine(); line != "" {
				return reply.Reply{}, fmt.Errorf("exec: %v: %s", err, line)
			}
			return reply.Reply{}, fmt.Errorf("exec: %w", err)
		}
		return reply.Reply{Status: http.StatusOK, Body: stdout.b.Bytes()}, nil
	}
}

// capped is a buffer that takes up to max bytes, then fails.
type capped struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		c.over = true
		return 0, errTooLarge
	}
	return c.b.Write(p)
}

// tail keeps the last max bytes written to it.
type tail struct {
	b   []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// lastLine is the last non-blank line written.
func (t *tail) lastLine() string {
	s := strings.TrimRight(string(t.b), " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
