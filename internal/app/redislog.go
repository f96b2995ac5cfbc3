package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inlet-dev/inlet/internal/ratelog"
)

// redisLogInterval is how often at most go-redis's own messages (a failed
// dial of its pool, say) reach the log: while Redis is down it writes one
// per attempt.
const redisLogInterval = 10 * time.Second

// redisLogger passes go-redis's messages, written through its one global
// logger, to the command's logger as warnings, at most once per
// redisLogInterval with the count of those held back, rather than to
// stderr in a format of its own and without a limit.
type redisLogger struct{ lim *ratelog.Limiter }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.lim.Log("detail", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

// logRedisTo sends go-redis's messages to log from now on.
func logRedisTo(log *slog.Logger) {
	redis.SetLogger(redisLogger{ratelog.New(log, slog.LevelWarn, "redis client", redisLogInterval)})
}
