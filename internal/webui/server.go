package webui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

var zeroTime time.Time

// Source is what the pages show of the gateway.
type Source struct {
	Live *Live
	// State is the gateway's state (its readiness), sent to the live page
	// every second; it must be safe for concurrent use.
	State func() any
	// Stopping reports whether the gateway is shutting down: the live
	// streams end then, within statsEvery, so that they do not hold up the
	// HTTP server's drain.
	Stopping func() bool
	// Authorize, when set, is asked about every request under /ui before
	// it is served: it answers the ones it refuses through w (401 with a
	// challenge, 403, 429) and returns false. The live page shows user
	// data: the gateway sets it with --auth.
	Authorize func(w http.ResponseWriter, r *http.Request) bool
	// Recheck, when set, is asked every statsEvery whether the caller of
	// an open stream may still watch: one whose client was removed from
	// the clients file, or is no longer an admin, loses its stream within
	// a second rather than when it goes away.
	Recheck func(r *http.Request) bool
}

// statsEvery is how often a live page gets counters and state.
const statsEvery = time.Second

// writeWait bounds one write to a live page; a page that does not read for
// that long is closed, freeing its place.
const writeWait = 10 * time.Second

// Register adds the browser routes to mux: /sdk/inlet.js (and its types)
// always; /ui when cfg.UI; /example/ when cfg.Example.
func Register(mux *http.ServeMux, cfg Config, src Source) {
	sdk, dts := loadAsset("dist/inlet.js"), loadAsset("dist/inlet.d.ts")
	mux.HandleFunc("GET /sdk/inlet.js", func(w http.ResponseWriter, r *http.Request) { sdk.serve(w, r, sdkCache) })
	mux.HandleFunc("GET /sdk/inlet.d.ts", func(w http.ResponseWriter, r *http.Request) { dts.serve(w, r, sdkCache) })
	if cfg.UI {
		guard := func(h http.Handler) http.Handler {
			if src.Authorize == nil {
				return h
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if src.Authorize(w, r) {
					h.ServeHTTP(w, r)
				}
			})
		}
		mux.Handle("GET /ui", guard(http.RedirectHandler("/ui/", http.StatusFound)))
		mux.Handle("GET /ui/", guard(staticDir("ui", "/ui/")))
		mux.Handle("GET /ui/stream", guard(&stream{cfg: cfg, src: src}))
	}
	if cfg.Example {
		mux.Handle("GET /example", http.RedirectHandler("/example/", http.StatusFound))
		mux.Handle("GET /example/", staticDir("example", "/example/"))
	}
}

// stream serves GET /ui/stream?event=&user=: the live page's server-sent
// events. Event types: "item" (one record, see itemJSON), "skipped" ({"n"}:
// records this page missed since the last item, its queue being full),
// "stats" (counters, rates and the gateway's state, every statsEvery).
type stream struct {
	cfg Config
	src Source
}

func (s *stream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v, err := s.src.Live.subscribe(q.Get("event"), q.Get("user"))
	var tm tooManyViewers
	if errors.As(err, &tm) {
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("%d live pages are open, the most --ui-max-viewers allows; close one or raise it", tm.max), http.StatusServiceUnavailable)
		return
	}
	defer s.src.Live.unsubscribe(v)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	var buf []byte
	send := func() bool {
		// The server's WriteTimeout is for requests, not for a stream:
		// each write gets writeWait instead.
		_ = rc.SetWriteDeadline(time.Now().Add(writeWait))
		_, err := w.Write(buf)
		buf = buf[:0]
		return err == nil && rc.Flush() == nil
	}
	buf = append(buf, "retry: 2000\n\n"...)
	buf = s.appendStats(buf)
	if !send() {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if s.src.Stopping != nil && s.src.Stopping() {
				return
			}
			if s.src.Recheck != nil && !s.src.Recheck(r) {
				return
			}
			buf = s.appendStats(buf)
		case it := <-v.ch:
			buf = s.appendItem(buf, v, it)
			// Take what else is queued now, for one write.
			for n := len(v.ch); n > 0; n-- {
				buf = s.appendItem(buf, v, <-v.ch)
			}
		}
		if n := v.skipped.Swap(0); n > 0 {
			buf = appendEvent(buf, "skipped", []byte(`{"n":`+strconv.FormatUint(n, 10)+`}`))
		}
		if !send() {
			return
		}
	}
}

func (s *stream) appendItem(buf []byte, v *viewer, it Item) []byte {
	// Skipped records were dropped before this one: say so in order.
	if n := v.skipped.Swap(0); n > 0 {
		buf = appendEvent(buf, "skipped", []byte(`{"n":`+strconv.FormatUint(n, 10)+`}`))
	}
	b, _ := json.Marshal(itemJSON(it, s.cfg.ShowRejectedContent))
	return appendEvent(buf, "item", b)
}

// liveItem is the JSON of an "item" event.
type liveItem struct {
	Kind      string `json:"kind"` // "event" or "rejected"
	Name      string `json:"name,omitempty"`
	Key       string `json:"key,omitempty"`
	ID        string `json:"id,omitempty"`
	Topic     string `json:"topic"`
	At        int64  `json:"at"`    // ms since the epoch, when the sink took it
	Value     any    `json:"value"` // null for a rejected event, unless Config.ShowRejectedContent
	Reason    string `json:"reason,omitempty"`
	Error     string `json:"error,omitempty"`
	Delivery  string `json:"delivery"`
	Partition *int32 `json:"partition,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
}

// maxErrorBytes bounds a rejection's message on the page: it may quote
// what the client sent.
const maxErrorBytes = 128

func itemJSON(it Item, rejectedContent bool) liveItem {
	li := liveItem{Kind: "event", Name: it.Name, Key: it.Key, ID: it.ID, Topic: it.Topic, At: it.At.UnixMilli(), Delivery: it.Delivery}
	switch {
	case it.Reject != nil && !rejectedContent:
		// Why, not what: the reason and the message the client got.
		li.Key, li.ID = "", ""
	case json.Valid(it.Value):
		li.Value = json.RawMessage(it.Value)
	default:
		li.Value = string(it.Value)
	}
	if it.Reject != nil {
		li.Kind, li.Reason, li.Error = "rejected", it.Reject.Reason, it.Reject.Error
		if !rejectedContent {
			li.Error = truncate(li.Error, maxErrorBytes)
		}
	}
	if it.Offset >= 0 {
		p, o := it.Partition, it.Offset
		li.Partition, li.Offset = &p, &o
	}
	return li
}

// statsJSON is the JSON of a "stats" event.
type statsJSON struct {
	Since   int64       `json:"since"` // ms since the epoch: counting started with the first open page
	Names   []NameStats `json:"names"`
	Viewers int32       `json:"viewers"`
	Max     int         `json:"max_viewers"`
	State   any         `json:"state,omitempty"`
	// Example and Auth tell the page what its own hints may show: the
	// link to /example/ only when it is served, and the curl to send one
	// with a placeholder for credentials when ingest needs them.
	Example bool `json:"example"`
	Auth    bool `json:"auth"`
}

func (s *stream) appendStats(buf []byte) []byte {
	names, since := s.src.Live.Stats()
	st := statsJSON{Since: since.UnixMilli(), Names: names, Viewers: s.src.Live.viewers.Load(), Max: s.cfg.MaxViewers,
		Example: s.cfg.Example, Auth: s.src.Authorize != nil}
	if s.src.State != nil {
		st.State = s.src.State()
	}
	b, _ := json.Marshal(st)
	return appendEvent(buf, "stats", b)
}

// appendEvent appends one server-sent event; data is one line of JSON.
func appendEvent(buf []byte, typ string, data []byte) []byte {
	buf = append(buf, "event: "...)
	buf = append(buf, typ...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

// truncate cuts s to at most n bytes, at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return event.Prefix(s, n) + "…"
}
