package ingest

import (
	"flag"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// RegisterFlags binds c's fields to flags of fs (the command layer parses
// them); the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Topic, "topic", c.Topic, "topic events are written to")
	fs.StringVar(&c.Routes, "routes", c.Routes, "routes file (YAML): each event's topic, key and dead-letter topic, runtime rules (drop, sample, redirect) and per-key overflow; reloaded on change (default: every event to --topic)")
	fs.StringVar(&c.DeadLetterTopic, "dead-letter-topic", c.DeadLetterTopic, "topic invalid events are written to (default <topic>.invalid)")
	cliflag.Bytes(fs, &c.MaxBodyBytes, "max-body-bytes", "largest request body as sent (413 past it)")
	cliflag.Bytes(fs, &c.MaxDecompressedBytes, "max-decompressed-bytes", "largest request body after gzip/zstd decompression (413 past it)")
	fs.IntVar(&c.MaxEvents, "max-events", c.MaxEvents, "most events in one request (413 past it)")
	cliflag.Bytes(fs, &c.MaxInflightBytes, "max-inflight-bytes", "request bodies held in memory at once, across all requests (503 past it)")
	fs.DurationVar(&c.BodyIdleTimeout, "body-idle-timeout", c.BodyIdleTimeout, "a request body that sends no byte for this long is answered 408 and gives back its memory (0: only --read-timeout)")
	cliflag.Bytes(fs, &c.MaxEventBytes, "max-event-bytes", "largest event (rejected and dead-lettered past it)")
	fs.DurationVar(&c.WriteTimeout, "produce-timeout", c.WriteTimeout, "how long a request waits for Kafka's acknowledgement (ack=kafka) or the spool (ack=spool) before 503")
	fs.DurationVar(&c.RetryAfter, "retry-after", c.RetryAfter, "Retry-After sent with 503 answers")
	cliflag.List(fs, &c.AllowedOrigins, "cors-origins", "CORS origins allowed, comma-separated scheme://host[:port], or *")
	cliflag.Prefixes(fs, &c.TrustedProxies, "trusted-proxies", "IPs or CIDR prefixes whose X-Forwarded-For is believed, comma-separated")
	c.Privacy.RegisterFlags(fs)
}
