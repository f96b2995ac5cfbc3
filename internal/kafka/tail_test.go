package kafka

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTailPrintsValidJSONLines: whatever a record holds (JSON, text, a
// dead letter with invalid UTF-8 in a JSON string), `inlet tail` prints one
// line of valid JSON that says it.
func TestTailPrintsValidJSONLines(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        any // the "value" field, decoded
	}{
		{"json", `{"event":"a","n":1}`, map[string]any{"event": "a", "n": float64(1)}},
		{"text", `not json`, "not json"},
		{"invalid UTF-8 in a JSON string", "{\"event\":\"a\xff\"}", `"{\"event\":\"a\xff\"}"`},
		{"invalid UTF-8, not JSON", "a\xffb", `"a\xffb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			r := &kgo.Record{Topic: "events.invalid", Key: []byte("k"), Value: []byte(tc.value), Timestamp: time.Unix(1, 0),
				Headers: []kgo.RecordHeader{{Key: "inlet-error", Value: []byte("bad")}}}
			if err := printRecord(&b, r, "json"); err != nil {
				t.Fatal(err)
			}
			line := b.String()
			if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 || !utf8.ValidString(line) || !json.Valid([]byte(line)) {
				t.Fatalf("not one line of valid JSON: %q", line)
			}
			var got struct {
				Value   any               `json:"value"`
				Headers map[string]string `json:"headers"`
			}
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(tc.want)
			have, _ := json.Marshal(got.Value)
			if string(have) != string(want) || got.Headers["inlet-error"] != "bad" {
				t.Fatalf("printed %s; value %s, want %s", line, have, want)
			}
		})
	}
}
