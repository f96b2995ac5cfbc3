package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/webui"
)

// startUI adds the browser side to mux (/sdk/inlet.js; /ui and its stream
// unless cfg.UI is off; /example/ with cfg.Example) and returns sink with
// the live page's tap: ingest must write to the sink it returns. With
// --auth, /ui answers admin clients only (authorizeUI). It starts nothing
// that needs stopping: a live stream ends when its page goes away, or
// within a second of Shutdown.
func (g *Gateway) startUI(mux *http.ServeMux, sink ingest.Sink, cfg webui.Config) ingest.Sink {
	live := webui.NewLive(cfg)
	src := webui.Source{
		Live:     live,
		State:    func() any { return g.Ready() },
		Stopping: g.stopping.Load,
	}
	if g.cfg.Auth.HTTP {
		src.Authorize, src.Recheck = g.authorizeUI, g.recheckUI
	}
	webui.Register(mux, cfg, src)
	if !cfg.UI {
		return sink
	}
	return liveSink{next: sink, live: live, topic: g.cfg.Ingest.Topic, delivery: deliveryNote(g.cfg.Ack), rejectedContent: cfg.ShowRejectedContent}
}

// authorizeUI lets an admin client of the clients file see the live page
// (it shows user data), with its credentials in an Authorization header:
// HTTP Basic, the client id as user and its secret as password, which a
// browser asks for on the 401's challenge and then sends with the page's
// EventSource too (same origin, same path), or a Bearer secret. k= in the
// query is not taken here: a secret in a page's address stays in the
// browser's history. Failures count against the caller's address as on
// ingest (429 past --auth-fail-burst); a client that is not an admin gets
// 403.
func (g *Gateway) authorizeUI(w http.ResponseWriter, r *http.Request) bool {
	refuse := func(status int, msg string) bool {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, msg, status)
		return false
	}
	if g.auth == nil || g.ingest == nil { // not started yet
		return refuse(http.StatusServiceUnavailable, "starting")
	}
	if r.Header.Get("Authorization") == "" {
		w.Header().Set("WWW-Authenticate", auth.BasicChallenge)
		return refuse(http.StatusUnauthorized, "the live page shows user data: sign in as an admin client of the clients file (user: its id, password: its secret; `inlet clients add --admin`)")
	}
	p, err := g.auth.FromHTTP(r, g.ingest.ClientIP(r))
	if err == nil && p.Client == nil {
		err = auth.ErrBadCredentials
	}
	if err != nil {
		status := auth.HTTPStatus(err)
		switch {
		case status == http.StatusTooManyRequests:
			w.Header().Set("Retry-After", strconv.Itoa(auth.RetryAfterSeconds(auth.RetryAfter(err))))
		default:
			status = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", auth.BasicChallenge)
		}
		return refuse(status, "credentials refused: "+err.Error())
	}
	if !p.Client.Admin {
		return refuse(http.StatusForbidden, fmt.Sprintf("client %q is not an admin: the live page is for admin clients (`inlet clients add --admin`)", p.Client.ID))
	}
	return true
}

// recheckUI reports whether the caller of an open live stream is still an
// admin client with these credentials (the clients file may have changed
// since the stream opened). It is not counted against the caller's address.
func (g *Gateway) recheckUI(r *http.Request) bool {
	p, err := g.auth.FromHTTP(r, "")
	return err == nil && p.Client != nil && p.Client.Admin
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
	// rejectedContent: the page shows what rejected events held
	// (--ui-show-rejected-content); without, their values are not kept.
	rejectedContent bool
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
		it := webui.Item{Key: string(r.Key), ID: r.EventID, Topic: r.Topic, At: now, Delivery: s.delivery, Offset: -1}
		if pos != nil {
			it.Partition, it.Offset = pos[i].Partition, pos[i].Offset
		}
		if r.Topic != s.topic {
			it.Reject = &webui.Rejection{}
		}
		if it.Reject == nil || s.rejectedContent {
			// Copied: the page keeps items, ingest reuses the records' memory (RecordsDone).
			it.Value = bytes.Clone(r.Value)
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
