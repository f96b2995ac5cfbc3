package worker

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestHandlerConfig: exactly one handler, the delays with --echo only and
// in order; --min-delay alone is a fixed delay.
func TestHandlerConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, "exactly one of"},
		{[]string{"--echo", "--exec", "cat"}, "exactly one of"},
		{[]string{"--exec", "cat", "--max-delay", "1s"}, "go with --echo"},
		{[]string{"--echo", "--min-delay", "2s", "--max-delay", "1s"}, "--min-delay <= --max-delay"},
		{[]string{"--http", "localhost:80"}, "HTTP target"},
		{[]string{"--http", "http://127.0.0.1:1/"}, ""},
		{[]string{"--exec", "cat"}, ""},
		{[]string{"--echo", "--min-delay", "30ms"}, ""},
	} {
		var c HandlerConfig
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		h, err := c.New()
		if tc.want == "" && (err != nil || h == nil) || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	h, err := HandlerConfig{Echo: true, MinDelay: 30 * time.Millisecond}.New()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := h(context.Background(), Request{Body: []byte("x")}); err != nil || time.Since(start) < 30*time.Millisecond {
		t.Errorf("--min-delay 30ms alone: answered after %v (%v), want 30 ms at least", time.Since(start), err)
	}
}
