package event

import (
	"strings"
	"testing"
	"time"
)

// An error quotes at most MaxQuoteBytes of what it refuses: a client's
// megabyte of field name, time or batch key does not come back whole.
func TestErrorsQuoteAShortPrefix(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	for name, raw := range map[string]string{
		"unknown field":   `{"event":"e","` + long + `":1}`,
		"duplicate field": `{"event":"e","props":{"` + long + `":1,"` + long + `":2}}`,
		"ts not a time":   `{"event":"e","ts":"` + long + `"}`,
		"nested pointer":  `{"event":"e","props":{"` + long + `":{"a":1,"a":2}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			b := NewBatch("t", Meta{ReceivedAt: time.Now()}, 0)
			inv := b.Add([]byte(raw))
			if inv == nil {
				t.Fatal("accepted")
			}
			if len(inv.Msg) > 4*MaxQuoteBytes {
				t.Errorf("error of %d bytes: %.300s...", len(inv.Msg), inv.Msg)
			}
		})
	}
	_, err := Split([]byte(`{"`+long+`":[]}`), FormatJSON, 10)
	if err == nil || len(err.Error()) > 4*MaxQuoteBytes {
		t.Errorf("unknown batch key: error of %d bytes", len(err.Error()))
	}
}
