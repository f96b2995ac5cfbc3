// Package logship is a log/slog handler that ships each record to Kafka,
// straight (KafkaSink) or through inlet (InletSink), without making the
// caller wait for the network and without losing records silently.
//
// Handle encodes the record (with slog's own JSON encoder) as one inlet
// event and enqueues it in a bounded in-memory queue; a goroutine of the
// handler's own sends the queue to the sink in batches (to Kafka, several
// in flight at a time, in order). When the queue is
// full, or the sink failed, records spill to a local file (buffered
// writes, fsynced on a timer and soon after an ERROR record) and are
// replayed in order once the sink takes records again. When the spill
// file reaches its cap, records are dropped and counted (Stats), and the
// count itself is logged through the sink once it recovered.
//
// Each record is the event
//
//	{"event":"log","id":"<run id>-<seq>","context":{"service":..,"host":..},
//	 "props":{"time":..,"level":..,"msg":..,"source":..,<attrs>}}
//
// where seq counts the records of one handler in the order they were
// handled, so a consumer can restore order and drop duplicates (delivery
// is at-least-once).
//
// Order, retries and duplicates: the "Order" section of inlet's
// docs/ack-modes.md.
//
// A record Kafka refuses for good, too large alone for the topic
// (KafkaConfig.MaxMessageBytes), is dropped and counted as DropTooLarge;
// other records in the batch with it are delivered.
package logship

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Options configure a Handler or a FileHandler. The zero value works.
type Options struct {
	// Handler is the slog options: Level, AddSource, ReplaceAttr.
	Handler slog.HandlerOptions
	// Service and Host go into each event's "context" (Host: os.Hostname).
	Service, Host string
	// Key, if set, is every event's "anon_id", which inlet makes the
	// record key: one key, one partition, so records stay in order
	// through inlet too. (KafkaSink has its own KafkaConfig.Key.)
	Key string

	// QueueSize bounds the records waiting in memory (default 8192).
	QueueSize int
	// BatchSize is the most records per write to the sink (default 500),
	// Linger how long the first of a batch waits for more (default 20 ms).
	BatchSize int
	Linger    time.Duration
	// SendTimeout bounds one write to the sink (default 10 s). Not to a
	// KafkaSink: its batches are in flight several at a time and franz-go
	// retries them, in order, until Kafka answers or Close gives up.
	SendTimeout time.Duration
	// SpillDir is where the spill file, logship.spill, is kept, with
	// logship.spill.pos, how much of it was acknowledged: a handler
	// started on the directory replays the rest. Empty: no spilling; a
	// record that finds the queue full is dropped, counted. One handler
	// per directory.
	SpillDir string
	// MaxSpillBytes caps the spill file (default 256 MiB).
	MaxSpillBytes int64
	// SyncInterval is how often written records are flushed to the file
	// and fsynced (default 1 s); an ERROR record asks for it at once.
	SyncInterval time.Duration
	// RetryBackoff is the wait between attempts to write a batch the sink
	// failed (default 200 ms, doubling up to 5 s).
	RetryBackoff time.Duration
}

func (o Options) withDefaults() Options {
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.Linger <= 0 {
		o.Linger = 20 * time.Millisecond
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = 10 * time.Second
	}
	if o.MaxSpillBytes <= 0 {
		o.MaxSpillBytes = 256 << 20
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = time.Second
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 200 * time.Millisecond
	}
	return o
}

// recordSink takes encoded events; urgent marks an ERROR record.
type recordSink interface {
	put(event []byte, urgent bool)
}

// encoder wraps slog's JSON lines into inlet events. Its Write is called by
// slog.JSONHandler under the handler's mutex, once per record.
type encoder struct {
	prefix []byte // {"event":"log","context":{...},"id":"<run>-
	seq    atomic.Uint64
	out    recordSink
}

func newEncoder(o Options, out recordSink) *encoder {
	var ctx []string
	if o.Service != "" {
		ctx = append(ctx, `"service":`+strconv.Quote(o.Service))
	}
	if o.Host != "" {
		ctx = append(ctx, `"host":`+strconv.Quote(o.Host))
	}
	var b bytes.Buffer
	b.WriteString(`{"event":"log",`)
	if o.Key != "" {
		b.WriteString(`"anon_id":` + strconv.Quote(o.Key) + `,`)
	}
	if len(ctx) > 0 {
		b.WriteString(`"context":{` + strings.Join(ctx, ",") + `},`)
	}
	run, err := uuid.NewV7()
	if err != nil {
		run = uuid.New()
	}
	b.WriteString(`"id":"` + run.String() + `-`)
	return &encoder{prefix: b.Bytes(), out: out}
}

var levelKey = []byte(`"level":"ERROR`)

func (e *encoder) Write(p []byte) (int, error) {
	n := len(p)
	p = bytes.TrimSuffix(p, []byte{'\n'})
	ev := make([]byte, 0, len(e.prefix)+len(p)+32)
	ev = append(ev, e.prefix...)
	ev = strconv.AppendUint(ev, e.seq.Add(1), 10)
	ev = append(ev, `","props":`...)
	ev = append(ev, p...)
	ev = append(ev, '}')
	head := p
	if len(head) > 96 {
		head = head[:96]
	}
	e.out.put(ev, bytes.Contains(head, levelKey))
	return n, nil
}

// notice encodes a record the handler logs about itself.
func (e *encoder) notice(level slog.Level, msg string, attrs ...slog.Attr) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, nil)
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(context.Background(), r)
	e.Write(buf.Bytes())
}

// Handler is a slog.Handler that ships records to a Sink. It is safe for
// concurrent use; Handle never waits for the network. Close it (any of the
// handlers derived with WithAttrs and WithGroup) to drain it.
type Handler struct {
	inner slog.Handler
	s     *shipper
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler returns a handler shipping to sink, and starts its goroutines;
// Close stops them and closes sink. It fails only if the spill file
// cannot be opened.
func NewHandler(sink Sink, opts Options) (*Handler, error) {
	opts = opts.withDefaults()
	s, err := newShipper(sink, opts)
	if err != nil {
		return nil, err
	}
	s.enc = newEncoder(opts, s)
	s.start()
	return &Handler{inner: slog.NewJSONHandler(s.enc, &opts.Handler), s: s}, nil
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// Handle encodes r and enqueues it, or spills it; it does not block on
// the network. It returns no error: what is not delivered is counted.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error { return h.inner.Handle(ctx, r) }

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(as), s: h.s}
}

func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), s: h.s}
}

// Stats returns the handler's counters.
func (h *Handler) Stats() Stats { return h.s.stats() }

// Close stops taking records and delivers what is queued and spilled,
// within ctx; then it closes the sink. What ctx left no time for stays in
// the spill file (if there is one, for the next handler on the directory)
// or is counted as dropped; the error says how many were left.
func (h *Handler) Close(ctx context.Context) error { return h.s.close(ctx) }

// FileHandler is a slog.Handler that appends the same events, one per
// line, to a file through a buffer, flushed every SyncInterval, after an
// ERROR record, and on Close. It is safe for concurrent use.
type FileHandler struct {
	inner slog.Handler
	f     *fileSink
}

var _ slog.Handler = (*FileHandler)(nil)

// NewFileHandler returns a handler appending to w (unbuffered writes if
// bufSize is 0: one write per record). If w is an *os.File, Close fsyncs
// it; Close does not close w.
func NewFileHandler(w io.Writer, bufSize int, opts Options) *FileHandler {
	opts = opts.withDefaults()
	f := newFileSink(w, bufSize, opts.SyncInterval)
	enc := newEncoder(opts, f)
	return &FileHandler{inner: slog.NewJSONHandler(enc, &opts.Handler), f: f}
}

func (h *FileHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}
func (h *FileHandler) Handle(ctx context.Context, r slog.Record) error {
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	return h.f.error()
}
func (h *FileHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &FileHandler{inner: h.inner.WithAttrs(as), f: h.f}
}
func (h *FileHandler) WithGroup(name string) slog.Handler {
	return &FileHandler{inner: h.inner.WithGroup(name), f: h.f}
}

// Close flushes the buffer (and fsyncs an *os.File) and stops the timer.
func (h *FileHandler) Close() error { return h.f.close() }
