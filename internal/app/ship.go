package app

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/inlet-dev/inlet/client"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/logship"
)

// ShipConfig configures `inlet ship`: lines of stdin or of a followed
// file, each sent as an event to inlet (Target) or straight to Kafka
// (Brokers, Topic), at-least-once.
type ShipConfig struct {
	Target  string   // inlet's base URL; empty: Kafka
	Brokers []string // with no Target
	Topic   string
	Format  string // raw, json or logfmt
	Event   string // the events' name
	Key     string // anon_id of every event (inlet keys records by it: one partition, in order)
	File    string // follow this file like tail -F; empty: stdin
	// Checkpoint is where the position in File is kept (default File + ".ship-pos").
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
	log      logConfig
	testPipe shipPipe // the tests' fault seam: sent to instead of a sink
}

// Validate reports the first invalid setting.
func (c ShipConfig) Validate() error {
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

// ParseShip parses `inlet ship` arguments and environment into a config.
func ParseShip(args []string, env Env) (ShipConfig, error) {
	host, _ := os.Hostname()
	cfg := ShipConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "logs", Format: "raw", Event: "log",
		Poll: 200 * time.Millisecond, BatchSize: 500, Linger: 50 * time.Millisecond,
		SendTimeout: 10 * time.Second, StopTimeout: 5 * time.Second}
	fs := newFlags("ship", env)
	fs.StringVar(&cfg.Target, "target", "", "send to the inlet at `URL` (http://host:port); empty: straight to Kafka")
	cliflag.List(fs, &cfg.Brokers, "brokers", "without --target: Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "without --target: the topic to produce to (partition 0, so lines stay in order)")
	fs.StringVar(&cfg.Format, "format", cfg.Format, "each line is: raw (props.line), json (an object: the props) or logfmt (key=value pairs: the props)")
	fs.StringVar(&cfg.Event, "event", cfg.Event, "the events' name")
	fs.StringVar(&cfg.Key, "key", "", "the events' anon_id, inlet's record key: one key keeps the lines in order (default host:source)")
	fs.StringVar(&cfg.File, "file", "", "follow `PATH` like tail -F (across rotation and truncation) instead of reading stdin")
	fs.StringVar(&cfg.Checkpoint, "checkpoint", "", "where the position in --file is kept (default PATH.ship-pos)")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often a followed file is checked for new lines, rotation and truncation")
	fs.IntVar(&cfg.BatchSize, "batch-size", cfg.BatchSize, "most lines per batch")
	fs.DurationVar(&cfg.Linger, "linger", cfg.Linger, "how long the first line of a batch waits for more")
	fs.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "with --target: how long one attempt to send a batch may take; failed attempts are retried (to Kafka, batches in flight have no deadline: franz-go retries them, in order)")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "on SIGINT/SIGTERM, how long the lines read may take to be acknowledged")
	fs.Func("max-message-bytes", "without --target: the topic's max.message.bytes, if below Kafka's default 1000012: a line over it is rejected at once (a batch Kafka refuses as too large is sent again a line at a time)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 512 {
			return fmt.Errorf("want a number of bytes, at least 512")
		}
		cfg.MaxMessageBytes = int32(n)
		return nil
	})
	fs.StringVar(&cfg.BearerToken, "token", "", "with --target: send Authorization: Bearer `TOKEN`")
	cfg.Security.RegisterFlags(fs)
	cfg.log.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	if cfg.Key == "" {
		src := "stdin"
		if cfg.File != "" {
			src, _ = filepath.Abs(cfg.File)
		}
		cfg.Key = host + ":" + src
	}
	if cfg.File != "" && cfg.Checkpoint == "" {
		cfg.Checkpoint = cfg.File + ".ship-pos"
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return cfg, errUsage
	}
	return cfg, nil
}

func runShip(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseShip(args, env)
	if err != nil {
		return err
	}
	log, err := cfg.log.logger(env.Stderr)
	if err != nil {
		return err
	}
	stdin := env.Stdin
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return Ship(ctx, cfg, stdin, log)
}

// shipPipe is what Ship sends batches to: several in flight at a time,
// answered in order (logship.KafkaSink's Send and Resume, which document
// the contract), or one at a time (oneBatch).
type shipPipe interface {
	Send(ctx context.Context, records [][]byte, done func(error))
	Resume()
	Close(ctx context.Context) error
}

var _ shipPipe = (*logship.KafkaSink)(nil)

// oneBatch makes a shipPipe of a logship.Sink: Send waits for Write, each
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

// shipFlights is how many batches Ship keeps in flight to Kafka: enough to
// cover the round trips, and within what a KafkaSink buffers.
const shipFlights = 8

// pipe returns where Ship sends, and how many batches it may keep in flight.
func (c ShipConfig) pipe(log *slog.Logger) (shipPipe, int, error) {
	if c.testPipe != nil {
		return c.testPipe, shipFlights, nil
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
	return s, shipFlights, err
}

func (c ShipConfig) inletSink() (logship.Sink, error) {
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

// shipLine is one line read, encoded as an event, with the position after
// it (file mode).
type shipLine struct {
	event []byte
	pos   filePos
}

// Ship sends the lines of stdin (or of cfg.File, followed) until stdin
// ends or ctx is done. It returns nil only when every line read was
// acknowledged; otherwise an error with the count of lines that were not.
func Ship(ctx context.Context, cfg ShipConfig, stdin io.Reader, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	pipe, maxFlights, err := cfg.pipe(log)
	if err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
		defer cancel()
		pipe.Close(cctx)
	}()
	enc := newLineEncoder(cfg)
	lines := make(chan shipLine, 4*cfg.BatchSize)
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
		batch                 []shipLine
		readDone              bool
		linger                = time.NewTimer(time.Hour)
		// window is the batches in flight, in the order sent. They are
		// retired from its head only, so the checkpoint never passes a
		// batch not acknowledged, whatever order the answers come in.
		window  []*shipFlight
		acks    = make(chan *shipFlight, maxFlights) // room for every flight: a done never waits
		backoff = 100 * time.Millisecond
		// fatal is a refusal for good of a batch by Kafka (other than as
		// too large, which is found line by line): sending it again cannot
		// help, so ship stops, its checkpoint before the batch.
		fatal error
	)
	linger.Stop()
	launch := func(sendCtx context.Context, f *shipFlight) {
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
		f := &shipFlight{lines: batch, recs: make([][]byte, len(batch))}
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
		var lc <-chan shipLine = lines
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
				return shipFatal(fatal, read, acked, rejected)
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
			return shipFatal(fatal, read, acked, rejected)
		}
		if fatal != nil {
			stopReading()
			return shipFatal(fatal, read, acked, rejected)
		}
	}
}

// shipFlight is a batch in flight.
type shipFlight struct {
	lines []shipLine
	recs  [][]byte
	err   error // the answer, set before the flight is sent on acks
	done  bool  // answered; Ship's loop's own
}

// shipFatal is shipResult, or fatal with the counts when there is one.
func shipFatal(fatal error, read, acked, rejected int64) error {
	if fatal == nil {
		return shipResult(read, acked, rejected)
	}
	return fmt.Errorf("%w (%d of %d lines read were not acknowledged, %d rejected)", fatal, read-acked, read, rejected)
}

func shipResult(read, acked, rejected int64) error {
	if acked == read {
		return nil
	}
	return fmt.Errorf("ship: %d of %d lines read were not acknowledged (%d rejected)", read-acked, read, rejected)
}

// drainLines yields the lines already read, without waiting for more.
func drainLines(lines <-chan shipLine, done bool) func(func(shipLine) bool) {
	return func(yield func(shipLine) bool) {
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

// lineEncoder makes an event of a line:
//
//	{"event":..,"id":..,"anon_id":..,"props":..,"context":{"host":..,"source":..}}
//
// written by hand (encoding/json took most of ship's CPU).
type lineEncoder struct {
	cfg  ShipConfig
	run  string
	seq  int64
	head []byte // {"event":"...","id":
	mid  []byte // ,"anon_id":"...","props":
	tail []byte // ,"context":{"host":"...","source":"..."}}
}

func newLineEncoder(cfg ShipConfig) *lineEncoder {
	id, _ := uuid.NewV7()
	host, _ := os.Hostname()
	src := "stdin"
	if cfg.File != "" {
		src, _ = filepath.Abs(cfg.File)
	}
	e := &lineEncoder{cfg: cfg, run: id.String()}
	e.head = append(appendJSONString([]byte(`{"event":`), []byte(cfg.Event)), `,"id":`...)
	if cfg.Key != "" {
		e.mid = appendJSONString(append(e.mid, `,"anon_id":`...), []byte(cfg.Key))
	}
	e.mid = append(e.mid, `,"props":`...)
	e.tail = appendJSONString([]byte(`,"context":{"host":`), []byte(host))
	e.tail = append(appendJSONString(append(e.tail, `,"source":`...), []byte(src)), "}}"...)
	return e
}

// encode makes the event of line; id, when empty, is <run>-<seq>.
func (e *lineEncoder) encode(line []byte, id string) []byte {
	b := make([]byte, 0, len(e.head)+len(e.mid)+len(e.tail)+len(line)+64)
	b = append(b, e.head...)
	if id == "" {
		e.seq++
		b = append(append(append(b, '"'), e.run...), '-')
		b = append(strconv.AppendInt(b, e.seq, 10), '"')
	} else {
		b = appendJSONString(b, []byte(id))
	}
	b = append(b, e.mid...)
	props := false
	switch e.cfg.Format {
	case "json":
		// An object that is strict JSON (RFC 7493: valid UTF-8, no lone
		// surrogates, unique names) is the props as written, compacted:
		// its names in their order, numbers and strings byte for byte.
		// Any other line is sent as a line (below), rather than changed
		// on the way: a duplicate name dropped, a bad byte replaced.
		// (Nested at most as deep as inlet takes an event: props is one
		// level under the event.)
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '{' && jsontext.Value(t).IsValid() && depth(t) < event.MaxDepth {
			start := len(b)
			b = append(b, t...)
			if v := jsontext.Value(b[start:]); v.Compact() == nil {
				b, props = b[:start+len(v)], true
			} else {
				b = b[:start]
			}
		}
	case "logfmt":
		if m := parseLogfmt(string(line)); len(m) > 0 {
			p, _ := json.Marshal(m)
			b, props = append(b, p...), true
		}
	}
	if !props {
		b = append(appendJSONString(append(b, `{"line":`...), line), '}')
	}
	return append(b, e.tail...)
}

// appendJSONString is event.AppendJSONString.
func appendJSONString(dst, s []byte) []byte {
	return event.AppendJSONString(dst, s)
}

// parseLogfmt reads key=value pairs (values may be "quoted"); a bare key
// is "true".
func parseLogfmt(s string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := s[k:i]
		if key == "" {
			i++
			continue
		}
		if i >= len(s) || s[i] == ' ' {
			m[key] = "true"
			continue
		}
		i++ // '='
		if i < len(s) && s[i] == '"' {
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			if j >= len(s) { // no closing quote: the rest of the line
				m[key] = s[i+1:]
				break
			}
			if v, err := strconv.Unquote(s[i : j+1]); err == nil {
				m[key] = v
			} else {
				m[key] = s[i+1 : j]
			}
			i = j + 1
			continue
		}
		v := i
		for i < len(s) && s[i] != ' ' {
			i++
		}
		m[key] = s[v:i]
	}
	return m
}

// readLines sends the lines of r to out until r ends, then closes out.
func readLines(ctx context.Context, r io.Reader, enc *lineEncoder, out chan<- shipLine) error {
	defer close(out)
	br := bufio.NewReaderSize(r, 64<<10)
	sp := lineSplitter{max: maxLineBytes}
	emit := func(line []byte, _ int) bool {
		select {
		case out <- shipLine{event: enc.encode(line, "")}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if !sp.add(chunk, true, emit) {
				return nil
			}
			continue
		case errors.Is(err, bufio.ErrBufferFull):
			if !sp.add(chunk, false, emit) {
				return nil
			}
			continue
		}
		// The end, or a failure: a last line without a newline is a line.
		if !sp.add(chunk, false, emit) || !sp.flush(emit) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// depth is how deeply valid JSON v nests objects and arrays ({} is 1).
func depth(v []byte) int {
	d, most, in := 0, 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			d++
			most = max(most, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return most
}

// maxLineBytes is the longest line ship sends as one event: a longer one
// is sent in pieces of at most this many bytes, so that a line without an
// end holds bounded memory (Kafka takes about 1 MB per record by default).
const maxLineBytes = 512 << 10

// lineSplitter gathers the pieces of a line read (bufio.Reader.ReadSlice
// gives a long line in pieces) and yields it whole, or, while it is longer
// than max, in pieces of at most max bytes cut before a UTF-8 sequence.
type lineSplitter struct {
	max     int
	partial []byte
	Split   int64 // pieces yielded of lines longer than max
}

// add takes chunk, read after what came before; complete says it ends
// the line (with its "\n"). It calls yield with each line or piece to send
// (its end of line cut) and how many bytes read stay held after it; false
// if yield said to stop.
func (sp *lineSplitter) add(chunk []byte, complete bool, yield func(line []byte, held int) bool) bool {
	if len(sp.partial) == 0 && complete && len(chunk) <= sp.max {
		return yield(trimEOL(chunk), 0)
	}
	sp.partial = append(sp.partial, chunk...)
	for len(sp.partial) > sp.max && !(complete && len(trimEOL(sp.partial)) <= sp.max) {
		cut := sp.max
		for c := cut; c > sp.max-utf8.UTFMax && c > 0; c-- {
			if utf8.RuneStart(sp.partial[c]) {
				cut = c
				break
			}
		}
		sp.Split++
		if !yield(sp.partial[:cut], len(sp.partial)-cut) {
			return false
		}
		sp.partial = append(sp.partial[:0], sp.partial[cut:]...)
	}
	if !complete {
		return true
	}
	line := sp.partial
	sp.partial = sp.partial[:0]
	return yield(trimEOL(line), 0)
}

// flush yields what is held, a last line without its end of line.
func (sp *lineSplitter) flush(yield func(line []byte, held int) bool) bool {
	if len(sp.partial) == 0 {
		return true
	}
	line := sp.partial
	sp.partial = nil
	return yield(line, 0)
}

// trimEOL cuts a line's "\n" or "\r\n".
func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// filePos is a position in a followed file: which file (its inode), how
// many times the path was rotated or truncated (Gen: a line's id is
// path, inode, Gen and offset, the same when a restart sends it again),
// and the byte after the last line acknowledged.
type filePos struct {
	Inode  uint64 `json:"inode"`
	Gen    uint64 `json:"gen"`
	Offset int64  `json:"offset"`
}

// checkpoint keeps a filePos in a file, replaced atomically.
type checkpoint struct{ path string }

func (c *checkpoint) load() (filePos, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return filePos{}, nil
	}
	var p filePos
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		return filePos{}, fmt.Errorf("ship: reading checkpoint %s: %w", c.path, err)
	}
	return p, nil
}

func (c *checkpoint) save(p filePos) error {
	b, _ := json.Marshal(p)
	tmp := c.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// follower reads a file's lines like tail -F: at its end it waits; when
// the path names another file (rotation) it reads the old one to its end
// and goes on with the new one from its start; when the file shrinks
// (truncation) it starts again from the start.
type follower struct {
	path string
	poll time.Duration
	log  *slog.Logger

	f   *os.File
	ino uint64
	gen uint64
	off int64 // bytes of f consumed, up to the end of what sp holds
	br  *bufio.Reader
	sp  lineSplitter
}

func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func (fl *follower) open(start filePos) error {
	f, err := os.Open(fl.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	fl.f, fl.ino, fl.off, fl.sp = f, inodeOf(fi), 0, lineSplitter{max: maxLineBytes}
	fl.gen = start.Gen + 1 // another file, or this one truncated
	if start.Inode == fl.ino && start.Offset <= fi.Size() {
		if _, err := f.Seek(start.Offset, io.SeekStart); err != nil {
			f.Close()
			return err
		}
		fl.off, fl.gen = start.Offset, start.Gen
	}
	fl.br = bufio.NewReaderSize(f, 64<<10)
	return nil
}

func (fl *follower) id(lineEnd int64) string {
	h := sha256.Sum256([]byte(fl.path))
	return hex.EncodeToString(h[:6]) + "-" + strconv.FormatUint(fl.ino, 10) + "-" + strconv.FormatUint(fl.gen, 10) + "-" + strconv.FormatInt(lineEnd, 10)
}

func (fl *follower) run(ctx context.Context, start filePos, enc *lineEncoder, out chan<- shipLine) error {
	defer close(out)
	for {
		err := fl.open(start)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select { // not there yet
		case <-time.After(fl.poll):
		case <-ctx.Done():
			return nil
		}
	}
	defer func() { fl.f.Close() }()
	// emit sends a line (or a piece of one) with its position: the byte
	// after it, held bytes before what was consumed.
	emit := func(line []byte, held int) bool {
		end := fl.off - int64(held)
		select {
		case out <- shipLine{event: enc.encode(line, fl.id(end)), pos: filePos{Inode: fl.ino, Gen: fl.gen, Offset: end}}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		chunk, err := fl.br.ReadSlice('\n')
		fl.off += int64(len(chunk))
		switch {
		case err == nil:
			if !fl.sp.add(chunk, true, emit) {
				return nil
			}
			continue
		case errors.Is(err, bufio.ErrBufferFull):
			if !fl.sp.add(chunk, false, emit) {
				return nil
			}
			continue
		case !errors.Is(err, io.EOF):
			return fmt.Errorf("reading %s: %w", fl.path, err)
		}
		if !fl.sp.add(chunk, false, emit) {
			return nil
		}
		// At the end: rotated, truncated, or nothing new yet?
		fi, serr := os.Stat(fl.path)
		switch {
		case serr == nil && inodeOf(fi) != fl.ino:
			// Rotated: what was appended to the old file before the
			// check is read to its end; a last line without a newline
			// is a line.
			for {
				chunk, err := fl.br.ReadSlice('\n')
				fl.off += int64(len(chunk))
				if !fl.sp.add(chunk, err == nil, emit) {
					return nil
				}
				if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
					break
				}
			}
			if !fl.sp.flush(emit) {
				return nil
			}
			fl.log.Info("ship: file rotated; following the new one", "path", fl.path)
			fl.f.Close()
			if err := fl.open(filePos{Gen: fl.gen}); err != nil {
				return err
			}
			continue
		case serr == nil && fi.Size() < fl.off:
			fl.log.Info("ship: file truncated; reading it from its start", "path", fl.path, "size", fi.Size(), "was", fl.off)
			if _, err := fl.f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			fl.off, fl.sp.partial = 0, nil
			fl.gen++
			fl.br.Reset(fl.f)
			continue
		}
		select {
		case <-time.After(fl.poll):
		case <-ctx.Done():
			return nil
		}
	}
}
