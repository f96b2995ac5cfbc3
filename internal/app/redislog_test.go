package app

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRedisLogsThroughCommandLogger: a command's logger receives go-redis's
// own messages (its pool's failed dials), as warnings in the command's
// format, at most one per interval.
func TestRedisLogsThroughCommandLogger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	var out syncBuffer
	lc := logConfig{level: "info", format: "json"}
	if _, err := lc.logger(&out); err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	defer cl.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := cl.Ping(ctx).Err(); err == nil {
			t.Fatal("PING to a closed port succeeded")
		}
		cancel()
	}
	got := out.String()
	if n := strings.Count(got, `"msg":"redis client"`); n != 1 {
		t.Fatalf("%d lines of go-redis in the command's log after 3 failed dials, want 1 (the others held back):\n%s", n, got)
	}
	if !strings.Contains(got, `"level":"WARN"`) || !strings.Contains(got, `"detail":"connection pool: failed to dial`) {
		t.Errorf("go-redis's line: %s", got)
	}
}
