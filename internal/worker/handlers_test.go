package worker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/reply"
)

func TestEcho(t *testing.T) {
	t.Parallel()
	req := Request{ID: "c1", ContentType: "text/plain", Body: []byte("hi")}
	ctx := context.Background()

	start := time.Now()
	rep, err := Echo(30*time.Millisecond, 60*time.Millisecond)(ctx, req)
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("echo took %v, want at least the min delay", d)
	}
	if err != nil || rep.Status != 200 || rep.ContentType != "text/plain" || string(rep.Body) != "hi" {
		t.Errorf("echo = %+v, %v", rep, err)
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := Echo(time.Minute, time.Minute)(short, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("echo past the deadline: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("echo ignored its deadline for %v", d)
	}
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/big":
			w.Write(make([]byte, MaxReplyBody+1))
			return
		case "/slow":
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/x-answer")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, strings.Join([]string{r.Method, r.URL.RawQuery, r.Header.Get("Content-Type"),
			r.Header.Get("X-Trace-Id"), strings.Join(r.Header.Values("Accept"), "+"), strings.Join(r.Header.Values("Inlet-Client"), "+"), string(body)}, "|"))
	}))
	defer srv.Close()
	// The caller's own Inlet-Client header is replaced by the client the
	// gateway authenticated.
	req := Request{ID: "c1", ContentType: "application/json", Query: "q=1", Body: []byte(`{"a":1}`), Client: "web",
		Headers: http.Header{"X-Trace-Id": {"t9"}, "Accept": {"a/b", "c/d"}, "Connection": {"close"}, "Content-Length": {"999"},
			"Inlet-Client": {"admin"}},
		Deadline: time.Now().Add(10 * time.Second)}
	ctx := context.Background()

	h, err := HTTP(srv.URL+"/call?fixed=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := h(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := reply.Reply{Status: 201, ContentType: "text/x-answer", Body: []byte(`POST|fixed=2&q=1|application/json|t9|a/b+c/d|web|{"a":1}`)}
	if rep.Status != want.Status || rep.ContentType != want.ContentType || string(rep.Body) != string(want.Body) {
		t.Errorf("reply %+v %q, want %+v %q", rep, rep.Body, want, want.Body)
	}

	big, _ := HTTP(srv.URL+"/big", nil)
	if _, err := big(ctx, req); !errors.Is(err, errTooLarge) {
		t.Errorf("oversized response: %v", err)
	}

	slow, _ := HTTP(srv.URL+"/slow", nil)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := slow(short, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow service: %v, want deadline exceeded", err)
	}

	// A transport error: nothing listens there any more.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	down, _ := HTTP(gone.URL, nil)
	if _, err := down(ctx, req); err == nil || !strings.HasPrefix(err.Error(), "http: ") {
		t.Errorf("service down: %v", err)
	}

	for _, bad := range []string{"", "ftp://x/", "http://", "://x"} {
		if _, err := HTTP(bad, nil); err == nil {
			t.Errorf("HTTP(%q) accepted", bad)
		}
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	req := Request{ID: "c1", Service: "svc", ContentType: "text/plain", Query: "a=1", Body: []byte("hello\n"), Client: "web",
		Deadline: time.UnixMilli(1_900_000_000_000)}
	ctx := context.Background()
	tests := []struct {
		name, cmd string
		want      string // reply body, when wantErr is empty
		wantErr   string
	}{
		{name: "stdin to stdout", cmd: "tr a-z A-Z", want: "HELLO\n"},
		{name: "environment", cmd: `printf '%s %s %s %s %s %s' "$RPC_ID" "$RPC_SERVICE" "$RPC_CONTENT_TYPE" "$RPC_QUERY" "$RPC_DEADLINE" "$RPC_CLIENT"`,
			want: "c1 svc text/plain a=1 1900000000000 web"},
		{name: "no output", cmd: "cat >/dev/null", want: ""},
		{name: "failure", cmd: "echo partial; echo first >&2; echo 'no such record' >&2; echo >&2; exit 3",
			wantErr: "exec: exit status 3: no such record"},
		{name: "failure without stderr", cmd: "exit 1", wantErr: "exec: exit status 1"},
		{name: "too large", cmd: "head -c 2000000 /dev/zero", wantErr: "reply body over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := Exec(tt.cmd)(ctx, req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Status != 200 || string(rep.Body) != tt.want {
				t.Errorf("reply %d %q, want 200 %q", rep.Status, rep.Body, tt.want)
			}
		})
	}
	t.Run("deadline kills the command and its children", func(t *testing.T) {
		t.Parallel()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Exec("sleep 30 | cat; echo done")(short, req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v: the deadline did not stop the command", d)
		}
	})
}
