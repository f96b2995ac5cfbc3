package logship_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/testkit"
	"github.com/inlet-dev/inlet/logship"
)

// TestLandedPrefix: when Kafka refuses one of franz-go's batches as too
// large, the records of a send in earlier batches have landed: the error
// says how many of its first records did (logship.Landed), so that they
// are not sent again as duplicates; other failures and successes say 0.
func TestLandedPrefix(t *testing.T) {
	p := &logship.FakeProducer{MaxBytes: 100, BatchRecords: 4}
	sink := logship.Engine(logship.NewFakeKafkaSink(p, 0))
	recs := make([][]byte, 8)
	for i := range recs {
		recs[i] = fmt.Appendf(nil, "record-%d", i)
	}
	recs[5] = bytes.Repeat([]byte("x"), 150) // over the topic's limit: its batch, 4..7, is refused
	errc := make(chan error, 1)
	sink.Send(context.Background(), recs, func(err error) { errc <- err })
	p.Answer()
	err := <-errc
	if !errors.Is(err, logship.ErrTooLarge) || logship.Landed(err) != 4 {
		t.Fatalf("send: %v, landed %d; want too large, the first 4 landed", err, logship.Landed(err))
	}
	if got := len(p.Landed()); got != 4 {
		t.Fatalf("the fake holds %d records, want 4", got)
	}

	// Refused at once (an earlier batch failed, not resumed): none landed.
	sink.Send(context.Background(), recs[:2], func(err error) { errc <- err })
	if err := <-errc; err == nil || logship.Landed(err) != 0 {
		t.Fatalf("send after a failure: %v, landed %d; want an error, none landed", err, logship.Landed(err))
	}
	sink.Resume()
	sink.Send(context.Background(), recs[6:], func(err error) { errc <- err })
	p.Answer()
	if err := <-errc; err != nil || logship.Landed(err) != 0 {
		t.Fatalf("a send that landed whole: %v, landed %d", err, logship.Landed(err))
	}
	if logship.Landed(errors.New("other")) != 0 {
		t.Fatal("Landed of another error is not 0")
	}
}

// TestHandlerSendsNoLandedRecordAgain: a batch whose first records landed
// before Kafka refused the rest as too large is sent again without them:
// every record lands once, but the one too large alone.
func TestHandlerSendsNoLandedRecordAgain(t *testing.T) {
	p := &logship.FakeProducer{MaxBytes: 1000, BatchRecords: 4}
	h, err := logship.NewHandler(logship.NewFakeKafkaSink(p, 0), logship.Options{BatchSize: 10,
		Linger: 200 * time.Millisecond, QueueSize: 4096, SpillDir: t.TempDir(), RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	for i := range 10 {
		if i == 6 {
			l.Info("record", "i", i, "pad", strings.Repeat("x", 2000))
			continue
		}
		l.Info("record", "i", i)
	}
	answering(t, p)
	testkit.WaitFor(t, 20*time.Second, "every record handled settled", func() bool {
		// 10 records and the handler's own report of the drop, sent but
		// the one too large.
		st := h.Stats()
		return st.Dropped[logship.DropTooLarge] == 1 && st.Handled == 11 && st.Sent == 10
	})
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[float64]int{}
	for _, v := range p.Landed() {
		var ev struct {
			Props map[string]any `json:"props"`
		}
		if err := json.Unmarshal(v, &ev); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if i, ok := ev.Props["i"].(float64); ok { // not the handler's own report of the drop
			seen[i]++
		}
	}
	for i := range 10 {
		want := 1
		if i == 6 {
			want = 0
		}
		if seen[float64(i)] != want {
			t.Errorf("record %d landed %d times, want %d (all landed: %v)", i, seen[float64(i)], want, seen)
		}
	}
	if st := h.Stats(); st.Dropped[logship.DropTooLarge] != 1 || st.Sent != int64(len(p.Landed())) {
		t.Errorf("stats %+v with %d records landed: want each landed record counted sent once, 1 dropped as too large", st, len(p.Landed()))
	}
}
