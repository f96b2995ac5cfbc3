package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestSinkRejects: a sink that refuses records for good is answered 413
// (too large) or 422 (refused, with the reason), without Retry-After, as
// sending the same request again cannot succeed; counted by kind.
func TestSinkRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		err    error
		status int
		kind   string
		msg    string
	}{
		{"too large", fmt.Errorf("producing to kafka: MESSAGE_TOO_LARGE: %w", ErrSinkTooLarge), 413, "too_large",
			"an event is larger than Kafka takes on this topic; not all events were stored: producing to kafka: MESSAGE_TOO_LARGE"},
		{"rejected", fmt.Errorf("producing to kafka: TOPIC_AUTHORIZATION_FAILED: %w", ErrSinkRejected), 422, "rejected",
			"Kafka refused the events for good; not all events were stored: producing to kafka: TOPIC_AUTHORIZATION_FAILED"},
	}
	for _, tc := range cases {
		for _, path := range []string{"/v1/batch", "/v1/track"} {
			t.Run(tc.name+path, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, nil)
				h.sink.setFail(func(context.Context) error { return tc.err })
				body := []byte(`[{"event":"a"},{"event":"b"}]`)
				if path == "/v1/track" {
					body = []byte(`{"event":"a"}`)
				}
				r := h.do(t, "POST", path, body)
				if r.status != tc.status || !strings.Contains(decodeError(t, r).Error, tc.msg) {
					t.Fatalf("answer %s, want %d with %q", r, tc.status, tc.msg)
				}
				if ra := r.header.Get("Retry-After"); ra != "" {
					t.Errorf("Retry-After %q on a refusal for good", ra)
				}
				if got := h.sinkErrors(tc.kind); got != 1 {
					t.Errorf("inlet_sink_errors_total{kind=%q} %v, want 1", tc.kind, got)
				}
			})
		}
	}
}
