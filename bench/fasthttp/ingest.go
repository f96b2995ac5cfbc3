package main

import (
	"context"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/inlet-dev/inlet/internal/event"
)

// sink takes a request's records and returns once Kafka acknowledged every
// one of them (acks=all), as ingest's Sink does with --ack kafka.
// *kafka.Producer is one; tests use a recorder.
type sink interface {
	ProduceSync(ctx context.Context, recs []event.Record) error
}

// ingester is the ingest work of POST /v1/batch that both front ends share,
// mirroring internal/ingest's serveEvents without auth, CORS, catalog,
// metrics, compression or the memory budget: frame the body, read each
// event once (event.Batch), build the records, hand them to the sink and
// wait for Kafka, and answer. It is safe for concurrent use.
type ingester struct {
	topic        string
	deadLetter   string
	limits       event.Limits
	maxBodyBytes int64
	writeTimeout time.Duration
	sink         sink
	now          func() time.Time
}

// answer is an ingest answer: its status and its JSON body.
type answer struct {
	status int
	body   []byte
}

// contentTypeOK reports whether ct is one that ingest reads as a JSON batch
// (the common values only: a batch with parameters is not measured here).
func contentTypeOK(ct string) bool {
	switch ct {
	case "", "application/json", "text/plain":
		return true
	}
	return false
}

// itemsPool keeps the slices of a request's events, as ingest does.
var itemsPool = sync.Pool{New: func() any { return new([][]byte) }}

// serve runs the ingest work on body, one request's JSON batch, with meta
// what the front end knows of the request; it appends the answer's body to
// dst. It blocks until Kafka acknowledged the records or the write timeout
// passed. body is only read during the call.
func (g *ingester) serve(dst, body []byte, meta event.Meta) answer {
	ib := itemsPool.Get().(*[][]byte)
	defer func() {
		clear(*ib)
		*ib = (*ib)[:0]
		itemsPool.Put(ib)
	}()
	items, err := event.Frame((*ib)[:0], body, event.FormatJSON, g.limits.MaxEvents)
	*ib = items
	if err != nil {
		return answerError(dst, 400, err.Error())
	}
	b := event.NewBatch(g.topic, meta, g.limits.MaxEventBytes)
	defer b.Release()
	for _, raw := range items {
		if err := event.BodyFault(body, raw, event.FormatJSON, b.Add(raw)); err != nil {
			return answerError(dst, 400, err.Error())
		}
	}
	b.Build()
	recs := make([]event.Record, len(items))
	accepted := 0
	for i, raw := range items {
		if bad := b.Invalid(i); bad != nil {
			// Copy: raw aliases the body, which the front end reuses.
			rec := event.DeadLetter(g.deadLetter, append([]byte(nil), raw...), bad.Msg, meta.ReceivedAt, g.limits.MaxEventBytes)
			rec.Headers = append(rec.Headers, event.Header{Key: event.HeaderReason, Value: []byte(bad.Reason)})
			recs[i] = rec
			continue
		}
		recs[i] = b.Record(i)
		accepted++
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.writeTimeout)
	err = g.sink.ProduceSync(ctx, recs)
	cancel()
	if err != nil {
		return answerError(dst, 503, "events not stored: "+err.Error())
	}
	dst = append(dst, `{"accepted":`...)
	dst = strconv.AppendInt(dst, int64(accepted), 10)
	dst = append(dst, `,"rejected":[`...)
	first := true
	for i := range items {
		bad := b.Invalid(i)
		if bad == nil {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"error":`...)
		dst, _ = jsontext.AppendQuote(dst, bad.Msg)
		dst = append(dst, '}')
	}
	dst = append(dst, "]}\n"...)
	status := 200
	if accepted == 0 {
		status = 400
	}
	return answer{status: status, body: dst}
}

// answerError appends {"error": msg} to dst.
func answerError(dst []byte, status int, msg string) answer {
	dst = append(dst, `{"error":`...)
	dst, _ = jsontext.AppendQuote(dst, msg)
	return answer{status: status, body: append(dst, "}\n"...)}
}

// clientIP is the peer's address as ingest writes it into the event's ip
// (no trusted proxies here).
func clientIP(a netip.Addr) string { return a.Unmap().String() }
