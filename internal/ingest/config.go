// Package ingest is inlet's HTTP edge: it takes events over POST /v1/batch,
// POST /v1/track and the GET /i pixel, turns them into records with package
// event, and hands them to a Sink, answering once the Sink's guarantee holds.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// Sink takes the records of one request. Write blocks until the records are
// as safe as the sink promises (acknowledged by Kafka, on disk, or only
// enqueued) and returns nil only then. It must be safe for concurrent use.
// An error means the request is answered 503 and the client should retry;
// records of a failed Write may still be delivered (at-least-once).
//
// recs and every byte slice in them are the sink's once Write is called: the
// caller only reads them afterwards, never changes or reuses them, and none of
// them aliases the pooled buffer the request body was read into. A sink may
// therefore keep them after Write returns without copying (ack=none hands them
// to the Kafka client, which sends them later).
type Sink interface {
	Write(ctx context.Context, recs []event.Record) error
}

// Errors a Sink returns (wrapped) to say how the request should be answered.
var (
	// ErrSinkFull: the sink is out of room; the client gets 503 with
	// Retry-After.
	ErrSinkFull = errors.New("ingest: sink full")
	// ErrSinkRejected: the sink (Kafka) refused the records for good, so a
	// retry cannot succeed: the client gets 422 with the reason.
	ErrSinkRejected = errors.New("ingest: records refused")
	// ErrSinkTooLarge: a record is larger than the sink (Kafka's
	// max.message.bytes) takes: the client gets 413.
	ErrSinkTooLarge = errors.New("ingest: record too large for kafka")
)

// Config configures the HTTP ingest.
type Config struct {
	Topic           string // events topic
	DeadLetterTopic string // invalid events; empty means Topic + ".invalid"

	MaxBodyBytes         int64 // request body as sent (413 past it)
	MaxDecompressedBytes int64 // body after gzip/zstd (413 past it)
	event.Limits               // events per batch, bytes per event
	// MaxInflightBytes bounds the request bodies held in memory at once,
	// across all requests (503 with Retry-After past it).
	MaxInflightBytes int64

	// AckStatus is the status of a successful answer: 200 when the sink
	// waits for durability (ack=kafka, ack=spool), 202 when it only enqueues.
	AckStatus int
	// WriteTimeout bounds how long a request waits for the sink (503 past it).
	WriteTimeout time.Duration
	// RetryAfter is the Retry-After sent with 503 answers.
	RetryAfter time.Duration

	// AllowedOrigins are the CORS origins allowed; "*" allows any.
	AllowedOrigins []string
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Topic:                "events",
		MaxBodyBytes:         1 << 20,
		MaxDecompressedBytes: 8 << 20,
		Limits:               event.DefaultLimits,
		MaxInflightBytes:     64 << 20,
		AckStatus:            200,
		WriteTimeout:         10 * time.Second,
		RetryAfter:           2 * time.Second,
		AllowedOrigins:       []string{"*"},
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Topic == "":
		return errors.New("ingest: topic is empty")
	case c.MaxBodyBytes <= 0, c.MaxDecompressedBytes <= 0:
		return errors.New("ingest: body limits must be positive")
	case c.MaxInflightBytes < c.MaxDecompressedBytes:
		return fmt.Errorf("ingest: max in-flight bytes (%d) is below max decompressed bytes (%d)", c.MaxInflightBytes, c.MaxDecompressedBytes)
	case c.MaxDecompressedBytes < c.MaxBodyBytes:
		return fmt.Errorf("ingest: max decompressed bytes (%d) is below max body bytes (%d)", c.MaxDecompressedBytes, c.MaxBodyBytes)
	case c.MaxEvents <= 0, c.MaxEventBytes <= 0:
		return errors.New("ingest: event limits must be positive")
	case c.AckStatus != 200 && c.AckStatus != 202:
		return fmt.Errorf("ingest: ack status %d: want 200 or 202", c.AckStatus)
	case c.WriteTimeout <= 0:
		return errors.New("ingest: write timeout must be positive")
	}
	for _, o := range c.AllowedOrigins {
		if o != "*" && !strings.Contains(o, "://") {
			return fmt.Errorf("ingest: CORS origin %q: want scheme://host[:port] or *", o)
		}
	}
	return nil
}

func (c Config) deadLetterTopic() string {
	if c.DeadLetterTopic != "" {
		return c.DeadLetterTopic
	}
	return c.Topic + ".invalid"
}

// ParseProxies parses a comma-separated list of IPs and CIDR prefixes.
func ParseProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an IP or CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
