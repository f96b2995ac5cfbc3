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
	"sort"
	"time"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/cliflag"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TailConfig configures `inlet tail`.
type TailConfig struct {
	Brokers []string
	Topic   string
	From    string // beginning or end
	// N, from the beginning: stop after N records. From the end: print
	// the last N records and stop, unless Follow. 0: follow from From.
	N      int
	Follow bool   // from the end with N: go on printing new records, as tail -f
	Format string // json or text
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
	fs.IntVar(&c.N, "n", c.N, "the last N records, then stop (with -f: then follow); with --from beginning: the first N (0: follow until interrupted)")
	fs.BoolVar(&c.Follow, "f", c.Follow, "with -n: after the last N records, print new ones as they come, until interrupted (as tail -f)")
	fs.StringVar(&c.Format, "format", c.Format, "output: json (one object per line) or text")
	fs.DurationVar(&c.Idle, "idle", c.Idle, "stop once no record arrived for this long (0: never)")
	c.Security.RegisterFlags(fs)
}

// Tail prints the records of cfg.Topic to w until ctx is done, N records
// were printed, or no record arrived for Idle. From the end with N, it
// prints the last N records and returns (with Follow, goes on with new
// ones). log, if not nil, gets the
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
	last := cfg.From == "end" && cfg.N > 0 // the last N, like tail -n
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("inlet-tail")}
	if !last {
		opts = append(opts, kgo.ConsumeTopics(cfg.Topic), kgo.ConsumeResetOffset(reset))
	}
	cl, err := kgo.NewClient(append(opts, sec...)...)
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
	if last {
		if err := tailLast(ctx, cl, cfg, bw); err != nil || !cfg.Follow {
			return err
		}
		cfg.N = 0 // then follow, from where the last N ended
	}
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

// tailLast prints the last cfg.N records of cfg.Topic (of all its
// partitions, in timestamp order) as they were when it started, and
// leaves cl consuming the topic from there, for Follow.
func tailLast(ctx context.Context, cl *kgo.Client, cfg TailConfig, w *bufio.Writer) error {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	var starts kadm.ListedOffsets
	if err == nil {
		starts, err = adm.ListStartOffsets(ctx, cfg.Topic)
		if err == nil {
			err = starts.Error()
		}
	}
	if err != nil {
		return fmt.Errorf("tail: listing the offsets of %s: %w", cfg.Topic, err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition -> its end offset, while records before it are to be read
	ends.Each(func(o kadm.ListedOffset) {
		start := o.Offset - int64(cfg.N)
		if so, ok := starts.Lookup(cfg.Topic, o.Partition); ok {
			start = max(start, so.Offset)
		}
		from[o.Partition] = kgo.NewOffset().At(max(start, 0))
		if o.Offset > start {
			left[o.Partition] = o.Offset
		}
	})
	if len(from) == 0 {
		return fmt.Errorf("tail: topic %s does not exist", cfg.Topic)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: from})
	var recs []*kgo.Record
	for len(left) > 0 {
		// A partition whose last offsets hold no record (a transaction's
		// marker, a compacted tail) is not waited for past a quiet second.
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(fctx)
		quiet := fctx.Err() != nil && fetches.NumRecords() == 0
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				return fmt.Errorf("tail: fetching %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				recs = append(recs, r)
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			} else if !ok {
				recs = append(recs, r) // arrived since: printed when following
			}
		})
		if quiet {
			break
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Timestamp.Before(recs[j].Timestamp) })
	// The last N of those that existed at the start, then the newer ones.
	var old, newer []*kgo.Record
	for _, r := range recs {
		if end, ok := ends.Lookup(cfg.Topic, r.Partition); ok && r.Offset < end.Offset {
			old = append(old, r)
		} else {
			newer = append(newer, r)
		}
	}
	old = old[max(len(old)-cfg.N, 0):]
	if !cfg.Follow {
		newer = nil
	}
	for _, r := range append(old, newer...) {
		if err := printRecord(w, r, cfg.Format); err != nil {
			return err
		}
	}
	return w.Flush()
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
