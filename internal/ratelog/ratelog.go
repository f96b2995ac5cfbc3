// Package ratelog logs a condition that may repeat thousands of times a
// second (a 503 per request in an outage, an undelivered record per kgo
// promise) once per interval, with the number of times it happened since
// the last line, so that an outage does not flood stderr.
package ratelog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Limiter logs at most one line per interval. It is safe for concurrent use.
type Limiter struct {
	log      *slog.Logger
	level    slog.Level
	msg      string
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// New returns a Limiter that logs msg at level at most once per interval.
func New(log *slog.Logger, level slog.Level, msg string, interval time.Duration) *Limiter {
	return &Limiter{log: log, level: level, msg: msg, interval: interval, now: time.Now}
}

// Log records one occurrence. The first occurrence of an interval is logged
// at once with args and "repeated", the number of occurrences suppressed
// since the previous line; the others are only counted. It never blocks on
// anything but the logger.
func (l *Limiter) Log(args ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.Log(context.Background(), l.level, l.msg, append(args, "repeated", n)...)
}

// Printer is a Limiter as the printf-style logger of a library that logs
// through a global logger of its own (go-redis's redis.SetLogger, which
// writes a line per failed dial while Redis is down): each message is one
// occurrence, logged as "detail" without Trim at its start.
type Printer struct {
	*Limiter
	Trim string
}

// Printf records the message format and v make.
func (p Printer) Printf(_ context.Context, format string, v ...any) {
	p.Log("detail", strings.TrimPrefix(fmt.Sprintf(format, v...), p.Trim))
}
