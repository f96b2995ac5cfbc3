package kafka

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TailConfig configures `inlet tail`.
type TailConfig struct {
	Brokers []string
	Topic   string
	From    string // beginning or end
	N       int    // stop after N records; 0 follows until interrupted
	Format  string // json or text
	// Idle stops tail once no record arrived for this long (0: never).
	Idle time.Duration
	// Security is TLS and SASL to the brokers.
	Security Security
}

// DefaultTailConfig returns the documented defaults.
func DefaultTailConfig() TailConfig {
	return TailConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "events", From: "end", Format: "json"}
}

// RegisterFlags registers c's flags on fs; the values in c are their
// defaults.
func (c *TailConfig) RegisterFlags(fs *flag.FlagSet) {
	cliflag.List(fs, &c.Brokers, "brokers", "Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&c.Topic, "topic", c.Topic, "topic to read")
	fs.StringVar(&c.From, "from", c.From, "where to start: beginning or end")
	fs.IntVar(&c.N, "n", c.N, "stop after this many records (0: follow until interrupted)")
	fs.StringVar(&c.Format, "format", c.Format, "output: json (one object per line) or text")
	fs.DurationVar(&c.Idle, "idle", c.Idle, "stop once no record arrived for this long (0: never)")
	c.Security.RegisterFlags(fs)
}

// Tail prints the records of cfg.Topic to w until ctx is done, N records
// were printed, or no record arrived for Idle. log, if not nil, gets the
// warnings of the security settings.
func Tail(ctx context.Context, cfg TailConfig, w io.Writer, log *slog.Logger) error {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return errors.New("tail: --brokers and --topic are required")
	}
	var reset kgo.Offset
	switch cfg.From {
	case "beginning":
		reset = kgo.NewOffset().AtStart()
	case "end":
		reset = kgo.NewOffset().AtEnd()
	default:
		return fmt.Errorf("tail: --from %q: want beginning or end", cfg.From)
	}
	if cfg.Format != "json" && cfg.Format != "text" {
		return fmt.Errorf("tail: --format %q: want json or text", cfg.Format)
	}
	sec, err := cfg.Security.Opts(log)
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(reset), kgo.ClientID("inlet-tail")}, sec...)...)
	if err != nil {
		return fmt.Errorf("tail: creating kafka client: %w", err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("tail: reaching kafka at %v: %w", cfg.Brokers, cfg.Security.ConnErr(err))
	}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	printed := 0
	for {
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.Idle > 0 {
			fctx, cancel = context.WithTimeout(ctx, cfg.Idle)
		}
		fetches := cl.PollFetches(fctx)
		idle := fctx.Err() != nil && fetches.NumRecords() == 0
		cancel()
		if ctx.Err() != nil || idle {
			return nil
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				return fmt.Errorf("tail: fetching %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			if err := printRecord(bw, r, cfg.Format); err != nil {
				return err
			}
			printed++
			if cfg.N > 0 && printed >= cfg.N {
				return nil
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
	}
}

// printedRecord is the JSON form of a record.
type printedRecord struct {
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp time.Time         `json:"timestamp"`
	Key       string            `json:"key"`
	Headers   map[string]string `json:"headers,omitempty"`
	Value     json.RawMessage   `json:"value"`
}

func printRecord(w io.Writer, r *kgo.Record, format string) error {
	hs := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		hs[h.Key] = string(h.Value)
	}
	if format == "text" {
		_, err := fmt.Fprintf(w, "%s/%d@%d %s key=%q", r.Topic, r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339Nano), r.Key)
		for _, h := range r.Headers {
			fmt.Fprintf(w, " %s=%q", h.Key, h.Value)
		}
		fmt.Fprintf(w, "\n  %s\n", r.Value)
		return err
	}
	v := json.RawMessage(r.Value)
	// encoding/json's Valid takes invalid UTF-8 inside strings, and
	// Marshal copies a RawMessage as it is: such a value (a dead letter
	// refused for it) is printed as a string, its bytes quoted.
	if !json.Valid(r.Value) || !utf8.Valid(r.Value) {
		s := string(r.Value)
		if !utf8.ValidString(s) {
			s = fmt.Sprintf("%q", r.Value)
		}
		v, _ = json.Marshal(s)
	}
	b, err := json.Marshal(printedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Timestamp: r.Timestamp.UTC(), Key: string(r.Key), Headers: hs, Value: v})
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
