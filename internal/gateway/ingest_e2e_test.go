package gateway_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/gateway/gatewaytest"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestIngestFormats sends the same kind of events in every accepted layout
// and encoding and checks each arrives in Kafka, enriched, exactly once.
func TestIngestFormats(t *testing.T) {
	brokers := testkit.Brokers(t)
	five := []byte(`[
		{"event":"page_view","uid":"u1","props":{"path":"/","n":1.5}},
		{"event":"click","anon_id":"a1","context":{"lib":"js"}},
		{"event":"signup","id":"client-id-1"},
		{"event":"page_view2","uid":"u2","anon_id":"a2","ts":1767225600000},
		{"event":"purchase","uid":"u1","ts":"2026-01-01T00:00:00Z","props":{"total":9.5}}]`)
	ndjson := []byte("{\"event\":\"page_view\",\"uid\":\"u1\",\"props\":{\"path\":\"/\",\"n\":1.5}}\r\n\n" +
		"{\"event\":\"click\",\"anon_id\":\"a1\",\"context\":{\"lib\":\"js\"}}\n" +
		"{\"event\":\"signup\",\"id\":\"client-id-1\"}\n" +
		"{\"event\":\"page_view2\",\"uid\":\"u2\",\"anon_id\":\"a2\",\"ts\":1767225600000}\n" +
		"{\"event\":\"purchase\",\"uid\":\"u1\",\"ts\":\"2026-01-01T00:00:00Z\",\"props\":{\"total\":9.5}}")
	wrapped := append(append([]byte(`{"batch":`), five...), '}')

	cases := []struct {
		name    string
		body    []byte
		headers []string
	}{
		{"json array", five, []string{"Content-Type", "application/json"}},
		{"batch object", wrapped, []string{"Content-Type", "application/json; charset=utf-8"}},
		{"ndjson", ndjson, []string{"Content-Type", "application/x-ndjson"}},
		{"sendBeacon text/plain", five, []string{"Content-Type", "text/plain;charset=UTF-8"}},
		{"gzip", testkit.Gzip(t, five), []string{"Content-Type", "application/json", "Content-Encoding", "gzip"}},
		{"zstd", testkit.Zstd(t, five), []string{"Content-Type", "application/json", "Content-Encoding", "zstd"}},
		{"gzip ndjson", testkit.Gzip(t, ndjson), []string{"Content-Type", "application/x-ndjson", "Content-Encoding", "gzip"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := testkit.Unique(t, "t-")
			g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
			r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", tc.body, append(tc.headers, "User-Agent", "inlet-test/1")...)
			if r.Status != http.StatusOK {
				t.Fatalf("answer %s, want 200", r)
			}
			if acc, rej := testkit.Answer(t, r); acc != 5 || len(rej) != 0 {
				t.Fatalf("answer %s, want 5 accepted and none rejected", r)
			}
			recs := byName(testkit.ConsumeN(t, brokers, topic, 5, time.Second))
			checkFive(t, recs)
		})
	}
}

// checkFive checks the five events of TestIngestFormats as delivered.
func checkFive(t *testing.T, recs map[string]testkit.Record) {
	t.Helper()
	wantKeys := map[string]string{"page_view": "u1", "click": "a1", "signup": "client-id-1", "page_view2": "u2", "purchase": "u1"}
	for name, key := range wantKeys {
		r, ok := recs[name]
		if !ok {
			t.Fatalf("event %q not delivered; got %v", name, recs)
		}
		if r.Key != key {
			t.Errorf("%s: key %q, want %q", name, r.Key, key)
		}
		f := r.Fields
		if f["event"] != name || f["ip"] != "127.0.0.1" || f["ua"] != "inlet-test/1" {
			t.Errorf("%s: value %s: want event, ip 127.0.0.1 and ua", name, r.Value)
		}
		ra, _ := f["received_at"].(string)
		if ts, err := time.Parse(time.RFC3339Nano, ra); err != nil || time.Since(ts) > time.Minute || time.Since(ts) < 0 {
			t.Errorf("%s: received_at %q is not a recent RFC 3339 time", name, ra)
		}
		id, _ := f["id"].(string)
		if id == "" || r.Headers["inlet-event-id"] != id || r.Headers["inlet-event-name"] != name {
			t.Errorf("%s: id %q, headers %v: want the id in value and header", name, id, r.Headers)
		}
		if r.Headers["content-type"] != "application/json" {
			t.Errorf("%s: content-type header %q", name, r.Headers["content-type"])
		}
	}
	if got := recs["signup"].Fields["id"]; got != "client-id-1" {
		t.Errorf("client id not kept: %v", got)
	}
	if id, _ := recs["click"].Fields["id"].(string); len(id) != 36 || id[14] != '7' {
		t.Errorf("generated id %q is not a UUIDv7", id)
	}
	if p := recs["page_view"].Fields["props"].(map[string]any); p["path"] != "/" || p["n"] != 1.5 {
		t.Errorf("props not delivered as sent: %s", recs["page_view"].Value)
	}
	if c := recs["click"].Fields["context"].(map[string]any); c["lib"] != "js" {
		t.Errorf("context not delivered as sent: %s", recs["click"].Value)
	}
	if recs["page_view2"].Fields["ts"] != 1767225600000.0 || recs["purchase"].Fields["ts"] != "2026-01-01T00:00:00Z" {
		t.Errorf("ts not delivered as sent: %s / %s", recs["page_view2"].Value, recs["purchase"].Value)
	}
}

func TestTrackAndPixel(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	base := "http://" + g.Addr()

	r := testkit.Do(t, "POST", base+"/v1/track", []byte(`{"event":"track_one","uid":"t1"}`), "Content-Type", "application/json")
	if r.Status != 200 || !strings.Contains(string(r.Body), `"accepted":1`) {
		t.Fatalf("track: %s", r)
	}
	r = testkit.Do(t, "GET", base+"/i?e=pixel_fields&uid=p1&p.path=%2Fhome&c.ref=ad&ts=1767225600000&cb=123", nil)
	checkGIF(t, r, http.StatusOK)
	data := base64.RawURLEncoding.EncodeToString([]byte(`{"event":"pixel_data","anon_id":"d1","props":{"a":[1,2]}}`))
	r = testkit.Do(t, "GET", base+"/i.gif?data="+data, nil)
	checkGIF(t, r, http.StatusOK)
	// Invalid pixel events still get the image, and go to the dead-letter topic.
	checkGIF(t, testkit.Do(t, "GET", base+"/i?uid=no-name", nil), http.StatusOK)
	checkGIF(t, testkit.Do(t, "GET", base+"/i?data=!!!", nil), http.StatusOK)

	recs := byName(testkit.ConsumeN(t, brokers, topic, 3, time.Second))
	if f := recs["track_one"]; f.Key != "t1" {
		t.Errorf("track: %s key %q", f.Value, f.Key)
	}
	pf := recs["pixel_fields"]
	if pf.Key != "p1" || pf.Fields["props"].(map[string]any)["path"] != "/home" ||
		pf.Fields["context"].(map[string]any)["ref"] != "ad" || pf.Fields["ts"] != 1767225600000.0 {
		t.Errorf("pixel fields: %s", pf.Value)
	}
	if _, ok := pf.Fields["cb"]; ok {
		t.Errorf("cache buster leaked into the event: %s", pf.Value)
	}
	if pd := recs["pixel_data"]; pd.Key != "d1" || fmt.Sprint(pd.Fields["props"]) != "map[a:[1 2]]" {
		t.Errorf("pixel data=: %s", pd.Value)
	}
	dead := testkit.ConsumeN(t, brokers, topic+".invalid", 2, time.Second)
	reasons := dead[0].Headers["inlet-error"] + " | " + dead[1].Headers["inlet-error"]
	if !strings.Contains(reasons, "e= (or event=) is required") || !strings.Contains(reasons, "base64") {
		t.Errorf("dead-letter reasons %q", reasons)
	}
}

func checkGIF(t *testing.T, r testkit.Response, status int) {
	t.Helper()
	if r.Status != status || r.Header.Get("Content-Type") != "image/gif" || !bytes.HasPrefix(r.Body, []byte("GIF89a")) {
		t.Fatalf("pixel answer %d %q %q, want %d and a GIF", r.Status, r.Header.Get("Content-Type"), r.Body, status)
	}
	if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") || !strings.Contains(cc, "no-cache") {
		t.Errorf("pixel Cache-Control %q", cc)
	}
}

func TestPartialBatch(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "t-")
	g := gatewaytest.Start(t, gatewaytest.Config(t, brokers, topic))
	big := `{"event":"big","props":{"x":"` + strings.Repeat("a", 33<<10) + `"}}`
	body := `[{"event":"ok1"},{"event":5},"just a string",{"props":{}},{"event":"ok2","props":[1]},` + big +
		`,{"event":"ok3","extra":1},{"event":"` + strings.Repeat("é", 129) + `"},{"event":"ok4","id":""},{"event":"ok5"}]`
	r := testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(body), "Content-Type", "application/json")
	if r.Status != 200 {
		t.Fatalf("answer %s, want 200", r)
	}
	acc, rej := testkit.Answer(t, r)
	want := map[int]string{
		1: `"event" must be a string, got number`,
		2: "event must be a JSON object, got string",
		3: `"event" is required`,
		4: `"props" must be a JSON object, got array`,
		5: "the limit is 32768",
		6: `unknown field "extra"`,
		7: `"event" is 129 characters; the limit is 128`,
		8: `"id" must be a non-empty string`,
	}
	if acc != 2 || len(rej) != len(want) {
		t.Fatalf("answer %s: want 2 accepted, %d rejected", r, len(want))
	}
	for i, msg := range want {
		if !strings.Contains(rej[i], msg) {
			t.Errorf("rejection %d: %q, want it to say %q", i, rej[i], msg)
		}
	}
	recs := byName(testkit.ConsumeN(t, brokers, topic, 2, time.Second))
	if _, ok := recs["ok1"]; !ok {
		t.Errorf("ok1 not delivered")
	}
	if _, ok := recs["ok5"]; !ok {
		t.Errorf("ok5 not delivered")
	}
	dead := testkit.ConsumeN(t, brokers, topic+".invalid", len(want), time.Second)
	got := map[string]bool{}
	for _, d := range dead {
		got[d.Headers["inlet-error"]] = true
		if d.Headers["inlet-reason"] == "" || d.Headers["inlet-received-at"] == "" {
			t.Errorf("dead letter without reason or time: %v", d.Headers)
		}
	}
	for i, msg := range rej {
		if !got[msg] {
			t.Errorf("rejected event %d (%s) is not in the dead-letter topic", i, msg)
		}
	}

	// A batch where every event is invalid is a 400, and still dead-lettered.
	r = testkit.Do(t, "POST", "http://"+g.Addr()+"/v1/batch", []byte(`[{"nope":1}]`), "Content-Type", "application/json")
	if acc, rej := testkit.Answer(t, r); r.Status != 400 || acc != 0 || len(rej) != 1 {
		t.Fatalf("all-invalid batch: %s", r)
	}
}

// byName indexes records by event name.
func byName(recs []testkit.Record) map[string]testkit.Record {
	m := map[string]testkit.Record{}
	for _, r := range recs {
		m[r.Headers["inlet-event-name"]] = r
	}
	return m
}
