package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestPartialBatch: valid events go through, each invalid one is rejected by
// index and dead-lettered as sent, with its reason in headers.
func TestPartialBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	big := `{"event":"big","props":{"x":"` + strings.Repeat("a", 33<<10) + `"}}`
	items := []string{`{"event":"ok1"}`, `{"event":5}`, `"just a string"`, `{"props":{}}`, `{"event":"ok2","props":[1]}`, big,
		`{"event":"ok3","extra":1}`, `{"event":"` + strings.Repeat("é", 129) + `"}`, `{"event":"ok4","id":""}`, `{"event":"ok5"}`}
	body := "[" + strings.Join(items, ",") + "]"
	r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json")
	if r.status != 200 {
		t.Fatalf("answer %s, want 200", r)
	}
	want := []struct {
		index  int
		msg    string
		reason event.Reason
	}{
		{1, `"event" must be a string, got number`, event.ReasonBadField},
		{2, "event must be a JSON object, got string", event.ReasonNotObject},
		{3, `"event" is required: a non-empty string naming the event`, event.ReasonMissingEvent},
		{4, `"props" must be a JSON object, got array`, event.ReasonBadField},
		{5, "the limit is 32768", event.ReasonTooLarge},
		{6, `unknown field "extra": put custom data in "props" or "context"`, event.ReasonUnknownField},
		{7, `"event" is 129 characters; the limit is 128`, event.ReasonBadField},
		{8, `"id" must be a non-empty string of at most 128 bytes`, event.ReasonBadField},
	}
	a := decodeAnswer(t, r)
	if a.Accepted != 2 || len(a.Rejected) != len(want) {
		t.Fatalf("answer %s: want 2 accepted, %d rejected", r, len(want))
	}
	calls := h.sink.calls()
	if len(calls) != 1 || len(calls[0]) != len(items) {
		t.Fatalf("sink got %d writes, want one of %d records (events and dead letters together)", len(calls), len(items))
	}
	recs := calls[0]
	for i, w := range want {
		if got := a.Rejected[i]; got.Index != w.index || !strings.Contains(got.Error, w.msg) {
			t.Errorf("rejection %d: %+v, want index %d saying %q", i, got, w.index, w.msg)
		}
		d := recs[w.index]
		if d.Topic != "events.invalid" {
			t.Errorf("event %d went to %s, want events.invalid", w.index, d.Topic)
		}
		if msg, _ := header(d, event.HeaderError); msg != a.Rejected[i].Error {
			t.Errorf("dead letter %d: inlet-error %q, want the answer's %q", w.index, msg, a.Rejected[i].Error)
		}
		if reason, _ := header(d, event.HeaderReason); reason != string(w.reason) {
			t.Errorf("dead letter %d: inlet-reason %q, want %s", w.index, reason, w.reason)
		}
		if at, _ := header(d, event.HeaderReceivedAt); at != fixedNow.Format(event.TimeLayout) {
			t.Errorf("dead letter %d: inlet-received-at %q, want %s", w.index, at, fixedNow.Format(event.TimeLayout))
		}
		wantValue := items[w.index]
		if w.reason == event.ReasonTooLarge {
			wantValue = wantValue[:32<<10]
			if tr, _ := header(d, event.HeaderTruncated); tr != "true" {
				t.Errorf("dead letter %d cut to the event limit without inlet-truncated", w.index)
			}
		}
		if string(d.Value) != wantValue {
			t.Errorf("dead letter %d: value %.80q, want the event as sent %.80q", w.index, d.Value, wantValue)
		}
	}
	for _, i := range []int{0, 9} {
		if recs[i].Topic != "events" {
			t.Errorf("valid event %d went to %s", i, recs[i].Topic)
		}
	}
	if got := testutil.ToFloat64(h.s.metrics.EventsAccepted); got != 2 {
		t.Errorf("inlet_events_accepted_total %v, want 2", got)
	}
	for reason, n := range map[event.Reason]float64{event.ReasonBadField: 4, event.ReasonNotObject: 1, event.ReasonMissingEvent: 1,
		event.ReasonTooLarge: 1, event.ReasonUnknownField: 1, event.ReasonMalformed: 0} {
		if got := testutil.ToFloat64(h.s.metrics.EventsRejected.WithLabelValues(string(reason))); got != n {
			t.Errorf("inlet_events_rejected_total{reason=%q} %v, want %v", reason, got, n)
		}
	}
}

// TestAllInvalid: a batch of only invalid events is answered 400, and is
// still dead-lettered (to the configured topic).
func TestAllInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.DeadLetterTopic = "dlq" })
	r := h.do(t, "POST", "/v1/batch", []byte(`[{"nope":1},{"event":"x","uid":7}]`), "Content-Type", "application/json")
	a := decodeAnswer(t, r)
	if r.status != 400 || a.Accepted != 0 || len(a.Rejected) != 2 {
		t.Fatalf("answer %s, want 400 with two rejected", r)
	}
	dead := h.sink.onTopic("dlq")
	if len(dead) != 2 || string(dead[0].Value) != `{"nope":1}` || string(dead[1].Value) != `{"event":"x","uid":7}` {
		t.Fatalf("dead letters %v, want both events as sent on dlq", dead)
	}
}

// TestAckStatus: a sink that only enqueues is answered 202.
func TestAckStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AckStatus = http.StatusAccepted })
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`)); r.status != 202 {
		t.Errorf("batch: %s, want 202", r)
	}
	if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"a"}`)); r.status != 202 {
		t.Errorf("track: %s, want 202", r)
	}
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":7}]`)); r.status != 400 {
		t.Errorf("all invalid: %s, want 400", r)
	}
}

// TestEnrichment: what the server adds to each event, the record key and
// the record headers.
func TestEnrichment(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ua := strings.Repeat("u", 600)
	body := `[{"event":"by_uid","uid":"u1","anon_id":"a1","id":"i1","props":{"path":"/","n":1.5,"html":"<b>&"}},` +
		`{"event":"by_anon","anon_id":"a2","id":"i2","context":{"lib":"js"}},` +
		`{"event":"by_id","id":"i3","ts":1767225600000},` +
		`{"event":"generated","ts":"2026-01-01T00:00:00Z","props":null}]`
	r := h.do(t, "POST", "/v1/batch", []byte(body), "Content-Type", "application/json", "User-Agent", ua)
	if r.status != 200 {
		t.Fatalf("answer %s", r)
	}
	recs := h.sink.onTopic("events")
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4", len(recs))
	}
	generated := fields(t, recs[3])["id"].(string)
	if len(generated) != 36 || generated[14] != '7' {
		t.Errorf("generated id %q is not a UUIDv7", generated)
	}
	cases := []struct {
		key, id string
		value   string // a part of the value, as encoded
	}{
		{"u1", "i1", `"props":{"path":"/","n":1.5,"html":"<b>&"}`},
		{"a2", "i2", `"context":{"lib":"js"}`},
		{"i3", "i3", `"ts":1767225600000`},
		{generated, generated, `"ts":"2026-01-01T00:00:00Z"`},
	}
	names := []string{"by_uid", "by_anon", "by_id", "generated"}
	for i, want := range cases {
		rec := recs[i]
		f := fields(t, rec)
		if string(rec.Key) != want.key {
			t.Errorf("%s: key %q, want %q (uid, else anon_id, else id)", names[i], rec.Key, want.key)
		}
		if f["id"] != want.id || rec.EventID != want.id {
			t.Errorf("%s: id %v, EventID %q, want %q", names[i], f["id"], rec.EventID, want.id)
		}
		if f["received_at"] != fixedNow.Format(event.TimeLayout) || f["ip"] != "127.0.0.1" || f["ua"] != ua[:512] {
			t.Errorf("%s: received_at %v ip %v ua %d bytes: want the server's time, 127.0.0.1 and the UA cut to 512 bytes",
				names[i], f["received_at"], f["ip"], len(f["ua"].(string)))
		}
		if !strings.Contains(string(rec.Value), want.value) {
			t.Errorf("%s: value %s lacks %s as sent", names[i], rec.Value, want.value)
		}
		wantHeaders := map[string]string{event.HeaderEventID: want.id, event.HeaderEventName: names[i], event.HeaderContentType: "application/json"}
		if len(rec.Headers) != len(wantHeaders) {
			t.Errorf("%s: headers %v, want %v", names[i], rec.Headers, wantHeaders)
		}
		for k, v := range wantHeaders {
			if got, _ := header(rec, k); got != v {
				t.Errorf("%s: header %s %q, want %q", names[i], k, got, v)
			}
		}
	}
	if _, ok := fields(t, recs[3])["props"]; ok {
		t.Errorf("props: null kept: %s", recs[3].Value)
	}
}

// TestCORS: preflights for allowed and other origins, and the headers of an
// actual cross-origin request.
func TestCORS(t *testing.T) {
	t.Parallel()
	shop := func(c *Config) { c.AllowedOrigins = []string{"https://shop.example/", "http://localhost:3000"} }
	cases := []struct {
		name    string
		origins func(*Config)
		method  string
		path    string
		headers []string
		status  int
		acao    string // Access-Control-Allow-Origin
		methods string // Access-Control-Allow-Methods
		allow   string
		vary    []string
	}{
		{name: "preflight allowed", origins: shop, method: "OPTIONS",
			headers: []string{"Origin", "https://shop.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type"},
			status:  204, acao: "https://shop.example", methods: "POST, OPTIONS",
			vary: []string{"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"}},
		{name: "preflight second origin", origins: shop, method: "OPTIONS",
			headers: []string{"Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST"},
			status:  204, acao: "http://localhost:3000", methods: "POST, OPTIONS", vary: []string{"Origin"}},
		{name: "preflight pixel", origins: shop, method: "OPTIONS", path: "/i",
			headers: []string{"Origin", "https://shop.example", "Access-Control-Request-Method", "GET"},
			status:  204, acao: "https://shop.example", methods: "GET, HEAD, OPTIONS", vary: []string{"Origin"}},
		{name: "preflight forbidden", origins: shop, method: "OPTIONS",
			headers: []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"},
			status:  403, vary: []string{"Origin"}},
		{name: "preflight any origin", method: "OPTIONS",
			headers: []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"},
			status:  204, acao: "https://evil.example", methods: "POST, OPTIONS", vary: []string{"Origin"}},
		{name: "OPTIONS without origin", origins: shop, method: "OPTIONS", status: 204, allow: "POST, OPTIONS"},
		{name: "simple request allowed", origins: shop, method: "POST", headers: []string{"Content-Type", "text/plain", "Origin", "https://shop.example"},
			status: 200, acao: "https://shop.example", vary: []string{"Origin"}},
		{name: "simple request from another origin", origins: shop, method: "POST", headers: []string{"Content-Type", "text/plain", "Origin", "https://evil.example"},
			status: 200, vary: []string{"Origin"}},
		{name: "same-origin request", origins: shop, method: "POST", headers: []string{"Content-Type", "text/plain"}, status: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.origins)
			if tc.path == "" {
				tc.path = "/v1/batch"
			}
			var body []byte
			if tc.method == "POST" {
				body = []byte(`[{"event":"e"}]`)
			}
			r := h.do(t, tc.method, tc.path, body, tc.headers...)
			hd := r.header
			if r.status != tc.status || hd.Get("Access-Control-Allow-Origin") != tc.acao || hd.Get("Access-Control-Allow-Methods") != tc.methods ||
				hd.Get("Allow") != tc.allow {
				t.Fatalf("answer %s %v, want %d, Allow-Origin %q, Allow-Methods %q, Allow %q", r, hd, tc.status, tc.acao, tc.methods, tc.allow)
			}
			if tc.methods != "" {
				if hd.Get("Access-Control-Allow-Headers") != "Content-Type, Content-Encoding" || hd.Get("Access-Control-Max-Age") != "86400" {
					t.Errorf("preflight headers %v", hd)
				}
			}
			vary := strings.Join(hd.Values("Vary"), ", ")
			for _, v := range tc.vary {
				if !strings.Contains(vary, v) {
					t.Errorf("Vary %q lacks %s", vary, v)
				}
			}
			if tc.status == 403 && !strings.Contains(string(r.body), "origin https://evil.example is not allowed") {
				t.Errorf("forbidden preflight: %s", r)
			}
		})
	}
}

// TestClientIPPeerForms: the peer's address in the form netip gives it,
// whatever form RemoteAddr has it in.
func TestClientIPPeerForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for remote, want := range map[string]string{
		"198.51.100.9:5":          "198.51.100.9",
		"[::ffff:198.51.100.9]:5": "198.51.100.9",
		"[2001:DB8:0::1]:5":       "2001:db8::1",
		"[fe80::1%eth0]:5":        "fe80::1%eth0",
		"198.51.100.9":            "198.51.100.9",
		"not an address":          "not an address",
	} {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		if got := h.s.clientIP(r); got != want {
			t.Errorf("RemoteAddr %q: ip %q, want %q", remote, got, want)
		}
	}
}

// TestClientIP: X-Forwarded-For is believed only from a trusted peer, and
// then its rightmost address that is not a trusted proxy is the client.
func TestClientIP(t *testing.T) {
	t.Parallel()
	proxies, err := cliflag.ParsePrefixes("127.0.0.0/8, 10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	trusting := func(c *Config) { c.TrustedProxies = proxies }
	cases := []struct {
		name  string
		trust func(*Config)
		xff   []string // one header line each
		ip    string
	}{
		{"untrusted peer", nil, []string{"198.51.100.9, 203.0.113.7, 10.0.0.1"}, "127.0.0.1"},
		{"trusted peer without header", trusting, nil, "127.0.0.1"},
		{"rightmost untrusted hop", trusting, []string{"198.51.100.9, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
		{"hops over header lines", trusting, []string{"198.51.100.9", "10.0.0.1"}, "198.51.100.9"},
		{"every hop trusted", trusting, []string{"10.0.0.1, 127.0.0.5"}, "10.0.0.1"},
		{"forged garbage", trusting, []string{"198.51.100.9, not-an-ip"}, "127.0.0.1"},
		{"garbage left of the client", trusting, []string{"junk, 203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped IPv6", trusting, []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv6 client", trusting, []string{"2001:db8::1 , 10.0.0.1"}, "2001:db8::1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.trust)
			headers := []string{"Content-Type", "application/json"}
			for _, x := range tc.xff {
				headers = append(headers, "X-Forwarded-For", x)
			}
			if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"e"}`), headers...); r.status != 200 {
				t.Fatalf("answer %s", r)
			}
			if ip := fields(t, h.sink.records()[0])["ip"]; ip != tc.ip {
				t.Errorf("ip %v, want %s", ip, tc.ip)
			}
		})
	}
}

func TestParseProxies(t *testing.T) {
	t.Parallel()
	got, err := cliflag.ParsePrefixes(" 127.0.0.0/8, 10.1.2.3/8,,10.0.0.1, ::1, ::ffff:192.0.2.1 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.0.0.1/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("192.0.2.1/32")}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("prefix %d: %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := cliflag.ParsePrefixes("10.0.0.1, proxy.internal"); err == nil || !strings.Contains(err.Error(), `"proxy.internal"`) {
		t.Errorf("a host name: err %v, want one naming it", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*Config)
		msg  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no topic", func(c *Config) { c.Topic = "" }, "topic is empty"},
		{"zero body", func(c *Config) { c.MaxBodyBytes = 0 }, "body limits must be positive"},
		{"inflight below decompressed", func(c *Config) { c.MaxInflightBytes = 1 << 20 }, "max in-flight bytes"},
		{"decompressed below body", func(c *Config) { c.MaxDecompressedBytes = 1 << 10 }, "max decompressed bytes"},
		{"zero events", func(c *Config) { c.MaxEvents = 0 }, "event limits must be positive"},
		{"ack status", func(c *Config) { c.AckStatus = 201 }, "ack status 201"},
		{"write timeout", func(c *Config) { c.WriteTimeout = 0 }, "write timeout must be positive"},
		{"origin without scheme", func(c *Config) { c.AllowedOrigins = []string{"shop.example"} }, `CORS origin "shop.example"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if (tc.msg == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("Validate: %v, want %q", err, tc.msg)
			}
			if _, nerr := New(cfg, &recordingSink{}, testkit.Logger(t), nil); (nerr == nil) != (err == nil) {
				t.Fatalf("New: %v, Validate: %v", nerr, err)
			}
		})
	}
}

// TestSinkErrors: a failed Write is answered 503 with Retry-After, with a
// message per kind of failure, and counted by kind; nothing is acknowledged.
func TestSinkErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fail  failure
		edit  func(*Config)
		kind  string
		msg   string
		retry string
	}{
		{name: "full", fail: failFull, kind: "full", msg: "inlet is at capacity (spool over 1 GiB); retry later", retry: "2"},
		{name: "timeout", fail: failBlock, edit: func(c *Config) { c.WriteTimeout = 30 * time.Millisecond },
			kind: "timeout", msg: "events not acknowledged within 30ms; retry later", retry: "2"},
		{name: "sink's own deadline", fail: failDeadline, kind: "timeout", msg: "events not acknowledged within 10s; retry later", retry: "2"},
		{name: "generic", fail: failGeneric, kind: "error", msg: "events not stored: disk on fire", retry: "2"},
		{name: "retry-after rounded up", fail: failFull, edit: func(c *Config) { c.RetryAfter = 2500 * time.Millisecond },
			kind: "full", msg: "capacity", retry: "3"},
	}
	for _, tc := range cases {
		for _, path := range []string{"/v1/batch", "/v1/track"} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, tc.edit)
				h.sink.setFail(tc.fail)
				body := []byte(`[{"event":"a"},{"event":7}]`)
				if path == "/v1/track" {
					body = []byte(`{"event":"a"}`)
				}
				r := h.do(t, "POST", path, body)
				if r.status != 503 || r.header.Get("Retry-After") != tc.retry || !strings.Contains(decodeError(t, r).Error, tc.msg) {
					t.Fatalf("answer %s (Retry-After %q), want 503 with Retry-After %s and %q", r, r.header.Get("Retry-After"), tc.retry, tc.msg)
				}
				if got := h.sinkErrors(tc.kind); got != 1 {
					t.Errorf("inlet_sink_errors_total{kind=%q} %v, want 1", tc.kind, got)
				}
				if got := testutil.ToFloat64(h.s.metrics.EventsAccepted); got != 0 {
					t.Errorf("inlet_events_accepted_total %v after a failed write, want 0", got)
				}
			})
		}
	}
}

// TestClientGone: a client that goes away while the sink waits does not
// cancel the write: the sink may have taken the records already (the
// spool stores what it enqueued), so the write runs to its end, bounded by
// the write timeout, and the answer says what happened to the events.
func TestClientGone(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
		h.sink.setFail(failBlock)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/batch", strings.NewReader(`[{"event":"a"}]`))
		done := make(chan error, 1)
		go func() {
			resp, err := h.srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-h.sink.entered
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the request succeeded after its client went away")
		}
		testkit.WaitFor(t, 5*time.Second, "the write timed out", func() bool { return h.sinkErrors("timeout") == 1 })
		if got := h.sinkErrors("client_gone"); got != 0 {
			t.Errorf("client_gone counted %v times: the client's going away cancelled the write", got)
		}
	})
	t.Run("answer", func(t *testing.T) {
		t.Parallel()
		s, sink, _ := newServer(t, nil)
		sink.setFail(func(ctx context.Context) error { return ctx.Err() }) // a sink that tells a cancel
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "POST", "/v1/batch", strings.NewReader(`[{"event":"a"}]`))
		w := httptest.NewRecorder()
		s.serveBatch(w, req)
		if w.Code != 200 {
			t.Fatalf("answer %d %s, want 200: the sink stored the events", w.Code, w.Body)
		}
	})
}

// TestHalfClosedClient: a client that shuts its write side once it sent the
// request, and waits for the answer, gets the answer of what happened: 200
// once the sink acknowledged (it got 503 "client went away" for events
// that were then stored, net/http cancelling the request on the EOF).
func TestHalfClosedClient(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// ack=kafka: the records are sent at once; the acknowledgement comes a
	// little later, unless the wait is abandoned.
	h.sink.setFail(func(ctx context.Context) error {
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for _, path := range []string{"/v1/batch", "/i?e=half"} {
		c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := `[{"event":"half"}]`
		method := "POST"
		if strings.HasPrefix(path, "/i") {
			method, body = "GET", ""
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, path, len(body), body)
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if r := readResponse(t, c); r.status != 200 {
			t.Errorf("%s %s from a half-closed client: %s, want 200 (the events were stored)", method, path, r)
		}
	}
	if got := h.sinkErrors("client_gone"); got != 0 {
		t.Errorf("client_gone counted %v times", got)
	}
}

// TestSinkWarningRateLimited: an outage fails every request, but is logged
// once per interval, with a count, not once per 503.
func TestSinkWarningRateLimited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.sink.setFail(failFull)
	for range 50 {
		if r := h.do(t, "POST", "/v1/track", []byte(`{"event":"a"}`)); r.status != 503 {
			t.Fatalf("answer %s, want 503", r)
		}
	}
	if n := h.logs.Count("sink write failed"); n != 1 {
		t.Fatalf("%d log lines for 50 failed writes, want 1:\n%s", n, h.logs)
	}
	line := h.logs.String()
	for _, want := range []string{"level=WARN", "kind=full", "records=1", "repeated=0", "ingest: sink full"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %s", want, line)
		}
	}
	if got := h.sinkErrors("full"); got != 50 {
		t.Errorf("inlet_sink_errors_total{kind=full} %v, want every failure counted (50)", got)
	}
}

// TestRequestMetrics: requests are counted per route and status (both pixel
// paths are one route), and timed per route.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	s, _, _ := newServer(t, nil)
	reg := prometheus.NewRegistry()
	s.metrics = NewMetrics(reg)
	mux := http.NewServeMux()
	s.Register(mux)
	h := &harness{s: s, srv: serve(t, mux, nil)}
	for range 3 {
		h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`))
	}
	h.do(t, "POST", "/v1/batch", []byte(`[`))
	h.do(t, "GET", "/v1/batch", nil)
	h.do(t, "GET", "/i?e=a", nil)
	h.do(t, "GET", "/i.gif?e=a", nil)
	h.do(t, "OPTIONS", "/v1/track", nil)
	want := map[[2]string]float64{{"batch", "200"}: 3, {"batch", "400"}: 1, {"batch", "405"}: 1, {"pixel", "200"}: 2, {"track", "204"}: 1}
	if n := testutil.CollectAndCount(s.metrics.Requests); n != len(want) {
		t.Errorf("%d request series, want %d", n, len(want))
	}
	for l, n := range want {
		if got := testutil.ToFloat64(s.metrics.Requests.WithLabelValues(l[0], l[1])); got != n {
			t.Errorf("inlet_http_requests_total{handler=%q,code=%q} %v, want %v", l[0], l[1], got, n)
		}
	}
	for route, n := range map[string]uint64{"batch": 5, "pixel": 2, "track": 1} {
		var m dto.Metric
		if err := s.metrics.Duration.WithLabelValues(route).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram().GetSampleCount(); got != n {
			t.Errorf("inlet_http_request_duration_seconds{handler=%q} count %d, want %d", route, got, n)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
}

// TestLastAck: inlet_last_ack_timestamp_seconds is 0 until an ingest
// request is answered 2xx, and moves only on answers that acknowledge
// events: not on a refusal, a failed sink, a preflight or a HEAD of the
// pixel. Every kind of sink error is exported from the start (zeros), so
// that rate() sees the first failure.
func TestLastAck(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, sink, _ := newServer(t, nil)
	s.metrics = NewMetrics(reg)
	mux := http.NewServeMux()
	s.Register(mux)
	h := &harness{s: s, sink: sink, srv: serve(t, mux, nil)}
	gauge := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "inlet_last_ack_timestamp_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no inlet_last_ack_timestamp_seconds")
		return 0
	}
	if n := testutil.CollectAndCount(s.metrics.SinkErrors); n != len(sinkErrorKinds) {
		t.Errorf("%d inlet_sink_errors_total series before any failure, want %d (zeros)", n, len(sinkErrorKinds))
	}
	if got := gauge(); got != 0 {
		t.Errorf("before any request: %v, want 0", got)
	}
	sink.setFail(failGeneric)
	for _, rq := range [][3]string{{"POST", "/v1/batch", `[{"event":"a"}]`}, {"POST", "/v1/batch", `[`}, {"OPTIONS", "/v1/track", ""}, {"HEAD", "/i?e=a", ""}} {
		var body []byte
		if rq[2] != "" {
			body = []byte(rq[2])
		}
		r := h.do(t, rq[0], rq[1], body)
		if got := gauge(); got != 0 {
			t.Errorf("after %s %s answered %d: %v, want 0 (no acknowledgement)", rq[0], rq[1], r.status, got)
		}
	}
	sink.setFail(nil)
	before := time.Now()
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`)); r.status != 200 {
		t.Fatalf("batch: %s", r)
	}
	after := time.Now()
	if got := gauge(); got < float64(before.UnixNano())/1e9 || got > float64(after.UnixNano())/1e9 {
		t.Errorf("after a 200: %v, want between %v and %v", got, float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9)
	}
}

// TestRecordsOwnedBySink: records handed to the sink alias nothing of the
// pooled request buffer, so a sink that keeps them without copying (ack=none)
// sees them unchanged after the buffer is scribbled over and reused by the
// next requests. It runs alone, on one P, so that the buffers it scribbles
// are the ones the requests used.
func TestRecordsOwnedBySink(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	pool := &bufPools[0] // the small bodies below are read into buffers of this class
	drain := func() {
		for pool.Get() != nil {
		}
	}
	// scribble overwrites every buffer in the pool and puts it back; it
	// reports whether one of them could have held n bytes.
	scribble := func(n int) bool {
		var held []*[]byte
		for {
			b, _ := pool.Get().(*[]byte)
			if b == nil {
				break
			}
			p := (*b)[:cap(*b)]
			for i := range p {
				p[i] = 'X'
			}
			held = append(held, b)
		}
		big := false
		for _, b := range held {
			big = big || cap(*b) >= n
			pool.Put(b)
		}
		return big
	}
	h := newHarness(t, nil)
	// NDJSON and /v1/track: the raw events are slices of the pooled buffer.
	first := []byte("{\"event\":\"first\",\"uid\":\"u-first\",\"props\":{\"k\":\"first-value\"}}\n{\"event\":7,\"x\":\"first-dead\"}\n")
	other := bytes.ReplaceAll(first, []byte("first"), []byte("other"))
	var kept []event.Record
	var snapshot [][]byte
	for attempt := 0; ; attempt++ {
		drain()
		n := len(h.sink.calls())
		r := h.do(t, "POST", "/v1/batch", first, "Content-Type", "application/x-ndjson")
		if r.status != 200 {
			t.Fatalf("answer %s", r)
		}
		kept = h.sink.calls()[n]
		snapshot = nil
		for _, rec := range kept {
			snapshot = append(snapshot, bytes.Clone(rec.Key), bytes.Clone(rec.Value))
			for _, hd := range rec.Headers {
				snapshot = append(snapshot, bytes.Clone(hd.Value))
			}
		}
		if scribble(len(first)) {
			break // the request's buffer was put back, and is now all X
		}
		if attempt == 20 { // the race detector drops a quarter of Puts
			t.Fatal("the request's buffer never came back to the pool")
		}
	}
	for range 5 { // the next requests reuse the scribbled buffer
		if r := h.do(t, "POST", "/v1/batch", other, "Content-Type", "application/x-ndjson"); r.status != 200 {
			t.Fatalf("answer %s", r)
		}
		if r := h.do(t, "POST", "/v1/track", other[:bytes.IndexByte(other, '\n')]); r.status != 200 {
			t.Fatalf("answer %s", r)
		}
	}
	i := 0
	for _, rec := range kept {
		got := [][]byte{rec.Key, rec.Value}
		for _, hd := range rec.Headers {
			got = append(got, hd.Value)
		}
		for _, b := range got {
			if !bytes.Equal(b, snapshot[i]) {
				t.Errorf("record on %s changed after its request ended: %q, was %q", rec.Topic, b, snapshot[i])
			}
			i++
		}
	}
	if !bytes.Contains(kept[0].Value, []byte("first-value")) || string(kept[1].Value) != `{"event":7,"x":"first-dead"}` {
		t.Errorf("records kept: %q / %q", kept[0].Value, kept[1].Value)
	}
}
