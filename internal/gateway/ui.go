package gateway

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/webui"
)

// startUI adds the browser side to mux (/sdk/inlet.js; /ui and its stream
// unless cfg.UI is off; /example/ with cfg.Example) and returns sink with
// the live page's tap: ingest must write to the sink it returns. It starts
// nothing that needs stopping: a live stream ends when its page goes away,
// or within a second of Shutdown.
func (g *Gateway) startUI(mux *http.ServeMux, sink ingest.Sink, cfg webui.Config) ingest.Sink {
	live := webui.NewLive(cfg)
	webui.Register(mux, cfg, webui.Source{
		Live:     live,
		State:    func() any { return g.Ready() },
		Stopping: g.stopping.Load,
	})
	if !cfg.UI {
		return sink
	}
	return liveSink{next: sink, live: live, topic: g.cfg.Ingest.Topic, delivery: deliveryNote(g.cfg.Ack)}
}

// deliveryNote is what the live page can say of a record's place in Kafka
// when it sees it, in each ack mode.
func deliveryNote(ack string) string {
	switch ack {
	case AckKafka:
		return "acknowledged by Kafka (acks=all)"
	case AckNone:
		return "enqueued in memory (ack=none); Kafka has not acknowledged it yet"
	}
	return "fsynced to the spool (ack=spool); the forwarder sends it to Kafka later, and its partition and offset are known only then"
}

// liveSink taps the records the gateway acknowledged for the live page:
// after next.Write returned nil, so the page shows what clients were told
// is taken, and never what was refused with a 503. Publishing does not
// block (webui.Live drops for slow pages) and costs an atomic load while
// no page is open, so the tap never slows ingest.
type liveSink struct {
	next     ingest.Sink
	live     *webui.Live
	topic    string
	delivery string
}

func (s liveSink) Write(ctx context.Context, recs []event.Record) error {
	if !s.live.Watching() {
		return s.next.Write(ctx, recs)
	}
	var pos []kafka.Position
	var err error
	if ps, ok := s.next.(positionedSink); ok {
		pos = make([]kafka.Position, len(recs))
		err = ps.WriteAt(ctx, recs, pos)
	} else {
		err = s.next.Write(ctx, recs)
	}
	if err != nil {
		return err
	}
	now := time.Now()
	items := make([]webui.Item, len(recs))
	for i := range recs {
		r := &recs[i]
		// Value copied: the page keeps items, ingest reuses the records' memory (RecordsDone).
		it := webui.Item{Key: string(r.Key), ID: r.EventID, Topic: r.Topic, Value: bytes.Clone(r.Value), At: now, Delivery: s.delivery, Offset: -1}
		if pos != nil {
			it.Partition, it.Offset = pos[i].Partition, pos[i].Offset
		}
		if r.Topic != s.topic {
			it.Reject = &webui.Rejection{}
		}
		for _, h := range r.Headers {
			switch h.Key {
			case event.HeaderEventName:
				it.Name = string(h.Value)
			case event.HeaderError:
				if it.Reject != nil {
					it.Reject.Error = string(h.Value)
				}
			case event.HeaderReason:
				if it.Reject != nil {
					it.Reject.Reason = string(h.Value)
				}
			}
		}
		items[i] = it
	}
	s.live.Publish(items)
	return nil
}

// RecordsDone is next's: the tap keeps copies only.
func (s liveSink) RecordsDone(err error) bool {
	rd, ok := s.next.(ingest.RecordsDone)
	return ok && rd.RecordsDone(err)
}

var _ ingest.Sink = liveSink{}
