package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
// Delivered stops when every id want acknowledged was seen, when ctx ends
// (returning what it saw and ctx's error), or when no record arrived for
// idle. Only records of the run, and records older than the run's first
// send (the backlog still being read), count as arriving: other traffic on
// a busy topic does not keep it reading. want may be nil: then it reads
// until idle.
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

	var (
		missing = map[string]bool{} // acknowledged, not seen yet
		start   time.Time
	)
	if want != nil {
		missing = want.ackedIDs()
		start = want.Start()
	}
	ours := func(id string) bool {
		if runPrefix != "" && strings.HasPrefix(id, runPrefix) {
			return true
		}
		if want == nil {
			return false
		}
		sent, acked := want.has(id)
		return sent || acked
	}
	seen := map[string]int{}
	last := time.Now() // last record that counts as arriving
	for want == nil || len(missing) > 0 {
		wait := idle - time.Since(last)
		if wait <= 0 {
			return seen, nil
		}
		fctx, cancel := context.WithTimeout(ctx, wait)
		fetches := cl.PollFetches(fctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return seen, err
		}
		for _, fe := range fetches.Errors() {
			switch {
			case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
			case errors.Is(fe.Err, kerr.UnknownTopicOrPartition):
				// Nothing was written to the topic yet: nothing arrived.
			default:
				return seen, fmt.Errorf("verify: fetching %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
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
