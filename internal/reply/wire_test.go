package reply

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
)

func hdr(k, v string) event.Header { return event.Header{Key: k, Value: []byte(v)} }

// kgoHeaders is what a consumer of rec gets: franz-go's headers.
func kgoHeaders(hs []event.Header) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = kgo.RecordHeader(h)
	}
	return out
}

func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	deadline := time.UnixMilli(1_900_000_000_123)
	tests := []struct {
		name string
		req  Request
		want Request // what ParseRequest returns; req when zero
	}{
		{name: "full", req: Request{
			ID: "c1", Service: "billing", Deadline: deadline, ContentType: "application/json", Client: "web", Query: "a=1&b=2",
			Headers: http.Header{"X-Trace-Id": {"t1"}, "Authorization": {"Bearer x"}},
			Body:    []byte(`{"n":1}`), ReplyTo: Address{Kind: "kafka", Name: "inlet.replies.a"}, ReplyPartition: 2,
		}},
		{name: "a caller's Inlet-Client header is not the client", req: Request{ID: "c7", Service: "svc", Deadline: deadline,
			Headers: http.Header{"Inlet-Client": {"admin"}}, ReplyTo: Address{Kind: "kafka", Name: "r"}, ReplyPartition: -1}},
		{name: "minimal, redis", req: Request{ID: "c2", Service: "svc", Deadline: deadline,
			ReplyTo: Address{Kind: "redis", Name: "inlet:replies:7"}, ReplyPartition: -1}},
		{name: "redis has no partition", req: Request{ID: "c5", Service: "svc", Deadline: deadline,
			ReplyTo: Address{Kind: "redis", Name: "inlet:replies:7"}, ReplyPartition: 3},
			want: Request{ID: "c5", Service: "svc", Deadline: deadline,
				ReplyTo: Address{Kind: "redis", Name: "inlet:replies:7"}, ReplyPartition: -1}},
		{name: "deadline past Unix milliseconds saturates", req: Request{ID: "c6", Service: "svc",
			Deadline: time.Unix(1<<62, 0), ReplyTo: Address{Kind: "kafka", Name: "r"}, ReplyPartition: -1},
			want: Request{ID: "c6", Service: "svc", Deadline: time.UnixMilli(math.MaxInt64),
				ReplyTo: Address{Kind: "kafka", Name: "r"}, ReplyPartition: -1}},
		{name: "several values joined", req: Request{ID: "c3", Service: "svc", Deadline: deadline,
			Headers: http.Header{"Accept": {"text/plain", "application/json"}}, ReplyTo: Address{Kind: "kafka", Name: "r"}},
			want: Request{ID: "c3", Service: "svc", Deadline: deadline,
				Headers: http.Header{"Accept": {"text/plain, application/json"}}, ReplyTo: Address{Kind: "kafka", Name: "r"}}},
		{name: "not forwarded", req: Request{ID: "c4", Service: "svc", Deadline: deadline, ContentType: "text/plain",
			Headers: http.Header{
				"Content-Type": {"text/plain"}, "Content-Length": {"5"}, "Host": {"gw"}, "Inlet-Timeout": {"2s"},
				"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"}, "Te": {"trailers"},
				"Transfer-Encoding": {"chunked"}, "Upgrade": {"h2c"}, "Proxy-Authorization": {"Basic x"},
				"Trailer": {"X-T"}, "Proxy-Connection": {"close"}, "Proxy-Authenticate": {"Basic"},
				"X-Kept": {"yes"}, "Empty": {},
			},
			ReplyTo: Address{Kind: "kafka", Name: "r"}, ReplyPartition: -1},
			want: Request{ID: "c4", Service: "svc", Deadline: deadline, ContentType: "text/plain",
				Headers: http.Header{"X-Kept": {"yes"}}, ReplyTo: Address{Kind: "kafka", Name: "r"}, ReplyPartition: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := tt.want
			if want.ID == "" {
				want = tt.req
			}
			want.Body = tt.req.Body
			rec := RequestRecord("rpc.svc", &tt.req)
			if rec.Topic != "rpc.svc" || string(rec.Key) != tt.req.ID || rec.EventID != tt.req.ID || !bytes.Equal(rec.Value, tt.req.Body) {
				t.Fatalf("record topic %q, key %q, event id %q, value %q", rec.Topic, rec.Key, rec.EventID, rec.Value)
			}
			for _, h := range rec.Headers {
				if h.Key != strings.ToLower(h.Key) {
					t.Errorf("header %q is not lower-case", h.Key)
				}
			}
			// Both kinds of headers decode the same.
			got, err := ParseRequest(rec.Key, rec.Value, rec.Headers, "other")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("event headers:\n got %+v\nwant %+v", got, want)
			}
			got, err = ParseRequest(rec.Key, rec.Value, kgoHeaders(rec.Headers), "other")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("kgo headers:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	deadline := time.UnixMilli(1_900_000_000_123)
	ms := FormatDeadline(deadline)
	full := []event.Header{
		hdr(HeaderCorrelationID, "c1"),
		hdr(HeaderReplyTo, "kafka:replies.a"),
		hdr(HeaderDeadline, ms),
		hdr(HeaderReplyPartition, "1"),
		hdr(HeaderService, "billing"),
		hdr(HeaderQuery, "a=1&b=2"),
		hdr(HeaderContentType, "application/json"),
		hdr("http-x-trace-id", "t1"),
		hdr("http-accept", "text/plain"),
		hdr("http-accept", "application/json"),
		hdr("http-", "no name"),
		hdr("unrelated", "x"),
	}
	without := func(key string) []event.Header {
		var hs []event.Header
		for _, h := range full {
			if h.Key != key {
				hs = append(hs, h)
			}
		}
		return hs
	}
	with := func(key, value string) []event.Header { return append(without(key), hdr(key, value)) }
	first := func(key, value string) []event.Header { return append([]event.Header{hdr(key, value)}, full...) }
	fullReq := Request{
		ID: "c1", Service: "billing", Deadline: deadline, ContentType: "application/json", Query: "a=1&b=2",
		Headers: http.Header{"X-Trace-Id": {"t1"}, "Accept": {"text/plain", "application/json"}},
		Body:    []byte("body"), ReplyTo: Address{Kind: "kafka", Name: "replies.a"}, ReplyPartition: 1,
	}
	withID := func(id string) Request { r := fullReq; r.ID = id; return r }
	withPartition := func(p int32) Request { r := fullReq; r.ReplyPartition = p; return r }
	tests := []struct {
		name    string
		key     string
		headers []event.Header
		want    Request // compared when wantErr is empty
		wantErr string
		wantID  string // the ID returned with the error
	}{
		{name: "full", key: "c1", headers: full, want: fullReq},
		{name: "id from key", key: "k1", headers: without(HeaderCorrelationID), want: withID("k1")},
		{name: "id header over key", key: "k1", headers: full, want: fullReq},
		{name: "empty id header, key", key: "k1", headers: with(HeaderCorrelationID, ""), want: withID("k1")},
		{name: "first id counts", headers: first(HeaderCorrelationID, "c0"), want: withID("c0")},
		{name: "no service header", key: "c1", headers: without(HeaderService), want: func() Request {
			r := fullReq
			r.Service = "svc"
			return r
		}()},
		{name: "empty service header", key: "c1", headers: with(HeaderService, ""), want: func() Request {
			r := fullReq
			r.Service = "svc"
			return r
		}()},
		{name: "minimal, redis", headers: []event.Header{
			hdr(HeaderCorrelationID, "c2"), hdr(HeaderReplyTo, "redis:inlet.7"), hdr(HeaderDeadline, ms),
		}, want: Request{ID: "c2", Service: "svc", Deadline: deadline, Body: []byte("body"),
			ReplyTo: Address{Kind: "redis", Name: "inlet.7"}, ReplyPartition: -1}},
		{name: "no reply partition", key: "c1", headers: without(HeaderReplyPartition), want: withPartition(-1)},
		{name: "reply partition not a number", key: "c1", headers: with(HeaderReplyPartition, "x"), want: withPartition(-1)},
		{name: "negative reply partition", key: "c1", headers: with(HeaderReplyPartition, "-1"), want: withPartition(-1)},
		{name: "reply partition past int32", key: "c1", headers: with(HeaderReplyPartition, "2147483648"), want: withPartition(-1)},
		{name: "first reply partition counts", key: "c1", headers: first(HeaderReplyPartition, "7"), want: withPartition(7)},
		{name: "no id", headers: without(HeaderCorrelationID), wantErr: "no inlet-correlation-id header or record key"},
		{name: "no headers at all", wantErr: "no inlet-correlation-id"},
		{name: "no reply-to", key: "c1", headers: without(HeaderReplyTo), wantErr: "no inlet-reply-to header", wantID: "c1"},
		{name: "bad reply-to kind", key: "c1", headers: with(HeaderReplyTo, "nats:x"), wantErr: `address "nats:x": want kafka:<topic> or redis:<channel>`, wantID: "c1"},
		{name: "empty reply-to name", key: "c1", headers: with(HeaderReplyTo, "kafka:"), wantErr: `address "kafka:"`, wantID: "c1"},
		{name: "reply-to without colon", key: "c1", headers: with(HeaderReplyTo, "replies"), wantErr: `address "replies"`, wantID: "c1"},
		{name: "first reply-to counts", key: "c1", headers: first(HeaderReplyTo, "bad"), wantErr: `address "bad"`, wantID: "c1"},
		{name: "no deadline", key: "c1", headers: without(HeaderDeadline), wantErr: "no inlet-deadline header", wantID: "c1"},
		{name: "date as deadline", key: "c1", headers: with(HeaderDeadline, "2026-01-01"), wantErr: `deadline "2026-01-01": want Unix milliseconds`, wantID: "c1"},
		{name: "empty deadline", key: "c1", headers: with(HeaderDeadline, ""), wantErr: `deadline "": want Unix milliseconds`, wantID: "c1"},
		{name: "deadline overflow", key: "c1", headers: with(HeaderDeadline, "99999999999999999999"), wantErr: "want Unix milliseconds", wantID: "c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var key []byte
			if tt.key != "" {
				key = []byte(tt.key)
			}
			got, err := ParseRequest(key, []byte("body"), tt.headers, "svc")
			if tt.wantErr != "" {
				if !errors.Is(err, ErrMalformedRequest) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrMalformedRequest: ...%s...", err, tt.wantErr)
				}
				if got.ID != tt.wantID {
					t.Errorf("ID %q with the error, want %q", got.ID, tt.wantID)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rep  Reply
		want map[string]string // the record's headers
	}{
		{"ok", Reply{ID: "c1", Status: 201, ContentType: "text/plain", Body: []byte("x")},
			map[string]string{"inlet-correlation-id": "c1", "inlet-status": "201", "content-type": "text/plain"}},
		{"no content type", Reply{ID: "c2", Status: 200},
			map[string]string{"inlet-correlation-id": "c2", "inlet-status": "200"}},
		{"error", Reply{ID: "c3", Status: 502, Err: "boom"},
			map[string]string{"inlet-correlation-id": "c3", "inlet-status": "502", "inlet-error": "boom"}},
		{"status 0 (200)", Reply{ID: "c4", Body: []byte{0, 1}},
			map[string]string{"inlet-correlation-id": "c4", "inlet-status": "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := ReplyRecord("replies", tt.rep)
			if rec.Topic != "replies" || string(rec.Key) != tt.rep.ID || !bytes.Equal(rec.Value, tt.rep.Body) {
				t.Fatalf("record topic %q, key %q, value %q", rec.Topic, rec.Key, rec.Value)
			}
			got := map[string]string{}
			for _, h := range rec.Headers {
				got[h.Key] = string(h.Value)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("headers %v, want %v", got, tt.want)
			}
			rep, err := ParseReply(rec.Key, rec.Value, rec.Headers)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rep, tt.rep) {
				t.Errorf("round trip %+v, want %+v", rep, tt.rep)
			}
		})
	}
}

func TestParseReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     string
		headers []event.Header
		want    Reply // compared when wantErr is empty
		wantErr string
		wantID  string // the ID returned with the error
	}{
		{name: "full", key: "c1", headers: []event.Header{hdr(HeaderCorrelationID, "c1"), hdr(HeaderStatus, "404"),
			hdr(HeaderContentType, "text/plain"), hdr(HeaderError, "e"), hdr("other", "x")},
			want: Reply{ID: "c1", Status: 404, ContentType: "text/plain", Err: "e", Body: []byte("body")}},
		{name: "id from key", key: "k1", headers: []event.Header{hdr(HeaderStatus, "200")},
			want: Reply{ID: "k1", Status: 200, Body: []byte("body")}},
		{name: "no status means 200", key: "k1", want: Reply{ID: "k1", Body: []byte("body")}},
		{name: "first header counts", headers: []event.Header{hdr(HeaderCorrelationID, "c1"), hdr(HeaderStatus, "201"),
			hdr(HeaderCorrelationID, "c2"), hdr(HeaderStatus, "garbage")},
			want: Reply{ID: "c1", Status: 201, Body: []byte("body")}},
		{name: "no id", headers: []event.Header{hdr(HeaderStatus, "200")}, wantErr: "no inlet-correlation-id header or record key"},
		{name: "empty id, no key", headers: []event.Header{hdr(HeaderCorrelationID, "")}, wantErr: "no inlet-correlation-id"},
		{name: "status not a number", key: "k1", headers: []event.Header{hdr(HeaderStatus, "OK")},
			wantErr: `inlet-status "OK": want a final HTTP status, 200 to 599`, wantID: "k1"},
		// A 1xx is not an answer: 101 passed on had a proxy switch protocols.
		{name: "status 100", key: "k1", headers: []event.Header{hdr(HeaderStatus, "100")}, wantErr: `inlet-status "100"`, wantID: "k1"},
		{name: "status 101", key: "k1", headers: []event.Header{hdr(HeaderStatus, "101")}, wantErr: `inlet-status "101"`, wantID: "k1"},
		{name: "status 199", key: "k1", headers: []event.Header{hdr(HeaderStatus, "199")}, wantErr: `inlet-status "199"`, wantID: "k1"},
		{name: "status 200", key: "k1", headers: []event.Header{hdr(HeaderStatus, "200")}, want: Reply{ID: "k1", Status: 200, Body: []byte("body")}},
		{name: "status 599", key: "k1", headers: []event.Header{hdr(HeaderStatus, "599")}, want: Reply{ID: "k1", Status: 599, Body: []byte("body")}},
		{name: "status 600", key: "k1", headers: []event.Header{hdr(HeaderStatus, "600")}, wantErr: `inlet-status "600"`, wantID: "k1"},
		{name: "empty status", key: "k1", headers: []event.Header{hdr(HeaderStatus, "")}, wantErr: `inlet-status ""`, wantID: "k1"},
		{name: "status 0 means 200", key: "k1", headers: []event.Header{hdr(HeaderStatus, "0")}, want: Reply{ID: "k1", Body: []byte("body")}},
		{name: "status 99", key: "k1", headers: []event.Header{hdr(HeaderStatus, "99")}, wantErr: `inlet-status "99"`, wantID: "k1"},
		{name: "status 1000", key: "k1", headers: []event.Header{hdr(HeaderStatus, "1000")}, wantErr: `inlet-status "1000"`, wantID: "k1"},
		{name: "negative status", key: "k1", headers: []event.Header{hdr(HeaderStatus, "-200")}, wantErr: `inlet-status "-200"`, wantID: "k1"},
		{name: "status overflow", key: "k1", headers: []event.Header{hdr(HeaderStatus, "99999999999999999999")}, wantErr: "inlet-status", wantID: "k1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var key []byte
			if tt.key != "" {
				key = []byte(tt.key)
			}
			for _, kind := range []string{"event", "kgo"} {
				var got Reply
				var err error
				if kind == "event" {
					got, err = ParseReply(key, []byte("body"), tt.headers)
				} else {
					got, err = ParseReply(key, []byte("body"), kgoHeaders(tt.headers))
				}
				if tt.wantErr != "" {
					if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("%s: error %v, want ErrMalformed: ...%s...", kind, err, tt.wantErr)
					}
					if got.ID != tt.wantID {
						t.Errorf("%s: ID %q with the error, want %q", kind, got.ID, tt.wantID)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: got %+v, want %+v", kind, got, tt.want)
				}
			}
		})
	}
}

func TestReplyMarshal(t *testing.T) {
	for _, rep := range []Reply{
		{ID: "01a2", Status: 200, ContentType: "application/json", Body: []byte(`{"ok":true}`)},
		{ID: "x", Status: 502, Err: "no such order"},
		{ID: "empty"},
		{ID: string(bytes.Repeat([]byte("i"), 300)), Status: 599, Body: bytes.Repeat([]byte{0, 'R', 1}, 1000)},
	} {
		got, err := Unmarshal(rep.Marshal())
		if err != nil {
			t.Fatalf("%q: %v", rep.ID, err)
		}
		if got.ID != rep.ID || got.Status != rep.Status || got.ContentType != rep.ContentType || got.Err != rep.Err || !bytes.Equal(got.Body, rep.Body) {
			t.Fatalf("round trip: %+v, want %+v", got, rep)
		}
	}
	good := Reply{ID: "abc", Status: 200, ContentType: "text/plain", Err: "e", Body: []byte("body")}.Marshal()
	for name, b := range map[string][]byte{
		"empty":            nil,
		"wrong magic":      append([]byte{'X'}, good[1:]...),
		"wrong version":    append([]byte{'R', 2}, good[2:]...),
		"id past the end":  {'R', 1, 50, 'a'},
		"status too large": {'R', 1, 1, 'a', 0xe8, 0x07}, // 1000
		"status 99":        {'R', 1, 1, 'a', 99, 0, 0},
		"status 101":       {'R', 1, 1, 'a', 101, 0, 0},
		"status 600":       {'R', 1, 1, 'a', 0xd8, 0x04, 0, 0},
		"cut status":       {'R', 1, 1, 'a', 0x80},
		"no content type":  {'R', 1, 1, 'a', 200, 1},
		"cut error":        good[:len(good)-len("body")-1],
	} {
		rep, err := Unmarshal(b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
		// Past the id, the caller can be told.
		if wantID := strings.HasPrefix(name, "status") || name == "cut status"; (rep.ID == "a") != wantID {
			t.Errorf("%s: ID %q with the error", name, rep.ID)
		}
	}
}

func TestAddressAndDeadline(t *testing.T) {
	for _, s := range []string{"kafka:inlet.replies.a", "redis:inlet:replies:a"} {
		a, err := ParseAddress(s)
		if err != nil || a.String() != s {
			t.Errorf("%s: %v %v", s, a, err)
		}
	}
	for _, s := range []string{"", "kafka:", "http:x", "nocolon"} {
		if _, err := ParseAddress(s); err == nil {
			t.Errorf("%q: parsed, want an error", s)
		}
	}
	d := time.UnixMilli(1_790_000_000_123)
	got, err := ParseDeadline(FormatDeadline(d))
	if err != nil || !got.Equal(d) {
		t.Fatalf("deadline round trip: %v %v", got, err)
	}
	// Past what Unix milliseconds hold, a deadline saturates: it wrapped
	// around into the past, and the worker dropped the request as expired.
	for _, tt := range []struct {
		t    time.Time
		want string
	}{
		{time.Unix(1<<62, 0), "9223372036854775807"},
		{time.Unix(-1<<62, 0), "-9223372036854775808"},
	} {
		if got := FormatDeadline(tt.t); got != tt.want {
			t.Errorf("FormatDeadline(%v) = %s, want %s", tt.t, got, tt.want)
		}
	}
	if _, err := ParseDeadline("tomorrow"); err == nil {
		t.Fatal("a deadline that is not Unix milliseconds parsed")
	}
}
