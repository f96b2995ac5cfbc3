package event

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// segmentRecord adds raw as a Segment message and returns its record, or
// the rejection.
func segmentRecord(t *testing.T, raw, typ string, sb *SegmentBatch) (Record, *Invalid) {
	t.Helper()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	b := NewBatch("events", Meta{ReceivedAt: now, IP: "192.0.2.1", Client: "web"}, SegmentMaxMessageBytes)
	defer b.Release()
	if bad := b.AddSegment([]byte(raw), typ, sb); bad != nil {
		return Record{}, bad
	}
	b.Build()
	return b.Record(0), nil
}

// TestSegmentSpecExamples: every example payload of the spec's pages
// (testdata/segment, see SOURCE) is accepted, and its record holds every
// field as sent, plus the inlet object. The short examples of the call
// pages leave out the common fields, ids too ("with most common fields
// removed"), which the spec requires on every call: they are refused for
// it, and accepted with the anonymousId every SDK sends.
func TestSegmentSpecExamples(t *testing.T) {
	files, _ := filepath.Glob("testdata/segment/*.json")
	if len(files) < 10 {
		t.Fatalf("found %d spec examples, want the 13 of testdata/segment", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !IsSegment(raw) {
				t.Fatal("IsSegment false")
			}
			var ids map[string]any
			if err := json.Unmarshal(raw, &ids); err != nil {
				t.Fatal(err)
			}
			if ids["userId"] == nil && ids["anonymousId"] == nil {
				if _, bad := segmentRecord(t, string(raw), "", nil); bad == nil || bad.Reason != ReasonMissingField {
					t.Fatalf("without userId or anonymousId: %v, want %s", bad, ReasonMissingField)
				}
				raw = append([]byte(`{"anonymousId":"a1",`), raw[bytes.IndexByte(raw, '{')+1:]...)
			}
			rec, bad := segmentRecord(t, string(raw), "", nil)
			if bad != nil {
				t.Fatalf("rejected: %v", bad)
			}
			var sent, got map[string]any
			if err := json.Unmarshal(raw, &sent); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(rec.Value, &got); err != nil {
				t.Fatalf("record %s: %v", rec.Value, err)
			}
			for k, v := range sent {
				gv, _ := json.Marshal(got[k])
				sv, _ := json.Marshal(v)
				if string(gv) != string(sv) {
					t.Errorf("field %q: record has %s, sent %s", k, gv, sv)
				}
			}
			in, _ := got[SegmentField].(map[string]any)
			if in["client"] != "web" || in["received_at"] == nil || in["timestamp"] == nil {
				t.Errorf("inlet object %v: want client, received_at, timestamp", in)
			}
			if id := got["messageId"]; id == nil || string(rec.Headers[0].Value) != id {
				t.Errorf("messageId %v, header %s: want the same", id, rec.Headers[0].Value)
			}
		})
	}
}

// TestSegmentRejects: each malformed message is refused with its reason.
func TestSegmentRejects(t *testing.T) {
	for _, tc := range []struct {
		name, raw, typ string
		reason         Reason
		want           string
	}{
		{"track without event", `{"type":"track","userId":"u"}`, "", ReasonMissingEvent, `a track needs "event"`},
		{"track with empty event", `{"type":"track","event":"","userId":"u"}`, "", ReasonMissingEvent, `"event"`},
		{"identify without ids", `{"type":"identify","traits":{"a":1}}`, "", ReasonMissingField, `"userId" or "anonymousId"`},
		{"track without ids", `{"type":"track","event":"x","messageId":"m"}`, "", ReasonMissingField, `a track needs "userId" or "anonymousId"`},
		{"page with empty ids", `{"type":"page","name":"Home","userId":"","anonymousId":""}`, "", ReasonMissingField, `a page needs "userId" or "anonymousId"`},
		{"group without ids", `{"groupId":"g"}`, "group", ReasonMissingField, `a group needs "userId" or "anonymousId"`},
		{"identify with empty ids", `{"type":"identify","userId":"","anonymousId":null}`, "", ReasonMissingField, `"userId" or "anonymousId"`},
		{"alias without previousId", `{"type":"alias","userId":"u"}`, "", ReasonMissingField, `"previousId"`},
		{"group without groupId", `{"type":"group","userId":"u"}`, "", ReasonMissingField, `"groupId"`},
		{"wrong type", `{"type":"purchase","userId":"u"}`, "", ReasonBadField, `"purchase" is not a call`},
		{"type not a string", `{"type":1,"userId":"u"}`, "", ReasonBadField, `"type" must be a string`},
		{"no type", `{"event":"x","userId":"u"}`, "", ReasonBadField, `"type" is required`},
		{"type against the path", `{"type":"track","event":"x","userId":"u"}`, "identify", ReasonBadField, `sent to the identify call`},
		{"userId a number", `{"type":"track","event":"x","userId":7}`, "", ReasonBadField, `"userId" must be a string`},
		{"properties an array", `{"type":"track","event":"x","properties":[1]}`, "", ReasonBadField, `"properties" must be a JSON object`},
		{"bad timestamp", `{"type":"track","event":"x","userId":"u","timestamp":"yesterday"}`, "", ReasonBadField, `"timestamp" "yesterday" is not an ISO 8601 date`},
		{"inlet field", `{"type":"track","event":"x","inlet":{}}`, "", ReasonBadField, `"inlet" is the one inlet records`},
		{"duplicate name", `{"type":"track","event":"x","event":"y"}`, "", ReasonMalformed, `duplicate field "event"`},
		{"invalid UTF-8", "{\"type\":\"track\",\"event\":\"\xff\"}", "", ReasonMalformed, `invalid UTF-8`},
		{"too deep", `{"type":"track","event":"x","properties":` + strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat(`}`, MaxDepth) + `}`, "", ReasonMalformed, `nest more than`},
		{"too large", `{"type":"track","event":"x","properties":{"a":"` + strings.Repeat("x", SegmentMaxMessageBytes) + `"}}`, "", ReasonTooLarge, `the limit is 32768`},
		{"not an object", `[1]`, "", ReasonNotObject, `must be a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, bad := segmentRecord(t, tc.raw, tc.typ, nil)
			if bad == nil || bad.Reason != tc.reason || !strings.Contains(bad.Msg, tc.want) {
				t.Fatalf("got %v (%v); want %s saying %q", bad, badReason(bad), tc.reason, tc.want)
			}
		})
	}
}

func badReason(bad *Invalid) Reason {
	if bad == nil {
		return ""
	}
	return bad.Reason
}

// TestSegmentRecord: the record is the message as sent (compacted, extra
// fields and nulls kept, writeKey left out), the inlet object, the key
// userId else anonymousId, the messageId in inlet-event-id, the name by
// type, and timestamp corrected by the clock skew sentAt shows.
func TestSegmentRecord(t *testing.T) {
	sb := &SegmentBatch{SentAt: time.Date(2026, 12, 5, 12, 0, 10, 0, time.UTC), Extra: []byte(`,"batch_context":{"library":{"name":"x"}}`)}
	for _, tc := range []struct {
		name, raw, typ string
		sb             *SegmentBatch
		value          string // the record's value up to the inlet object
		key, evName    string
		ts             string
	}{
		{"track", `{ "type":"track", "event":"Order Completed", "userId":"u1", "anonymousId":"a1", "messageId":"m1", "extra":null, "writeKey":"secret", "properties":{"revenue":1.50} }`, "", nil,
			`{"type":"track","event":"Order Completed","userId":"u1","anonymousId":"a1","messageId":"m1","extra":null,"properties":{"revenue":1.50}`, "u1", "Order Completed", "2026-12-05T12:00:00.000000000Z"},
		{"anonymous page with skew", `{"type":"page","name":"Home","anonymousId":"a1","messageId":"m2","timestamp":"2026-12-05T11:59:00Z","sentAt":"2026-12-05T11:59:30Z"}`, "", nil,
			`{"type":"page","name":"Home","anonymousId":"a1","messageId":"m2","timestamp":"2026-12-05T11:59:00Z","sentAt":"2026-12-05T11:59:30Z"`, "a1", "page:Home", "2026-12-05T11:59:30.000000000Z"},
		{"batch sentAt", `{"type":"identify","userId":"u2","messageId":"m3","timestamp":"2026-12-05T12:00:05Z"}`, "", sb,
			`{"type":"identify","userId":"u2","messageId":"m3","timestamp":"2026-12-05T12:00:05Z"`, "u2", "identify", "2026-12-05T11:59:55.000000000Z"},
		{"type from the path", `{"userId":"u3","messageId":"m4","groupId":"g"}`, "group", nil,
			`{"userId":"u3","messageId":"m4","groupId":"g","type":"group"`, "u3", "group", "2026-12-05T12:00:00.000000000Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, bad := segmentRecord(t, tc.raw, tc.typ, tc.sb)
			if bad != nil {
				t.Fatal(bad)
			}
			v := string(rec.Value)
			if !strings.HasPrefix(v, tc.value+`,"inlet":{"received_at":"2026-12-05T12:00:00.000000000Z","ip":"192.0.2.1","client":"web","timestamp":"`+tc.ts+`"`) {
				t.Errorf("value %s\nwant it to start %s,\"inlet\":{... \"timestamp\":%q", v, tc.value, tc.ts)
			}
			if strings.Contains(v, "secret") {
				t.Errorf("the record holds the write key: %s", v)
			}
			if tc.sb != nil && !strings.Contains(v, `"batch_context":{"library":{"name":"x"}}`) {
				t.Errorf("value %s: want the batch's context", v)
			}
			if !json.Valid(rec.Value) {
				t.Errorf("value %s is not JSON", v)
			}
			if string(rec.Key) != tc.key || string(rec.Headers[1].Value) != tc.evName || rec.EventID != strings.Split(strings.Split(v, `"messageId":"`)[1], `"`)[0] {
				t.Errorf("key %q, name %q, id %q; want %q, %q and the messageId", rec.Key, rec.Headers[1].Value, rec.EventID, tc.key, tc.evName)
			}
		})
	}
}

// TestFrameSegment: a batch wrapper's fields in any order; a body that is
// not one is left to Frame; one that is not JSON is refused, where and why.
func TestFrameSegment(t *testing.T) {
	body := []byte(`{"messageId":"x","sentAt":"2026-12-05T12:00:00Z","batch":[{"type":"track","event":"a"} , {"type":"page"}],"context":{"library":{"name":"analytics-go"}},"writeKey":"k"}`)
	items, sb, ok, err := FrameSegment(nil, body, 500)
	if !ok || err != nil || len(items) != 2 || string(items[1]) != `{"type":"page"}` || sb.WriteKey != "k" || sb.SentAt.IsZero() ||
		string(sb.Extra) != `,"batch_context":{"library":{"name":"analytics-go"}}` {
		t.Fatalf("got %q %+v %v %v", items, sb, ok, err)
	}
	for _, b := range []string{`[{"type":"track"}]`, `{"batch":[]}`, `{"batch":[1,2,3]}`, `{"nobatch":1}`} {
		max := 500
		if b == `{"batch":[1,2,3]}` {
			max = 2
		}
		if _, _, ok, err := FrameSegment(nil, []byte(b), max); ok || err != nil {
			t.Errorf("%s: ok %v err %v, want not framed", b, ok, err)
		}
	}
	for b, want := range map[string]string{
		`{"batch":[{"a":1}]`:                            "malformed JSON at byte offset 18: unexpected end of JSON input",
		`{"sentAt":null "batch":[{}]}`:                  "malformed JSON at byte offset 15",
		"\xef\xbb\xbf" + `{"sentAt":null "batch":[{}]}`: "malformed JSON at byte offset 18",
		`{"batch":[{}]} {"batch":[{}]}`:                 "malformed JSON at byte offset 15",
	} {
		if _, _, ok, err := FrameSegment(nil, []byte(b), 500); ok || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: ok %v err %v, want %q", b, ok, err, want)
		}
	}
	for _, b := range []string{`{"batch":[{}],"sentAt":"now"}`, `{"batch":[{}],"context":[1]}`, `{"batch":[{}],"batch":[{}]}`, `{"batch":[{}],"writeKey":1}`} {
		if _, _, _, err := FrameSegment(nil, []byte(b), 500); err == nil {
			t.Errorf("%s: no error", b)
		}
	}
}
