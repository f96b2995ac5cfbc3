package ingest

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
)

// gif is a transparent 1x1 GIF.
var gif = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// servePixel answers GET /i: the event comes from the query, either as
// fields (e= or event= for the name, id=, uid=, anon_id=, ts=, p.<key>=,
// c.<key>=) or as data=<base64url JSON event>. It always answers the GIF,
// also for an invalid event (which is dead-lettered and counted), so that a
// page never shows a broken image; 503 when the event could not be stored.
// With credentials on (--auth) the request carries them as k=<secret> (a
// browser sets no header on an image); refused credentials still get the
// image, with status 401 (429 over the client's rate).
// HEAD answers the GIF's headers and records nothing: link checkers and
// prefetchers send it, not pages.
func (s *Server) servePixel(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "image/gif")
	h.Set("Cache-Control", "no-cache, no-store, must-revalidate, max-age=0")
	h.Set("Pragma", "no-cache")
	h.Set("Expires", "0")
	h.Set("Content-Length", strconv.Itoa(len(gif)))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}

	p, herr := s.authenticate(r)
	if herr == nil {
		herr = s.admit(p, 1)
	}
	if herr != nil {
		s.pixelError(w, herr)
		return
	}
	meta, eo := s.requestMeta(r, p)
	if eo.Drop { // a bot's, with --bots drop: not written
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(gif)
		return
	}
	// The query without its credentials: a query that makes no event is
	// dead-lettered as sent, and a secret must never be stored.
	raw, bad := pixelEvent(auth.WithoutCredentials(r.URL.RawQuery))
	var (
		recs     []event.Record
		accepted int
		t        tally
	)
	switch {
	case bad != nil:
		recs = []event.Record{s.deadLetter(raw, bad, meta, p.Client.Redaction())}
	default:
		b := event.NewBatch(s.topic(eo), meta, s.cfg.MaxEventBytes)
		defer b.Release()
		items := [][]byte{raw}
		b.Add(raw)
		var ans Answer
		recs, ans, t = s.records(r, "pixel", b, items, meta, p)
		accepted = ans.Accepted
	}
	if !s.writePixel(w, r, recs) {
		return
	}
	s.count(accepted, recs)
	t.count(s.metrics, s.mode)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(gif)
}

// pixelError answers a refused pixel request (credentials, rate) with the
// image and the refusal's status and headers: a page shows no broken
// image, and the status says what happened.
func (s *Server) pixelError(w http.ResponseWriter, e *httpError) {
	s.errorHeaders(w.Header(), e)
	w.WriteHeader(e.status)
	_, _ = w.Write(gif)
}

// writePixel is write for the pixel: on failure it still answers an image,
// with the pixel's headers and write's Retry-After.
func (s *Server) writePixel(w http.ResponseWriter, r *http.Request, recs []event.Record) bool {
	failed := &pixelFailure{header: http.Header{}}
	if ok, _ := s.write(failed, detached(r), recs); ok {
		return true
	}
	if ra := failed.header.Get("Retry-After"); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(gif)
	return false
}

// pixelFailure swallows the JSON error answer write produces, body and
// headers (its Content-Type and Cache-Control are not the image's).
type pixelFailure struct{ header http.Header }

func (p *pixelFailure) Header() http.Header         { return p.header }
func (p *pixelFailure) Write(b []byte) (int, error) { return len(b), nil }
func (p *pixelFailure) WriteHeader(int)             {}

// pixelEvent builds the raw JSON event from a pixel's query, so that pixel
// events go through the same validation as posted ones.
// A data= that is not base64 is returned as sent, with the reason; so is a
// query that says one thing twice (e= and event=, or a field repeated),
// which would otherwise be read one way or the other at random.
func pixelEvent(rawQuery string) ([]byte, *event.Invalid) {
	q, err := pixelQuery(rawQuery)
	if err != nil {
		return []byte(rawQuery), &event.Invalid{Reason: event.ReasonMalformed, Msg: "the query cannot be read: " + err.Error()}
	}
	if _, ok := q["e"]; ok && q.Has("event") {
		return []byte(rawQuery), &event.Invalid{Reason: event.ReasonBadField, Msg: "both e= and event= name the event; send one"}
	}
	for k, vs := range q {
		if !pixelField(k) {
			continue
		}
		if len(vs) > 1 {
			return []byte(rawQuery), &event.Invalid{Reason: event.ReasonBadField, Msg: fmt.Sprintf("%s= is given %d times; send it once", clip(k), len(vs))}
		}
		if !utf8.ValidString(k) || !utf8.ValidString(vs[0]) {
			// As a posted event's would be; json.Marshal would put U+FFFD
			// in its place.
			return []byte(rawQuery), &event.Invalid{Reason: event.ReasonMalformed, Msg: fmt.Sprintf("%q= is not valid UTF-8 once unescaped", clip(k))}
		}
	}
	if q.Get("data") == "" && q.Get("e") == "" && q.Get("event") == "" {
		// Kept as sent: the JSON built from it would say nothing.
		return []byte(rawQuery), &event.Invalid{Reason: event.ReasonMissingEvent, Msg: `e= (or event=) is required: a non-empty string naming the event`}
	}
	if d := q.Get("data"); d != "" {
		t := strings.TrimRight(d, "=")
		if b, err := base64.RawURLEncoding.DecodeString(t); err == nil {
			return b, nil
		}
		if b, err := base64.RawStdEncoding.DecodeString(t); err == nil {
			return b, nil
		}
		return []byte(d), &event.Invalid{Reason: event.ReasonMalformed, Msg: "data= is not base64url-encoded JSON"}
	}
	ev := map[string]any{}
	props := map[string]string{}
	ctx := map[string]string{}
	for k, vs := range q {
		if len(vs) == 0 {
			continue
		}
		v := vs[0]
		switch {
		case k == "e" || k == "event":
			ev["event"] = v
		case k == "id" || k == "uid" || k == "anon_id":
			ev[k] = v
		case k == "ts":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				ev["ts"] = n
			} else {
				ev["ts"] = v
			}
		case strings.HasPrefix(k, "p."):
			props[k[2:]] = v
		case strings.HasPrefix(k, "c."):
			ctx[k[2:]] = v
		}
		// Anything else (cache busters such as _= or cb=) is ignored.
	}
	if len(props) > 0 {
		ev["props"] = props
	}
	if len(ctx) > 0 {
		ev["context"] = ctx
	}
	b, _ := json.Marshal(ev)
	return b, nil
}

// pixelQuery parses a pixel's query as url.ParseQuery does, but a pair of
// the event's (pixelField) that cannot be read (a bad escape, a ';') is an
// error, where url.ParseQuery would drop it and read the rest: the event
// would lose a field, or its name, unsaid. Other pairs that cannot be read
// (cache busters) are dropped.
func pixelQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(k)
		val, verr := url.QueryUnescape(v)
		if kerr != nil || verr != nil || strings.Contains(pair, ";") {
			if kerr == nil && !pixelField(key) {
				continue
			}
			why := "a ';' in it"
			if err := cmp.Or(kerr, verr); err != nil {
				why = err.Error()
			}
			return nil, fmt.Errorf("%q: %s", clip(pair), clip(why))
		}
		q[key] = append(q[key], val)
	}
	return q, nil
}

// pixelField reports whether query parameter k carries part of the event
// (others, such as cache busters, are ignored).
func pixelField(k string) bool {
	switch k {
	case "e", "event", "id", "uid", "anon_id", "ts", "data":
		return true
	}
	return strings.HasPrefix(k, "p.") || strings.HasPrefix(k, "c.")
}
