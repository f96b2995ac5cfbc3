package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
)

// Delivered reads topic from the beginning and returns how often each id of
// this run was seen. An id belongs to the run when want sent it or it starts
// with runPrefix (see Prefix; "" matches only ids in want). The id of a
// record is its inlet-event-id header, else the "id" field of its JSON value.
//
// With want, Delivered stops when every id want acknowledged was seen, when
// ctx ends (returning what it saw and ctx's error), or when no record
// arrived for idle. Only records of the run, and records older than the
// run's first send (the backlog still being read), count as arriving: other
// traffic on a busy topic does not keep it reading.
//
// Without want (nil), it reads every partition up to its end offset (high
// watermark) as listed when it starts, and stops there: records written
// after that are not read, however busy the topic. When idle passes without
// a record below those offsets (a partition without a leader), it returns
// what it saw and an error naming the partitions it did not finish.
//
// It fails at once if no broker answers. It creates no topic and joins no
// consumer group. sec is TLS and SASL to the brokers.
func Delivered(ctx context.Context, brokers []string, sec kafka.Security, topic, runPrefix string, want *Ledger, idle time.Duration) (map[string]int, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, errors.New("verify: brokers and topic are required")
	}
	if idle <= 0 {
		return nil, errors.New("verify: idle must be positive")
	}
	cl, err := newClient(brokers, sec, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := ping(ctx, cl, brokers, sec); err != nil {
		return nil, err
	}

	if want == nil {
		return readToEnd(ctx, cl, topic, runPrefix, idle)
	}
	missing := want.ackedIDs() // acknowledged, not seen yet
	start := want.Start()
	ours := func(id string) bool {
		if runPrefix != "" && strings.HasPrefix(id, runPrefix) {
			return true
		}
		sent, acked := want.has(id)
		return sent || acked
	}
	seen := map[string]int{}
	last := time.Now() // last record that counts as arriving
	for len(missing) > 0 {
		wait := idle - time.Since(last)
		if wait <= 0 {
			return seen, nil
		}
		fetches, err := poll(ctx, cl, wait)
		if err != nil {
			return seen, err
		}
		arrived := false
		fetches.EachRecord(func(r *kgo.Record) {
			if id := recordID(r); id != "" && ours(id) {
				seen[id]++
				delete(missing, id)
				arrived = true
			} else if start.IsZero() || r.Timestamp.Before(start) {
				arrived = true
			}
		})
		if arrived {
			last = time.Now()
		}
	}
	return seen, nil
}

// readToEnd is Delivered without a ledger: it counts the ids starting with
// runPrefix in every record below the end offsets listed at its start. A
// partition is done once the record before its end offset was read; one
// ending in a transaction marker (inlet writes no transactions) never is,
// and ends by idle.
func readToEnd(ctx context.Context, cl *kgo.Client, topic, runPrefix string, idle time.Duration) (map[string]int, error) {
	left, err := endOffsets(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	last := time.Now() // last record below the end offsets
	for len(left) > 0 {
		wait := idle - time.Since(last)
		if wait <= 0 {
			return seen, fmt.Errorf("verify: reading %s: no record for %v, and %s not read to the end offsets listed at the start",
				topic, idle, describeLeft(left))
		}
		fetches, err := poll(ctx, cl, wait)
		if err != nil {
			return seen, err
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return // written after the start, or a partition already read
			}
			last = time.Now()
			if id := recordID(r); id != "" && runPrefix != "" && strings.HasPrefix(id, runPrefix) {
				seen[id]++
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return seen, nil
}

// endOffsets lists the end offset of each partition of topic that holds
// records (its end past its start). A topic that does not exist has none.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	var starts kadm.ListedOffsets
	if err == nil {
		starts, err = adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("verify: listing the end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			left[o.Partition] = o.Offset
		}
	})
	return left, nil
}

// describeLeft names the partitions of left, "partitions 0, 2 (end offsets 10, 7)".
func describeLeft(left map[int32]int64) string {
	ps := slices.Sorted(maps.Keys(left))
	names := make([]string, len(ps))
	offs := make([]string, len(ps))
	for i, p := range ps {
		names[i] = strconv.Itoa(int(p))
		offs[i] = strconv.FormatInt(left[p], 10)
	}
	return fmt.Sprintf("partitions %s (end offsets %s)", strings.Join(names, ", "), strings.Join(offs, ", "))
}

// poll fetches for at most wait. Only ctx's end and fetch errors other than
// a wait that ran out or a topic not created yet are errors.
func poll(ctx context.Context, cl *kgo.Client, wait time.Duration) (kgo.Fetches, error) {
	fctx, cancel := context.WithTimeout(ctx, wait)
	fetches := cl.PollFetches(fctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, fe := range fetches.Errors() {
		switch {
		case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
		case errors.Is(fe.Err, kerr.UnknownTopicOrPartition):
			// Nothing was written to the topic yet: nothing arrived.
		default:
			return nil, fmt.Errorf("verify: fetching %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
	}
	return fetches, nil
}

// Ping checks that a broker of brokers answers a metadata request with
// sec's TLS and SASL, waiting at most 10 seconds. A failure is one line
// naming the cause (kafka.Security.ConnErr).
func Ping(ctx context.Context, brokers []string, sec kafka.Security) error {
	cl, err := newClient(brokers, sec)
	if err != nil {
		return err
	}
	defer cl.Close()
	return ping(ctx, cl, brokers, sec)
}

// newClient is a client of verify's with sec's TLS and SASL and opts.
func newClient(brokers []string, sec kafka.Security, opts ...kgo.Opt) (*kgo.Client, error) {
	so, err := sec.Opts(nil)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("inlet-verify")}, opts...), so...)...)
	if err != nil {
		return nil, fmt.Errorf("verify: creating kafka client: %w", err)
	}
	return cl, nil
}

func ping(ctx context.Context, cl *kgo.Client, brokers []string, sec kafka.Security) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return fmt.Errorf("verify: reaching kafka at %v: %w", brokers, sec.ConnErr(err))
	}
	return nil
}

// recordID is the event id of r: its header, else the "id" of its value.
func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == event.HeaderEventID {
			return string(h.Value)
		}
	}
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.Value, &v) != nil {
		return ""
	}
	return v.ID
}
