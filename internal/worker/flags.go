package worker

import (
	"errors"
	"flag"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// RegisterFlags registers c's flags on fs (`inlet worker`); the values in
// c are their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Service, "service", c.Service, "`NAME` of the service to answer (required)")
	cliflag.List(fs, &c.Brokers, "brokers", "Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&c.Topic, "topic", c.Topic, "request topic (default rpc.<service>)")
	fs.StringVar(&c.Group, "group", c.Group, "consumer group; a new one starts a minute back in the topic, older requests being past their deadline (default inlet-worker.<service>)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "requests handled at once at most; when all are busy, fetching waits")
	fs.DurationVar(&c.ReplyLinger, "reply-linger", c.ReplyLinger, "how long Kafka replies wait to share a produce request (fewer requests for the broker)")
	fs.StringVar(&c.ReplyCompression, "reply-compression", c.ReplyCompression, "batch compression of replies to Kafka: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&c.RedisAddr, "redis", c.RedisAddr, "Redis `host:port` for replies addressed redis:<channel>")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", c.StopTimeout, "on SIGINT/SIGTERM, how long requests in flight may take to finish")
	c.Security.RegisterFlags(fs)
}

// HandlerConfig says how `inlet worker` answers requests: exactly one of
// Echo, HTTP and Exec.
type HandlerConfig struct {
	// Echo answers each request with its own body after a uniformly random
	// delay in [MinDelay, MaxDelay]; MaxDelay 0 is MinDelay.
	Echo               bool
	MinDelay, MaxDelay time.Duration
	// HTTP is the URL each request is POSTed to (HTTP).
	HTTP string
	// Exec is the shell command run for each request (Exec).
	Exec string
}

// RegisterFlags registers c's flags on fs.
func (c *HandlerConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Echo, "echo", c.Echo, "answer each request with its own body and content type")
	fs.DurationVar(&c.MinDelay, "min-delay", c.MinDelay, "with --echo: least synthetic work per request")
	fs.DurationVar(&c.MaxDelay, "max-delay", c.MaxDelay, "with --echo: most synthetic work per request (uniformly random between the two)")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "POST each request to `URL`; its response is the reply")
	fs.StringVar(&c.Exec, "exec", c.Exec, "run `CMD` with sh -c per request: request body on stdin, reply body on stdout; a non-zero exit is an error")
}

// New validates c and makes its handler.
func (c HandlerConfig) New() (Handler, error) {
	n := 0
	for _, set := range []bool{c.Echo, c.HTTP != "", c.Exec != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, errors.New("worker: give exactly one of --echo, --http URL and --exec CMD")
	case !c.Echo && (c.MinDelay != 0 || c.MaxDelay != 0):
		return nil, errors.New("worker: --min-delay and --max-delay go with --echo")
	case c.MaxDelay == 0 && c.MinDelay > 0:
		c.MaxDelay = c.MinDelay // --min-delay alone: a fixed delay
	}
	switch {
	case c.MinDelay < 0 || c.MaxDelay < c.MinDelay:
		return nil, errors.New("worker: want 0 <= --min-delay <= --max-delay")
	case c.Echo:
		return Echo(c.MinDelay, c.MaxDelay), nil
	case c.HTTP != "":
		return HTTP(c.HTTP, nil)
	}
	return Exec(c.Exec), nil
}
