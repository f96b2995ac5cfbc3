package ingest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

func segmentBasic(key string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(key+":"))
}

// segmentAnswer is an answer as the Segment SDKs read it.
type segmentAnswer struct {
	Success  bool        `json:"success"`
	Code     string      `json:"code"`
	Message  string      `json:"message"`
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
}

func decodeSegment(tb testing.TB, r response) segmentAnswer {
	tb.Helper()
	var a segmentAnswer
	if err := json.Unmarshal(r.body, &a); err != nil {
		tb.Fatalf("answer %s: %v", r, err)
	}
	return a
}

const segmentBatch = `{"batch":[
 {"type":"track","event":"Signed Up","userId":"u1","messageId":"m1","properties":{"plan":"pro"},"library":{"name":"x"}},
 {"type":"identify","anonymousId":"a1","messageId":"m2","traits":{"email":"a@example.com"}},
 {"type":"track","userId":"u2","messageId":"m3"},
 {"type":"identify","messageId":"m4"},
 {"type":"purchase","userId":"u3","messageId":"m5"},
 {"type":"page","name":"Home","anonymousId":"a2","messageId":"m6"}
],"sentAt":"2026-11-30T11:12:10Z","context":{"library":{"name":"analytics-go"}}%s}`

// TestSegmentBatch: a Segment batch, with the write key as the Basic user
// or in the body, gzipped or not, is answered 200 with each malformed
// message refused with its reason (and dead-lettered); the others are
// recorded as sent, key userId else anonymousId, messageId as the event id.
func TestSegmentBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path string
		bodyKey    bool
		gzip       bool
	}{
		{"Basic", "/v1/batch", false, false},
		{"Basic gzip", "/v1/batch", false, true},
		{"writeKey in the body", "/v1/batch", true, false},
		{"writeKey in the body, gzip, /v1/b", "/v1/b", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, WithAuth(newFakeAuth()))
			extra, headers := "", []string{"Content-Type", "application/json"}
			if tc.bodyKey {
				extra = `,"writeKey":"web-secret-0123456789"`
			} else {
				headers = append(headers, "Authorization", segmentBasic("web-secret-0123456789"))
			}
			body := []byte(strings.ReplaceAll(segmentBatch, "%s", extra))
			if tc.gzip {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				_, _ = zw.Write(body)
				_ = zw.Close()
				body = buf.Bytes()
				headers = append(headers, "Content-Encoding", "gzip")
			}
			r := h.do(t, "POST", tc.path, body, headers...)
			if r.status != http.StatusOK {
				t.Fatalf("answer %s, want 200", r)
			}
			a := decodeSegment(t, r)
			if !a.Success || a.Accepted != 3 || len(a.Rejected) != 3 {
				t.Fatalf("answer %s: want success, 3 accepted, 3 rejected", r)
			}
			for i, want := range map[int]string{2: `a track needs "event"`, 3: `an identify needs "userId" or "anonymousId"`, 4: `"purchase" is not a call of the Segment spec`} {
				j := map[int]int{2: 0, 3: 1, 4: 2}[i]
				if a.Rejected[j].Index != i || !strings.Contains(a.Rejected[j].Error, want) {
					t.Errorf("rejection %d: %+v, want index %d saying %q", j, a.Rejected[j], i, want)
				}
			}
			recs := h.sink.records()
			var stored []string
			for _, rec := range recs {
				if rec.Topic != h.s.cfg.Topic {
					continue
				}
				f := fields(t, rec)
				in, _ := f["inlet"].(map[string]any)
				if in["client"] != "web" || in["batch_context"] == nil {
					t.Errorf("record %s: want the client and the batch's context in inlet", rec.Value)
				}
				if strings.Contains(string(rec.Value), "secret") {
					t.Errorf("record %s holds the write key", rec.Value)
				}
				stored = append(stored, rec.EventID+"/"+string(rec.Key))
			}
			if got := strings.Join(stored, " "); got != "m1/u1 m2/a1 m6/a2" {
				t.Errorf("records (id/key) %q, want m1/u1 m2/a1 m6/a2", got)
			}
			if dead := h.sink.onTopic(h.s.cfg.DeadLetterTopicName()); len(dead) != 3 {
				t.Errorf("%d dead letters, want 3", len(dead))
			}
		})
	}
}

// TestSegmentErrors: refusals carry "code" and "message" (analytics-python
// fails on an error body without them): a wrong write key 401, a body
// without one 401, every message malformed 400, a full sink 503 with
// Retry-After; inlet's own events on the shared paths answer as ever.
func TestSegmentErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, WithAuth(newFakeAuth()))
	good := []string{"Content-Type", "text/plain", "Authorization", segmentBasic("web-secret-0123456789")}
	for _, tc := range []struct {
		name, path, body string
		headers          []string
		status           int
		code, msg        string
	}{
		{"wrong key as Basic user", "/v1/batch", `{"batch":[{"type":"track","event":"a","userId":"u"}]}`, []string{"Authorization", segmentBasic("wrong")}, 401, "invalid_write_key", "credentials refused"},
		{"wrong key as Basic user, inlet's events", "/v1/batch", `[{"event":"a"}]`, []string{"Authorization", segmentBasic("wrong")}, 401, "invalid_write_key", "credentials refused"},
		{"a form Content-Type (rudder-sdk-node)", "/v1/batch", `{"batch":[{"type":"track","event":"a","userId":"u","messageId":"form-1"}]}`, []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", segmentBasic("web-secret-0123456789")}, 200, "", ""},
		{"wrong key in the body", "/v1/batch", `{"batch":[{"type":"track","event":"a","userId":"u"}],"writeKey":"wrong"}`, nil, 401, "invalid_write_key", "write key refused"},
		{"wrong key in a message", "/v1/t", `{"type":"track","event":"a","userId":"u","writeKey":"wrong"}`, nil, 401, "invalid_write_key", "write key refused"},
		{"no key", "/v1/identify", `{"userId":"u"}`, nil, 401, "invalid_write_key", "no Authorization header"},
		{"every message bad", "/v1/batch", `{"batch":[{"type":"track","userId":"u"}],"sentAt":"2026-11-30T11:12:10Z"}`, good, 400, "invalid_message", `message 0: a track needs "event"`},
		{"malformed body", "/v1/b", `{"batch":[{"type":"track",}]}`, good, 400, "invalid_request", "malformed JSON"},
		{"missing comma in the wrapper", "/v1/batch", `{"sentAt":null "batch":[{"type":"track","event":"a","userId":"u"}]}`, good, 400, "invalid_request", "malformed JSON at byte offset 15: invalid character"},
		{"bad wrapper", "/v1/batch", `{"batch":[{"type":"track","event":"a","userId":"u"}],"sentAt":"soon"}`, good, 400, "invalid_request", `"sentAt"`},
		{"type against the path", "/v1/identify", `{"type":"track","event":"a","userId":"u"}`, good, 400, "invalid_message", "sent to the identify call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, "POST", tc.path, []byte(tc.body), tc.headers...)
			a := decodeSegment(t, r)
			if r.status != tc.status || a.Code != tc.code || !strings.Contains(a.Message, tc.msg) && !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("answer %s; want %d, code %q, saying %q", r, tc.status, tc.code, tc.msg)
			}
		})
	}
	// Every call path, its type implied.
	for _, p := range []string{"/v1/track", "/v1/identify", "/v1/page", "/v1/screen", "/v1/group", "/v1/alias", "/v1/t", "/v1/i", "/v1/p", "/v1/s", "/v1/g", "/v1/a"} {
		body := `{"type":"track","event":"e","userId":"u","groupId":"g","previousId":"p"}`
		if p != "/v1/track" && p != "/v1/t" {
			body = `{"userId":"u","groupId":"g","previousId":"p"}`
		}
		if r := h.do(t, "POST", p, []byte(body), good...); r.status != 200 || !decodeSegment(t, r).Success {
			t.Errorf("%s: answer %s, want 200 and success", p, r)
		}
	}
	// Inlet's own events on the shared paths: as ever.
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`), good...); r.status != 200 || strings.Contains(string(r.body), "success") {
		t.Errorf("inlet batch: answer %s, want inlet's 200", r)
	}
	if r := h.do(t, "POST", "/v1/batch", []byte(`{"batch":[{"event":"a"}],"sentAt":"x"}`), good...); r.status != 400 || !strings.Contains(string(r.body), `unknown key \"sentAt\"`) {
		t.Errorf("inlet batch with a wrapper field: answer %s, want inlet's 400", r)
	}
	h.sink.setFail(failFull)
	r := h.do(t, "POST", "/v1/batch", []byte(`{"batch":[{"type":"track","event":"a","userId":"u"}]}`), good...)
	if a := decodeSegment(t, r); r.status != 503 || a.Code != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("full sink: answer %s %v, want 503, code unavailable, Retry-After", r, r.header)
	}
}

// TestSegmentAckNone: with ack none (202 for inlet's events) a Segment
// call is answered 200: analytics-python takes nothing else for success.
func TestSegmentAckNone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AckStatus = http.StatusAccepted })
	if r := h.do(t, "POST", "/v1/batch", []byte(`{"batch":[{"type":"track","event":"a","userId":"u"}]}`)); r.status != 200 {
		t.Errorf("answer %s, want 200", r)
	}
	if r := h.do(t, "POST", "/v1/batch", []byte(`[{"event":"a"}]`)); r.status != 202 {
		t.Errorf("inlet's event: answer %s, want 202", r)
	}
}
