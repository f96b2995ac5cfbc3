// Package ship is `inlet ship`: it sends the lines of a reader (stdin) or
// of a file it follows like tail -F, each as an event, to inlet or
// straight to Kafka, at-least-once and in order, keeping a followed file's
// position in a checkpoint.
package ship

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/logsink"
	"github.com/inlet-dev/inlet/internal/relay"
)

// Config configures Run: lines of stdin or of a followed file, each sent
// as an event to inlet (Target) or straight to Kafka (Brokers, Topic),
// at-least-once.
type Config struct {
	Target  string   // inlet's base URL; empty: Kafka
	Brokers []string // with no Target
	Topic   string
	Format  string // raw, json or logfmt
	Event   string // the events' name
	// Key is the anon_id of every event (inlet keys records by it: one
	// partition, in order); empty: host:source. Straight to Kafka, a Key
	// given is also the record key (partitioned by it); without one the
	// records have no key and go to partition 0.
	Key  string
	File string // follow this file like tail -F; empty: stdin
	// Checkpoint is where the position in File is kept (empty: File + ".ship-pos").
	Checkpoint  string
	Poll        time.Duration // how often a followed file is checked at its end
	BatchSize   int
	Linger      time.Duration
	SendTimeout time.Duration
	StopTimeout time.Duration // on interrupt, how long the last batch may take
	// ConnectTimeout is how long Run waits at start for Kafka to answer
	// (without Target), retrying, before it gives up with the cause; 0:
	// until interrupted (a follower started before Kafka).
	ConnectTimeout time.Duration
	BearerToken    string
	// MaxMessageBytes is the topic's max.message.bytes (without Target;
	// 0: Kafka's default): a line's event over it is rejected at once.
	MaxMessageBytes int32
	// Security is TLS and SASL to the brokers (without Target).
	Security   kafka.Security
	testSink   relay.Sink[[]byte] // the tests' fault seam: sent to instead of a sink, pipelined
	testResume func()
	recordKey  []byte // Key when given (withDefaults), the records' key straight to Kafka
	defaulted  bool   // withDefaults was applied
}

// DefaultConfig returns the defaults of `inlet ship`.
func DefaultConfig() Config {
	return Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "logs", Format: "raw", Event: "log",
		Poll: 200 * time.Millisecond, BatchSize: 500, Linger: 50 * time.Millisecond,
		SendTimeout: 10 * time.Second, StopTimeout: 5 * time.Second, ConnectTimeout: 30 * time.Second}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Target != "" && !strings.HasPrefix(c.Target, "http://") && !strings.HasPrefix(c.Target, "https://"):
		return fmt.Errorf("ship: --target %q: want http:// or https://", c.Target)
	case c.Target == "" && (len(c.Brokers) == 0 || c.Topic == ""):
		return errors.New("ship: give --target URL, or --brokers and --topic")
	case c.Format != "raw" && c.Format != "json" && c.Format != "logfmt":
		return fmt.Errorf("ship: --format %q: want raw, json or logfmt", c.Format)
	case c.Event == "":
		return errors.New("ship: --event must not be empty")
	case c.BatchSize <= 0 || c.BatchSize > 500:
		return errors.New("ship: --batch-size must be in 1..500 (inlet's --max-events)")
	case c.Poll <= 0 || c.SendTimeout <= 0 || c.StopTimeout <= 0 || c.Linger < 0:
		return errors.New("ship: --poll, --send-timeout and --stop-timeout must be positive")
	case c.ConnectTimeout < 0:
		return errors.New("ship: --connect-timeout must be positive, or 0 to wait for Kafka until interrupted")
	case c.Target != "" && (c.Security.TLSEnabled() || c.Security.SASL != ""):
		return errors.New("ship: --kafka-tls and --kafka-sasl go with --brokers, not --target (use an https:// target for TLS to inlet)")
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	return nil
}

// withDefaults fills in Key and Checkpoint when empty (once: a second
// call changes nothing).
func (c Config) withDefaults() Config {
	if c.defaulted {
		return c
	}
	c.defaulted = true
	if c.Key != "" {
		c.recordKey = []byte(c.Key)
	} else {
		host, _ := os.Hostname()
		c.Key = host + ":" + c.source()
	}
	if c.File != "" && c.Checkpoint == "" {
		c.Checkpoint = c.File + ".ship-pos"
	}
	return c
}

// source is what the events' context.source says: the followed file's
// absolute path, or stdin.
func (c Config) source() string {
	if c.File == "" {
		return "stdin"
	}
	src, _ := filepath.Abs(c.File)
	return src
}

// maxFlights is how many batches Run keeps in flight to Kafka: enough to
// cover the round trips, and within what a KafkaSink buffers.
const maxFlights = 8

// sink returns where Run sends, with the engine's settings for it.
func (c Config) sink(log *slog.Logger) (logsink.Sink, relay.Sink[[]byte], relay.Config[[]byte], error) {
	var s logsink.Sink
	var err error
	switch {
	case c.testSink != nil:
	case c.Target != "":
		opts := []client.Option{client.WithHTTPClient(&http.Client{Timeout: c.SendTimeout})}
		if c.BearerToken != "" {
			opts = append(opts, client.WithBearer(c.BearerToken))
		}
		var cl *client.Client
		if cl, err = client.New(c.Target, opts...); err == nil {
			s = logsink.NewInletSink(cl)
		}
	default:
		var sec []kgo.Opt
		if sec, err = c.Security.Opts(log); err == nil {
			s, err = logsink.NewKafkaSink(logsink.KafkaConfig{Brokers: c.Brokers, Topic: c.Topic, Key: c.recordKey,
				MaxMessageBytes: c.MaxMessageBytes, Opts: sec})
		}
	}
	if err != nil {
		return nil, nil, relay.Config[[]byte]{}, err
	}
	rs, cfg := logsink.Relay(s, c.SendTimeout, c.BatchSize)
	if c.testSink != nil {
		rs, cfg.Windows, cfg.Resume = c.testSink, maxFlights, c.testResume
	}
	cfg.Windows = min(cfg.Windows, maxFlights)
	cfg.MinBackoff = 100 * time.Millisecond
	// Kafka's refusal for good of a batch (other than as too large, which
	// is found line by line): sending it again cannot help, so ship stops,
	// its checkpoint before the batch.
	cfg.Fatal = func(err error) bool { return kafka.IsPermanent(err) && !errors.Is(err, logsink.ErrTooLarge) }
	cfg.OnFail = func(err error, lines, attempt int) {
		log.Warn("ship: sending a batch failed; retrying", "lines", lines, "attempt", attempt, "err", err)
	}
	return s, rs, cfg, nil
}

// record is one line read, encoded as an event, with the position after
// it (file mode).
type record struct {
	event []byte
	pos   filePos
}

// Run sends the lines of stdin (or of cfg.File, followed) until stdin
// ends or ctx is done. It returns nil only when every line read was
// acknowledged; otherwise an error with the count of lines that were not.
func Run(ctx context.Context, cfg Config, stdin io.Reader, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	s, rs, rcfg, err := cfg.sink(log)
	if err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	if s != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
			defer cancel()
			s.Close(cctx)
		}()
	}
	if k, ok := s.(*logsink.KafkaSink); ok {
		// franz-go would wait for ever for an unreachable Kafka, with
		// nothing said: fail within ConnectTimeout, with the cause, as
		// tail, worker and verify do (they try once).
		err := kafka.Reach(ctx, k.Ping, cfg.ConnectTimeout, func(attempt int, err error, left time.Duration) {
			log.Warn("ship: kafka does not answer; retrying", "brokers", cfg.Brokers, "attempt", attempt,
				"giving_up_in", left, "err", cfg.Security.DescribeConnError(err))
		})
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("ship: interrupted while waiting for kafka at %v to answer; no line was read or sent", cfg.Brokers)
		}
		if err != nil {
			return fmt.Errorf("ship: reaching kafka at %v: %w (gave up after --connect-timeout %v; no line was read or sent)",
				cfg.Brokers, cfg.Security.ConnErr(err), cfg.ConnectTimeout)
		}
	}
	enc := newLineEncoder(cfg)
	src := &source{lines: make(chan record, 4*cfg.BatchSize), stop: make(chan struct{}),
		batchSize: cfg.BatchSize, linger: cfg.Linger, log: log}
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	readErr := make(chan error, 1)
	if cfg.File != "" {
		src.cp = &checkpoint{path: cfg.Checkpoint}
		start, err := src.cp.load()
		if err != nil {
			return err
		}
		f := &follower{path: cfg.File, poll: cfg.Poll, log: log}
		go func() { readErr <- f.run(readCtx, start, enc, src.lines) }()
	} else {
		go func() { readErr <- readLines(readCtx, stdin, enc, src.lines) }()
	}
	src.replay = relay.Replay[[]byte]{Read: src.read, Done: src.done}
	eng := relay.New[[]byte](&src.replay, rs, rcfg)
	go func() {
		select {
		case <-ctx.Done():
			// Send what was read within StopTimeout: the engine drains
			// once read says io.EOF, and is stopped at the deadline.
			stopReading()
			close(src.stop)
			dctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
			defer cancel()
			eng.Drain(dctx)
		case <-eng.Done():
		}
	}()
	runErr := eng.Run()
	stopReading()
	read, acked, rejected := src.taken.Load(), src.acked.Load(), src.rejected.Load()
	switch {
	case runErr != nil:
		return fmt.Errorf("ship: Kafka refuses the lines for good, sending them again cannot help (check the topic's configuration and ACLs): %w (%d of %d lines read were not acknowledged, %d rejected)", runErr, read-acked, read, rejected)
	case ctx.Err() == nil:
		if err := <-readErr; err != nil {
			return fmt.Errorf("ship: reading: %w (%d lines read, %d acknowledged)", err, read, acked)
		}
	}
	if acked == read {
		return nil
	}
	return fmt.Errorf("ship: %d of %d lines read were not acknowledged (%d rejected)", read-acked, read, rejected)
}

// source is Run's relay source: the lines read, in batches of up to
// batchSize gathered within linger of the first, and the checkpoint of a
// followed file, saved once a batch is settled.
type source struct {
	lines     chan record
	stop      chan struct{} // closed on interrupt: yield what was read, then io.EOF
	batchSize int
	linger    time.Duration
	cp        *checkpoint // nil for stdin
	log       *slog.Logger
	replay    relay.Replay[[]byte]

	taken, acked, rejected atomic.Int64 // lines
}

// read gathers the next batch of lines: up to batchSize, within linger
// of the first. io.EOF once the reader is done, or, after an interrupt,
// once what was read is taken. A batch is yielded even if ctx ended while
// it was gathered: the engine keeps it.
func (s *source) read(ctx context.Context) (relay.Batch[[]byte], error) {
	var (
		events  [][]byte
		last    filePos
		wait    <-chan time.Time
		stopped bool // after an interrupt: what was read, without waiting
	)
gather:
	for len(events) < s.batchSize {
		var l record
		var ok bool
		select {
		case l, ok = <-s.lines:
		default:
			if stopped || len(events) > 0 && s.linger == 0 {
				break gather
			}
			if len(events) > 0 && wait == nil {
				t := time.NewTimer(s.linger)
				defer t.Stop()
				wait = t.C
			}
			select {
			case l, ok = <-s.lines:
			case <-s.stop:
				stopped = true
				continue
			case <-wait:
				break gather
			case <-ctx.Done():
				break gather
			}
		}
		if !ok {
			break
		}
		events, last = append(events, l.event), l.pos
	}
	s.taken.Add(int64(len(events)))
	if len(events) == 0 {
		if err := ctx.Err(); err != nil {
			return relay.Batch[[]byte]{}, err
		}
		return relay.Batch[[]byte]{}, io.EOF
	}
	return relay.Batch[[]byte]{Records: events, Meta: last}, nil
}

// done counts the lines settled, acknowledged or rejected, and saves the
// checkpoint once a batch is.
func (s *source) done(b relay.Batch[[]byte], from, to int, err error) {
	n := int64(to - from)
	if err != nil {
		k := n
		var rej *logsink.RejectedError
		if errors.As(err, &rej) {
			k = min(int64(rej.N), n)
		}
		s.rejected.Add(k)
		s.log.Warn("ship: lines rejected", "count", k, "err", err)
		n -= k
	}
	s.acked.Add(n)
	if s.cp != nil && to == len(b.Records) {
		if err := s.cp.save(b.Meta.(filePos)); err != nil {
			s.log.Error("ship: saving the checkpoint", "err", err)
		}
	}
}
