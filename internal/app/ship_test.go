package app

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/ship"
)

func noEnv(string) string { return "" }

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line-%d level=info n=%d\n", i, i)
	}
	return b.String()
}

func TestParseShipErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"format":   {"--format", "xml"},
		"target":   {"--target", "ftp://x"},
		"batch":    {"--batch-size", "501"},
		"no-topic": {"--topic", ""},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr strings.Builder
			if _, err := ParseShip(args, Env{Stdout: &stderr, Stderr: &stderr, Getenv: noEnv}); err == nil {
				t.Errorf("%v accepted", args)
			}
		})
	}
}

// TestShipMainReadsEnvStdin: `inlet ship` through Main reads the lines of
// Env.Stdin (not the process's own), exits 0 once they were all
// acknowledged, and 1 with the count when inlet refuses them.
func TestShipMainReadsEnvStdin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		code   int
		stderr string
	}{
		{"acknowledged", http.StatusAccepted, 0, ""},
		{"refused", http.StatusBadRequest, 1, "40 of 40 lines read were not acknowledged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got atomic.Int64
			var order atomic.Bool // every line in order
			order.Store(true)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body io.Reader = r.Body
				if r.Header.Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(r.Body)
					if err != nil {
						t.Errorf("gzip: %v", err)
						return
					}
					body = zr
				}
				dec := json.NewDecoder(body)
				for {
					var ev struct {
						Props struct{ Line string } `json:"props"`
					}
					if err := dec.Decode(&ev); err == io.EOF {
						break
					} else if err != nil {
						t.Errorf("decoding: %v", err)
						break
					}
					if want := fmt.Sprintf("line-%d level=info n=%d", got.Load(), got.Load()); ev.Props.Line != want {
						order.Store(false)
					}
					got.Add(1)
				}
				w.WriteHeader(tc.status)
				if tc.status >= 400 {
					w.Write([]byte(`{"error":"no"}`))
				}
			}))
			defer srv.Close()
			var stderr strings.Builder
			env := Env{Stdin: strings.NewReader(lines(0, 40)), Stdout: io.Discard, Stderr: &stderr, Getenv: noEnv}
			code := Main(context.Background(), []string{"ship", "--target", srv.URL, "--linger", "1ms"}, env)
			if code != tc.code || got.Load() != 40 || !order.Load() || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d (want %d), inlet got %d lines (want 40, in order: %v); stderr:\n%s", code, tc.code, got.Load(), order.Load(), stderr.String())
			}
		})
	}
}

// TestShipKafkaUnreachable: `seq 1 10 | inlet ship --brokers 127.0.0.1:1
// --topic x` exits 1 within its --connect-timeout, with the cause, having
// said that it retries while it waits. It used to wait for ever, silent.
// The default bound is 30 s (issue 33); the test sets 2 s.
func TestShipKafkaUnreachable(t *testing.T) {
	if d := ship.DefaultConfig().ConnectTimeout; d <= 0 || d > 30*time.Second {
		t.Fatalf("default --connect-timeout %v, want at most 30 s", d)
	}
	var stderr strings.Builder
	env := Env{Stdin: strings.NewReader(lines(0, 10)), Stdout: io.Discard, Stderr: &stderr, Getenv: noEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	code := Main(ctx, []string{"ship", "--brokers", "127.0.0.1:1", "--topic", "x", "--connect-timeout", "2s"}, env)
	took := time.Since(start)
	out := stderr.String()
	if code != 1 || ctx.Err() != nil || took > 10*time.Second {
		t.Fatalf("exit %d after %v (want 1 within --connect-timeout 2s); stderr:\n%s", code, took, out)
	}
	for _, want := range []string{"kafka does not answer; retrying", "reaching kafka at [127.0.0.1:1]", "connection refused", "--connect-timeout 2s"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
}
