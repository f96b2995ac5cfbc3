package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/webui"
)

// failingSink fails its writes while fail is set.
type failingSink struct{ fail bool }

func (s *failingSink) Write(context.Context, []event.Record) error {
	if s.fail {
		return errors.New("kafka is down")
	}
	return nil
}

// WriteAt says Kafka stored the records at offsets 40, 41, ... of partition 2.
func (s *failingSink) WriteAt(ctx context.Context, recs []event.Record, pos []kafka.Position) error {
	if err := s.Write(ctx, recs); err != nil {
		return err
	}
	for i := range pos {
		pos[i] = kafka.Position{Partition: 2, Offset: int64(40 + i)}
	}
	return nil
}

// TestLiveTapShowsOnlyAcknowledged: the live page sees a request's records
// once the sink took them, rejected ones as rejected with their reason, and
// nothing of a write that failed (answered 503).
func TestLiveTapShowsOnlyAcknowledged(t *testing.T) {
	g := &Gateway{cfg: DefaultConfig()}
	g.cfg.Ack = AckKafka
	g.kafka = newKafkaCheck(nil, "", time.Second, kafka.Security{}, "")
	mux := http.NewServeMux()
	inner := &failingSink{}
	sink := g.startUI(mux, inner, webui.DefaultConfig())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	next := func(typ string) string {
		t.Helper()
		want := "event: " + typ + "\n"
		for {
			l, err := lines.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if l == want {
				d, _ := lines.ReadString('\n')
				return strings.TrimPrefix(strings.TrimSuffix(d, "\n"), "data: ")
			}
		}
	}
	if st := next("stats"); !strings.Contains(st, `"ack":"kafka"`) {
		t.Fatalf("stats without the gateway's state: %s", st)
	}
	record := func(raw string) event.Record { // as ingest makes it
		b := event.NewBatch("events", event.Meta{ReceivedAt: time.Now()}, 0)
		defer b.Release()
		if bad := b.Add([]byte(raw)); bad != nil {
			t.Fatal(bad)
		}
		b.Build()
		return b.Record(0)
	}
	ok := record(`{"event":"buy","id":"e1","anon_id":"a1"}`)
	bad := event.DeadLetter("events.invalid", []byte(`{"name":1}`), `"event" is required`, time.Now(), 0)
	bad.Headers = append(bad.Headers, event.Header{Key: event.HeaderReason, Value: []byte("missing_event")})
	failed := record(`{"event":"lost","id":"e0"}`)

	// The page must be subscribed before records flow; the stats above say it is.
	inner.fail = true
	if err := sink.Write(context.Background(), []event.Record{failed}); err == nil {
		t.Fatal("the tap hid the sink's failure")
	}
	inner.fail = false
	if err := sink.Write(context.Background(), []event.Record{ok, bad}); err != nil {
		t.Fatal(err)
	}
	var items []map[string]any
	for range 2 {
		var m map[string]any
		if err := json.Unmarshal([]byte(next("item")), &m); err != nil {
			t.Fatal(err)
		}
		items = append(items, m)
	}
	if items[0]["id"] != "e1" || items[0]["name"] != "buy" || items[0]["key"] != "a1" || items[0]["kind"] != "event" {
		t.Errorf("first item %v, want the acknowledged event e1 (the failed write's e0 must not show)", items[0])
	}
	if !strings.Contains(items[0]["delivery"].(string), "acknowledged by Kafka") {
		t.Errorf("delivery %q", items[0]["delivery"])
	}
	if items[0]["partition"] != 2.0 || items[0]["offset"] != 40.0 || items[1]["offset"] != 41.0 {
		t.Errorf("items at %v/%v and %v, want partition 2, offsets 40 and 41 as the sink reported", items[0]["partition"], items[0]["offset"], items[1]["offset"])
	}
	if items[1]["kind"] != "rejected" || items[1]["reason"] != "missing_event" || items[1]["error"] != `"event" is required` {
		t.Errorf("second item %v, want the rejection with its reason", items[1])
	}
}

func TestUIOffLeavesTheSinkAlone(t *testing.T) {
	g := &Gateway{cfg: DefaultConfig()}
	inner := &failingSink{}
	cfg := webui.DefaultConfig()
	cfg.UI = false
	if s := g.startUI(http.NewServeMux(), inner, cfg); s != inner {
		t.Fatalf("with --ui=false the sink is wrapped: %T", s)
	}
}
