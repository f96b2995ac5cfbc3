package ingest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inlet-dev/inlet/internal/event"
)

// checkGIF checks a pixel answer: status, the GIF and no-cache headers.
func checkGIF(tb testing.TB, r response, status int, head bool) {
	tb.Helper()
	want := gif
	if head {
		want = nil
	}
	if r.status != status || r.header.Get("Content-Type") != "image/gif" || !bytes.Equal(r.body, want) {
		tb.Fatalf("pixel answer %d %q %q, want %d and the GIF", r.status, r.header.Get("Content-Type"), r.body, status)
	}
	for k, v := range map[string]string{"Cache-Control": "no-cache, no-store, must-revalidate, max-age=0", "Pragma": "no-cache",
		"Expires": "0", "Content-Length": strconv.Itoa(len(gif))} {
		if got := r.header.Get(k); got != v {
			tb.Errorf("pixel %s %q, want %q", k, got, v)
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestPixel: GET /i and /i.gif take an event from the query, as fields or
// as data=base64url JSON; every answer is the GIF, also for an invalid
// event, which is dead-lettered.
func TestPixel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		method string
		target string
		topic  string // where the record goes
		key    string
		value  string // the value, as JSON, without the enrichment; or the dead letter as sent
		reason event.Reason
		msg    string // inlet-error
	}{
		{name: "fields", target: "/i?e=pixel_fields&uid=p1&p.path=%2Fhome&c.ref=ad&ts=1767225600000&cb=123&_=9",
			topic: "events", key: "p1", value: `{"event":"pixel_fields","uid":"p1","ts":1767225600000,"props":{"path":"/home"},"context":{"ref":"ad"}}`},
		{name: "gif path, event=, ids", target: "/i.gif?event=pv&id=i1&anon_id=a1",
			topic: "events", key: "a1", value: `{"event":"pv","id":"i1","anon_id":"a1"}`},
		{name: "id as key", target: "/i?e=pv&id=i2", topic: "events", key: "i2", value: `{"event":"pv","id":"i2"}`},
		{name: "ts as RFC 3339", target: "/i?e=pv&uid=u&ts=2026-01-01T00:00:00Z",
			topic: "events", key: "u", value: `{"event":"pv","uid":"u","ts":"2026-01-01T00:00:00Z"}`},
		{name: "repeated cache buster", target: "/i?e=one&cb=1&cb=2&uid=u", topic: "events", key: "u", value: `{"event":"one","uid":"u"}`},
		{name: "data base64url", target: "/i.gif?data=" + b64(`{"event":"pixel_data","anon_id":"d1","props":{"a":[1,2],"q":"?&/"}}`),
			topic: "events", key: "d1", value: `{"event":"pixel_data","anon_id":"d1","props":{"a":[1,2],"q":"?&/"}}`},
		{name: "data padded std base64", target: "/i?data=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(`{"event":"std>>?","uid":"s"}`))),
			topic: "events", key: "s", value: `{"event":"std>>?","uid":"s"}`},
		// A query the pixel cannot make an event of is dead-lettered as
		// sent, not as the JSON it would have made.
		{name: "no event name", target: "/i?uid=no-name", topic: "events.invalid", value: "uid=no-name",
			reason: event.ReasonMissingEvent, msg: `e= (or event=) is required: a non-empty string naming the event`},
		{name: "event name in capitals", target: "/i?E=pv&uid=u", topic: "events.invalid", value: "E=pv&uid=u",
			reason: event.ReasonMissingEvent, msg: `e= (or event=) is required: a non-empty string naming the event`},
		{name: "empty event name", target: "/i?e=&uid=u", topic: "events.invalid", value: "e=&uid=u",
			reason: event.ReasonMissingEvent, msg: `e= (or event=) is required: a non-empty string naming the event`},
		{name: "semicolon", target: "/i?e=pv;uid=u", topic: "events.invalid", value: "e=pv;uid=u",
			reason: event.ReasonMalformed, msg: `the query cannot be read: "e=pv;uid=u": a ';' in it`},
		{name: "bad escape", target: "/i?e=pv&p.a=%zz", topic: "events.invalid", value: "e=pv&p.a=%zz",
			reason: event.ReasonMalformed, msg: `the query cannot be read: "p.a=%zz": invalid URL escape "%zz"`},
		{name: "bad escape in an ignored parameter", target: "/i?e=pv&uid=u&cb=%zz&_=1;2", topic: "events", key: "u", value: `{"event":"pv","uid":"u"}`},
		{name: "invalid UTF-8", target: "/i?e=pv&p.u=%FF", topic: "events.invalid", value: "e=pv&p.u=%FF",
			reason: event.ReasonMalformed, msg: `"p.u"= is not valid UTF-8 once unescaped`},
		{name: "invalid UTF-8 in a name", target: "/i?e=pv&p.%FF=1", topic: "events.invalid", value: "e=pv&p.%FF=1",
			reason: event.ReasonMalformed, msg: `"p.\xff"= is not valid UTF-8 once unescaped`},
		{name: "invalid UTF-8 in an ignored parameter", target: "/i?e=pv&uid=u&cb=%FF", topic: "events", key: "u", value: `{"event":"pv","uid":"u"}`},
		{name: "bad ts", target: "/i?e=pv&ts=yesterday", topic: "events.invalid", value: `{"event":"pv","ts":"yesterday"}`,
			reason: event.ReasonBadField, msg: `"ts" "yesterday" is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)`},
		// A query that says one thing twice is no event (it was read one
		// way or the other, in map order).
		{name: "e= and event=", target: "/i?e=one&event=two", topic: "events.invalid", value: "e=one&event=two",
			reason: event.ReasonBadField, msg: "both e= and event= name the event; send one"},
		{name: "e= twice", target: "/i?e=one&e=two", topic: "events.invalid", value: "e=one&e=two",
			reason: event.ReasonBadField, msg: "e= is given 2 times; send it once"},
		{name: "prop twice", target: "/i?e=one&p.k=1&p.k=2", topic: "events.invalid", value: "e=one&p.k=1&p.k=2",
			reason: event.ReasonBadField, msg: "p.k= is given 2 times"},
		{name: "ts seconds", target: "/i?e=pv&ts=1767225600", topic: "events.invalid", value: `{"event":"pv","ts":1767225600}`,
			reason: event.ReasonBadField, msg: "it looks like seconds; send milliseconds"},
		{name: "data not base64", target: "/i?data=!!!", topic: "events.invalid", value: "!!!",
			reason: event.ReasonMalformed, msg: "data= is not base64url-encoded JSON"},
		{name: "data not JSON", target: "/i?data=" + b64(`{"event":`), topic: "events.invalid", value: `{"event":`,
			reason: event.ReasonMalformed, msg: "malformed JSON"},
		{name: "data unknown field", target: "/i?data=" + b64(`{"event":"x","cb":1}`), topic: "events.invalid", value: `{"event":"x","cb":1}`,
			reason: event.ReasonUnknownField, msg: `unknown field "cb"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.method == "" {
				tc.method = "GET"
			}
			h := newHarness(t, nil)
			r := h.do(t, tc.method, tc.target, nil, "User-Agent", "pixel-test/1")
			checkGIF(t, r, http.StatusOK, tc.method == "HEAD")
			recs := h.sink.records()
			if len(recs) != 1 || recs[0].Topic != tc.topic {
				t.Fatalf("sink got %v, want one record on %s", recs, tc.topic)
			}
			rec := recs[0]
			if tc.topic == "events.invalid" {
				msg, _ := header(rec, event.HeaderError)
				reason, _ := header(rec, event.HeaderReason)
				if string(rec.Value) != tc.value || reason != string(tc.reason) || !bytes.Contains([]byte(msg), []byte(tc.msg)) {
					t.Fatalf("dead letter %q (%s: %s), want %q (%s: %s)", rec.Value, reason, msg, tc.value, tc.reason, tc.msg)
				}
				if got := testutil.ToFloat64(h.s.metrics.EventsRejected.WithLabelValues(string(tc.reason))); got != 1 {
					t.Errorf("inlet_events_rejected_total{reason=%q} %v, want 1", tc.reason, got)
				}
				return
			}
			f := fields(t, rec)
			if string(rec.Key) != tc.key || f["ip"] != "127.0.0.1" || f["ua"] != "pixel-test/1" || f["received_at"] == nil {
				t.Errorf("record key %q value %s: want key %q and the enrichment", rec.Key, rec.Value, tc.key)
			}
			want := fields(t, event.Record{Value: []byte(tc.value)})
			for _, k := range []string{"ip", "ua", "received_at"} {
				delete(f, k)
			}
			if _, ok := want["id"]; !ok {
				delete(f, "id") // generated
			}
			if fmt.Sprint(f) != fmt.Sprint(want) {
				t.Errorf("event %v, want %v", f, want)
			}
		})
	}
}

// TestPixelHead: HEAD answers the GIF's headers and records nothing (it
// recorded an event, as GET does).
func TestPixelHead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.sink.setFail(failFull) // not even asked
	for _, target := range []string{"/i?e=head&uid=h", "/i.gif?uid=no-name"} {
		checkGIF(t, h.do(t, "HEAD", target, nil), http.StatusOK, true)
	}
	if n := len(h.sink.calls()); n != 0 {
		t.Fatalf("HEAD wrote %d times to the sink, want none", n)
	}
}

// TestPixelSinkFails: a pixel whose event could not be stored is still an
// image, with 503 and Retry-After; an invalid one too.
func TestPixelSinkFails(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"/i?e=pv", "/i.gif?uid=no-name"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			h.sink.setFail(failFull)
			r := h.do(t, "GET", target, nil)
			checkGIF(t, r, http.StatusServiceUnavailable, false)
			if r.header.Get("Retry-After") != "2" {
				t.Errorf("Retry-After %q, want 2", r.header.Get("Retry-After"))
			}
			if got := h.sinkErrors("full"); got != 1 {
				t.Errorf("inlet_sink_errors_total{kind=full} %v, want 1", got)
			}
		})
	}
}
