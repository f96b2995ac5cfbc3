package spool

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
)

// TestAppendRefusesRecordsNoFrameHolds: a record that no frame can hold
// (a payload over 64 MiB, which the reader takes for corruption; a topic,
// header name or header count past 16 bits) is refused with ErrTooLarge,
// and nothing of its request is stored: the records before and after it
// in other requests are read back, in order, and nothing else.
func TestAppendRefusesRecordsNoFrameHolds(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SegmentBytes = 256 << 20
	cfg.MaxBytes = 1 << 30
	cfg.MaxGroupBytes = 128 << 20
	s, _, _ := open(t, cfg)
	ctx := context.Background()
	if err := s.Append(ctx, []event.Record{rec("before")}); err != nil {
		t.Fatal(err)
	}
	big := rec("big")
	big.Value = make([]byte, maxPayloadBytes)
	longTopic := rec("topic")
	longTopic.Topic = strings.Repeat("t", 1<<16)
	manyHeaders := rec("headers")
	manyHeaders.Headers = make([]event.Header, 1<<16)
	longName := rec("name")
	longName.Headers = []event.Header{{Key: strings.Repeat("h", 1<<16)}}
	for name, r := range map[string]event.Record{"payload over 64 MiB": big, "topic": longTopic, "header count": manyHeaders, "header name": longName} {
		if err := s.Append(ctx, []event.Record{rec("same request"), r}); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: Append returned %v, want ErrTooLarge", name, err)
		}
	}
	if err := s.Append(ctx, []event.Record{rec("after")}); err != nil {
		t.Fatal(err)
	}
	es, _ := readAll(t, s, s.Delivered())
	var got []string
	for _, e := range es {
		got = append(got, e.Record.EventID)
	}
	if strings.Join(got, ",") != "before,after" {
		t.Fatalf("read back %v, want before,after", got)
	}
}
