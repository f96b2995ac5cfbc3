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
	"time"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/logship"
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
	// partition, in order); empty: host:source.
	Key  string
	File string // follow this file like tail -F; empty: stdin
	// Checkpoint is where the position in File is kept (empty: File + ".ship-pos").
	Checkpoint  string
	Poll        time.Duration // how often a followed file is checked at its end
	BatchSize   int
	Linger      time.Duration
	SendTimeout time.Duration
	StopTimeout time.Duration // on interrupt, how long the last batch may take
	BearerToken string
	// MaxMessageBytes is the topic's max.message.bytes (without Target;
	// 0: Kafka's default): a line's event over it is rejected at once.
	MaxMessageBytes int32
	// Security is TLS and SASL to the brokers (without Target).
	Security kafka.Security
	testPipe sender // the tests' fault seam: sent to instead of a sink
}

// DefaultConfig returns the defaults of `inlet ship`.
func DefaultConfig() Config {
	return Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "logs", Format: "raw", Event: "log",
		Poll: 200 * time.Millisecond, BatchSize: 500, Linger: 50 * time.Millisecond,
		SendTimeout: 10 * time.Second, StopTimeout: 5 * time.Second}
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
	case c.Target != "" && (c.Security.TLSEnabled() || c.Security.SASL != ""):
		return errors.New("ship: --kafka-tls and --kafka-sasl go with --brokers, not --target (use an https:// target for TLS to inlet)")
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	return nil
}

// withDefaults fills in Key and Checkpoint when empty.
func (c Config) withDefaults() Config {
	if c.Key == "" {
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

// sender is what Run sends batches to: several in flight at a time,
// answered in order (logship.KafkaSink's Send and Resume, which document
// the contract), or one at a time (oneBatch).
type sender interface {
	Send(ctx context.Context, records [][]byte, done func(error))
	Resume()
	Close(ctx context.Context) error
}

var _ sender = (*logship.KafkaSink)(nil)

// oneBatch makes a sender of a logship.Sink: Send waits for Write, each
// with its own timeout.
type oneBatch struct {
	logship.Sink
	timeout time.Duration
}

func (o oneBatch) Send(ctx context.Context, records [][]byte, done func(error)) {
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	done(o.Write(wctx, records))
}

func (oneBatch) Resume() {}

// flights is how many batches Run keeps in flight to Kafka: enough to
// cover the round trips, and within what a KafkaSink buffers.
const flights = 8

// pipe returns where Run sends, and how many batches it may keep in flight.
func (c Config) sender(log *slog.Logger) (sender, int, error) {
	if c.testPipe != nil {
		return c.testPipe, flights, nil
	}
	if c.Target != "" {
		s, err := c.inletSink()
		return oneBatch{s, c.SendTimeout}, 1, err
	}
	sec, err := c.Security.Opts(log)
	if err != nil {
		return nil, 0, err
	}
	s, err := logship.NewKafkaSink(logship.KafkaConfig{Brokers: c.Brokers, Topic: c.Topic,
		MaxMessageBytes: c.MaxMessageBytes, Opts: sec})
	return s, flights, err
}

func (c Config) inletSink() (logship.Sink, error) {
	opts := []client.Option{client.WithHTTPClient(&http.Client{Timeout: c.SendTimeout})}
	if c.BearerToken != "" {
		opts = append(opts, client.WithBearer(c.BearerToken))
	}
	cl, err := client.New(c.Target, opts...)
	if err != nil {
		return nil, err
	}
	return logship.NewInletSink(cl), nil
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
	pipe, maxFlights, err := cfg.sender(log)
	if err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
		defer cancel()
		pipe.Close(cctx)
	}()
	enc := newLineEncoder(cfg)
	lines := make(chan record, 4*cfg.BatchSize)
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	readErr := make(chan error, 1)
	var cp *checkpoint
	if cfg.File != "" {
		cp = &checkpoint{path: cfg.Checkpoint}
		start, err := cp.load()
		if err != nil {
			return err
		}
		f := &follower{path: cfg.File, poll: cfg.Poll, log: log}
		go func() { readErr <- f.run(readCtx, start, enc, lines) }()
	} else {
		go func() { readErr <- readLines(readCtx, stdin, enc, lines) }()
	}

	var (
		read, acked, rejected int64
		batch                 []record
		readDone              bool
		linger                = time.NewTimer(time.Hour)
		// window is the batches in flight, in the order sent. They are
		// retired from its head only, so the checkpoint never passes a
		// batch not acknowledged, whatever order the answers come in.
		window  []*flight
		acks    = make(chan *flight, maxFlights) // room for every flight: a done never waits
		backoff = 100 * time.Millisecond
		// fatal is a refusal for good of a batch by Kafka (other than as
		// too large, which is found line by line): sending it again cannot
		// help, so ship stops, its checkpoint before the batch.
		fatal error
	)
	linger.Stop()
	launch := func(sendCtx context.Context, f *flight) {
		f.err, f.done = nil, false
		window = append(window, f)
		pipe.Send(sendCtx, f.recs, func(err error) {
			f.err = err
			acks <- f
		})
	}
	// answer takes one answer; false if sendCtx ended first.
	answer := func(sendCtx context.Context) bool {
		select {
		case f := <-acks:
			f.done = true
			return true
		case <-sendCtx.Done():
			return false
		}
	}
	// sendEach sends records one at a time, each alone in flight; those
	// refused alone as too large are reported as rejected. It returns at
	// the first other failure (all are sent again, the first ones twice).
	sendEach := func(sendCtx context.Context, recs [][]byte) error {
		var (
			rejected int
			first    error
		)
		for _, r := range recs {
			pipe.Resume()
			c := make(chan error, 1)
			pipe.Send(sendCtx, [][]byte{r}, func(err error) { c <- err })
			var err error
			select {
			case err = <-c:
			case <-sendCtx.Done():
				return sendCtx.Err()
			}
			var rej *logship.RejectedError
			switch {
			case err == nil:
				continue
			case errors.As(err, &rej):
				rejected += rej.N
			case errors.Is(err, logship.ErrTooLarge):
				rejected++
			default:
				return err
			}
			if first == nil {
				first = err
			}
		}
		pipe.Resume() // the last one's refusal must not fail the batches after
		if rejected > 0 {
			return &logship.RejectedError{N: rejected, Err: first}
		}
		return nil
	}
	// retire settles the answered batches at the head of the window. When
	// one failed, it waits for the rest of the window, and after a backoff
	// sends them all again, in order (those that landed too: duplicates,
	// so that none lands ahead of the failed one's second copy), but for
	// the failed one's first lines that landed (logship.Landed). It
	// returns false if sendCtx ended first.
	retire := func(sendCtx context.Context) bool {
		for len(window) > 0 && window[0].done {
			f := window[0]
			var rej *logship.RejectedError
			if f.err != nil && !errors.As(f.err, &rej) {
				if kafka.IsPermanent(f.err) && !errors.Is(f.err, logship.ErrTooLarge) {
					fatal = fmt.Errorf("ship: Kafka refuses the lines for good, sending them again cannot help (check the topic's configuration and ACLs): %w", f.err)
					return false
				}
				for _, g := range window {
					for !g.done {
						if !answer(sendCtx) {
							return false
						}
					}
				}
				log.Warn("ship: sending a batch failed; retrying", "lines", len(f.lines), "batches", len(window), "err", f.err, "backoff", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-sendCtx.Done():
					t.Stop()
					return false
				}
				backoff = min(2*backoff, 5*time.Second)
				pipe.Resume()
				again := window
				window = nil
				for i, g := range again {
					if i == 0 {
						// Everything before it was acknowledged: its
						// own first lines that landed are not sent
						// again (those after it are, for the order).
						g.recs = g.recs[logship.Landed(g.err):]
					}
					if i == 0 && errors.Is(g.err, logship.ErrTooLarge) {
						// Kafka refused a batch holding these lines
						// as too large: one at a time finds the line
						// too large alone (whole, it would fail for
						// ever). Those after it go whole.
						g.err, g.done = sendEach(sendCtx, g.recs), true
						window = append(window, g)
						continue
					}
					launch(sendCtx, g)
				}
				continue
			}
			n := int64(len(f.lines))
			if rej != nil {
				rejected += int64(rej.N)
				log.Warn("ship: lines rejected", "count", rej.N, "err", rej.Err)
				n -= int64(rej.N)
			}
			acked += n
			if cp != nil {
				if err := cp.save(f.lines[len(f.lines)-1].pos); err != nil {
					log.Error("ship: saving the checkpoint", "err", err)
				}
			}
			backoff = 100 * time.Millisecond
			window[0] = nil
			window = window[1:]
		}
		return true
	}
	// send puts the batch in flight once the window has room; false if
	// sendCtx ended first.
	send := func(sendCtx context.Context) bool {
		if len(batch) == 0 {
			return true
		}
		for len(window) >= maxFlights {
			if !answer(sendCtx) || !retire(sendCtx) {
				return false // the batch is kept: finish sends it
			}
		}
		f := &flight{lines: batch, recs: make([][]byte, len(batch))}
		for i, l := range batch {
			f.recs[i] = l.event
		}
		batch = nil
		launch(sendCtx, f)
		return true
	}
	// drain sends the batch and waits until every one was acknowledged;
	// false if sendCtx ended first.
	drain := func(sendCtx context.Context) bool {
		if !send(sendCtx) {
			return false
		}
		for len(window) > 0 {
			if !answer(sendCtx) || !retire(sendCtx) {
				return false
			}
		}
		return true
	}
	// finish sends what was read within StopTimeout after an interrupt.
	// What was in flight was sent with ctx, now done: it fails, and is sent
	// again with the new context.
	finish := func() {
		stopReading()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
		defer cancel()
		for l := range drainLines(lines, readDone) {
			read++
			batch = append(batch, l)
			if len(batch) >= cfg.BatchSize && !send(sctx) {
				break
			}
		}
		drain(sctx)
	}
	for {
		var lc <-chan record = lines
		if readDone {
			lc = nil
		}
		select {
		case l, ok := <-lc:
			if !ok {
				readDone = true
				if err := <-readErr; err != nil && ctx.Err() == nil {
					return fmt.Errorf("ship: reading: %w (%d lines read, %d acknowledged)", err, read, acked)
				}
				if ctx.Err() != nil {
					break
				}
				drain(ctx)
				return fatalResult(fatal, read, acked, rejected)
			}
			read++
			batch = append(batch, l)
			if len(batch) == 1 && cfg.Linger > 0 {
				linger.Reset(cfg.Linger)
			}
			if len(batch) >= cfg.BatchSize || cfg.Linger == 0 {
				linger.Stop()
				send(ctx)
			}
		case <-linger.C:
			send(ctx)
		case f := <-acks:
			f.done = true
			retire(ctx)
		case <-ctx.Done():
			finish()
			return fatalResult(fatal, read, acked, rejected)
		}
		if fatal != nil {
			stopReading()
			return fatalResult(fatal, read, acked, rejected)
		}
	}
}

// flight is a batch in flight.
type flight struct {
	lines []record
	recs  [][]byte
	err   error // the answer, set before the flight is sent on acks
	done  bool  // answered; Run's loop's own
}

// fatalResult is result, or fatal with the counts when there is one.
func fatalResult(fatal error, read, acked, rejected int64) error {
	if fatal == nil {
		return result(read, acked, rejected)
	}
	return fmt.Errorf("%w (%d of %d lines read were not acknowledged, %d rejected)", fatal, read-acked, read, rejected)
}

func result(read, acked, rejected int64) error {
	if acked == read {
		return nil
	}
	return fmt.Errorf("ship: %d of %d lines read were not acknowledged (%d rejected)", read-acked, read, rejected)
}

// drainLines yields the lines already read, without waiting for more.
func drainLines(lines <-chan record, done bool) func(func(record) bool) {
	return func(yield func(record) bool) {
		if done {
			return
		}
		for {
			select {
			case l, ok := <-lines:
				if !ok || !yield(l) {
					return
				}
			default:
				return
			}
		}
	}
}
