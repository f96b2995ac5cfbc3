package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// doneSink is a Sink that says it is done with a Write's records when
// done(err) (RecordsDone), as the spool (always) and Kafka (once it
// acknowledged them) do. It copies each record's value as Write saw it, and
// keeps the records of a Write it fails (fail set) themselves, uncopied.
type doneSink struct {
	done func(error) bool
	fail error

	mu     sync.Mutex
	copies map[string][]byte // event name → value, copied in Write
	kept   [][]event.Record
	names  [][]string // kept[i][j]'s event name as Write saw it
}

func (k *doneSink) Write(_ context.Context, recs []event.Record) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var names []string
	for _, r := range recs {
		var v struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal(r.Value, &v, json.RejectUnknownMembers(false)); err != nil {
			return fmt.Errorf("a record's value as Write got it: %w: %q", err, r.Value)
		}
		k.copies[v.Event] = append([]byte(nil), r.Value...)
		names = append(names, v.Event)
	}
	if k.fail != nil {
		k.kept = append(k.kept, recs)
		k.names = append(k.names, names)
		return k.fail
	}
	return nil
}

func (k *doneSink) RecordsDone(err error) bool { return k.done(err) }

func newDoneHarness(t *testing.T, sink *doneSink) *harness {
	t.Helper()
	log, logs := testkit.NewLogBuffer()
	s, err := New(DefaultConfig(), sink, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	return &harness{s: s, logs: logs, srv: serve(t, mux, nil)}
}

// batchOf is a batch of 5 events named name-0 ... name-4.
func batchOf(name string) []byte {
	return fmt.Appendf(nil, `[{"event":"%[1]s-0","uid":"u1","props":{"n":0}},{"event":"%[1]s-1","props":{"n":1}},`+
		`{"event":"%[1]s-2"},{"event":"%[1]s-3","props":{"path":"/%[1]s"}},{"event":"%[1]s-4","uid":"%[1]s"}]`, name)
}

// TestRecycledRecordsStayWhole: with a sink done with the records when
// Write returns, ingest reuses their memory; concurrent requests never
// share it while one of them is in the sink.
func TestRecycledRecordsStayWhole(t *testing.T) {
	sink := &doneSink{done: func(error) bool { return true }, copies: map[string][]byte{}}
	h := newDoneHarness(t, sink)
	const workers, each = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if r := h.do(t, "POST", "/v1/batch", batchOf(fmt.Sprintf("w%d-r%d", w, i)), "Content-Type", "application/json"); r.status != http.StatusOK && r.status != http.StatusAccepted {
					t.Errorf("answer %s", r)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(sink.copies) != workers*each*5 {
		t.Fatalf("the sink saw %d distinct events, want %d", len(sink.copies), workers*each*5)
	}
	for name, v := range sink.copies {
		var got struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal(v, &got, json.RejectUnknownMembers(false)); err != nil || got.Event != name {
			t.Fatalf("event %s reached the sink as %q (%v)", name, v, err)
		}
	}
}

// TestRecordsKeptAfterFailureNotReused: a sink not done with the records
// of a Write that failed (Kafka's context ended with records still
// buffered) keeps them whole while later requests are served.
func TestRecordsKeptAfterFailureNotReused(t *testing.T) {
	down := errors.New("kafka is down")
	sink := &doneSink{done: func(err error) bool { return err == nil }, copies: map[string][]byte{}, fail: down}
	h := newDoneHarness(t, sink)
	for i := range 3 {
		if r := h.do(t, "POST", "/v1/batch", batchOf(fmt.Sprintf("failed%d", i)), "Content-Type", "application/json"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("answer %s, want 503", r)
		}
	}
	sink.mu.Lock()
	sink.fail = nil
	sink.mu.Unlock()
	for i := range 200 {
		if r := h.do(t, "POST", "/v1/batch", batchOf(fmt.Sprintf("later%d", i)), "Content-Type", "application/json"); r.status != http.StatusOK && r.status != http.StatusAccepted {
			t.Fatalf("answer %s", r)
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.kept) != 3 {
		t.Fatalf("the sink kept %d failed writes, want 3", len(sink.kept))
	}
	for i, recs := range sink.kept {
		for j, r := range recs {
			var got struct {
				Event string `json:"event"`
			}
			if err := json.Unmarshal(r.Value, &got, json.RejectUnknownMembers(false)); err != nil {
				t.Fatalf("a kept record's value was overwritten: %q (%v)", r.Value, err)
			}
			if name := sink.names[i][j]; got.Event != name || string(sink.copies[name]) != string(r.Value) {
				t.Fatalf("a kept record changed after its Write: %q, Write saw %q", r.Value, sink.copies[name])
			}
		}
	}
}
