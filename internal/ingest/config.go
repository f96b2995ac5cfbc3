// Package ingest is inlet's HTTP edge: it takes events over POST /v1/batch,
// POST /v1/track and the GET /i pixel, turns them into records with package
// event, and hands them to a Sink, answering once the Sink's guarantee holds.
//
// With an Authenticator (WithAuth, --auth) every route checks the client's
// credentials before it reads the body, its rate and its groups; with a
// Catalog (WithCatalog, --catalog) each event gets its group and catalog
// code, one Resolve per request, and the tracking plan is enforced by the
// catalog's mode (plan.go).
package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/privacy"
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

// RecordsDone is implemented by a Sink that can be done with a Write's
// records when it returns (the spool copied them; Kafka acknowledged them).
// ingest then reuses their memory for a later request; from a Sink without
// it, ingest assumes it may keep them (ack=none: the producer holds them
// until Kafka has them), and never reuses them.
type RecordsDone interface {
	// RecordsDone reports whether the sink holds nothing of the records
	// of a Write that returned err: neither it nor anything it handed them
	// to reads them any more.
	RecordsDone(err error) bool
}

// Errors a Sink returns (wrapped) to say how the request should be answered.
var (
	// ErrSinkFull: the sink is out of room; the client gets 503 with
	// Retry-After. Wrapped beside the cause (fmt.Errorf("%w: %w",
	// ErrSinkFull, cause)), the answer names the room that ran out.
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
	// Routes is the routes file (--routes); "" sends every event to Topic.
	// The gateway opens it and hands it over with WithRoutes.
	Routes string

	MaxBodyBytes         int64 // request body as sent (413 past it)
	MaxDecompressedBytes int64 // body after gzip/zstd (413 past it)
	event.Limits               // events per batch, bytes per event
	// MaxInflightBytes bounds the request bodies held in memory at once,
	// across all requests (503 with Retry-After past it). The requests of
	// one connection may hold at most a quarter of it together
	// (membudget.ConnShareDivisor), but always one body of each limit
	// (429 with Retry-After past it), when the HTTP server gives each
	// connection a membudget.Conn (http.Server.ConnContext).
	MaxInflightBytes int64
	// BodyIdleTimeout ends a request body that sends no byte for this long
	// (408), giving back what it held of the budget long before the
	// server's read timeout. Zero: only the read timeout applies.
	BodyIdleTimeout time.Duration

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

	// DefaultGroup is the group of events that name none (context.group)
	// and whose client has no default group, with credentials on and no
	// catalog; with a catalog, its DefaultGroup is used. Empty: "default".
	DefaultGroup string

	// Privacy is the IP policy and the redaction key (privacy.go).
	Privacy privacy.Config
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Topic:                "events",
		MaxBodyBytes:         1 << 20,
		MaxDecompressedBytes: 8 << 20,
		Limits:               event.DefaultLimits,
		MaxInflightBytes:     64 << 20,
		BodyIdleTimeout:      5 * time.Second,
		AckStatus:            200,
		WriteTimeout:         10 * time.Second,
		RetryAfter:           2 * time.Second,
		AllowedOrigins:       []string{"*"},
		Privacy:              privacy.DefaultConfig(),
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
	case c.BodyIdleTimeout < 0:
		return errors.New("ingest: body idle timeout must not be negative")
	}
	for _, o := range c.AllowedOrigins {
		if o != "*" && !strings.Contains(o, "://") {
			return fmt.Errorf("ingest: CORS origin %q: want scheme://host[:port] or *", o)
		}
	}
	if err := c.Privacy.Validate(); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	return nil
}

// connShare is what the requests of one connection may hold of the
// in-flight budget: a quarter of it, but at least one request of the
// largest size (its body as sent and decompressed, held at once).
func (c Config) connShare() int64 {
	return max(c.MaxInflightBytes/membudget.ConnShareDivisor, c.MaxBodyBytes+c.MaxDecompressedBytes)
}

// DeadLetterTopicName is where invalid events go: DeadLetterTopic, else
// Topic + ".invalid".
func (c Config) DeadLetterTopicName() string {
	if c.DeadLetterTopic != "" {
		return c.DeadLetterTopic
	}
	return c.Topic + ".invalid"
}
