package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestShipReviewJSONFormatOutputIsValidUTF8: a --format json line whose
// strings hold invalid UTF-8 or a lone surrogate escape must still give an
// event that is valid UTF-8 (and strict JSON), as every other format does.
func TestShipReviewJSONFormatOutputIsValidUTF8(t *testing.T) {
	e := newLineEncoder(ShipConfig{Format: "json", Event: "log"})
	for _, line := range []string{"{\"a\":\"\xff\xfe\"}", "{\"\xc3\":1}", `{"a":"\ud800"}`, `{"a":1,"a":2}`} {
		out := e.encode([]byte(line), "")
		if !utf8.Valid(out) {
			t.Errorf("line %q: event is not valid UTF-8: %q", line, out)
		}
		if strings.Contains(string(out), `\ud800"`) {
			t.Errorf("line %q: event carries a lone surrogate: %s", line, out)
		}
		if strings.Count(string(out), `"a":`) > 1 {
			t.Errorf("line %q: event carries a duplicate key: %s", line, out)
		}
	}
}

// TestShipReviewLogfmtUnterminatedQuote: k="abc (no closing quote) must
// keep the value's last byte.
func TestShipReviewLogfmtUnterminatedQuote(t *testing.T) {
	for line, want := range map[string]string{`k="abc`: "abc", `k="a\`: `a\`, `k="`: ""} {
		m := parseLogfmt(line)
		if m["k"] != want {
			t.Errorf("parseLogfmt(%q)[k] = %q; want %q", line, m["k"], want)
		}
	}
}

// TestShipReviewTopicLimitBelowBatch: ship to a topic whose
// max.message.bytes (4096) is below a batch of its lines (10 x 1 KB) and
// below one line (5 KB). Ship must end: the small lines delivered, the
// line too large alone counted as rejected; not retry the same batch for ever.
func TestShipReviewTopicLimitBelowBatch(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-small-")
	testkit.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "4096"})
	var in strings.Builder
	for i := 0; i < 30; i++ {
		if i == 17 {
			in.WriteString(rndText(5000) + "\n")
		}
		fmt.Fprintf(&in, "%04d %s\n", i, rndText(1000))
	}
	cfg := parseShip(t, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--batch-size", "10", "--stop-timeout", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	start := time.Now()
	err := Ship(ctx, cfg, strings.NewReader(in.String()), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 45s (%v): it retries the batch Kafka refuses as too large for ever", err)
	}
	t.Logf("ship ended after %v: %v", time.Since(start), err)
	if err == nil || !strings.Contains(err.Error(), "1 rejected") {
		t.Errorf("ship: %v; want the one line too large counted as rejected", err)
	}
	got := testkit.ConsumeN(t, brokers, topic, 30, 300*time.Millisecond)
	next := 0
	for _, r := range got {
		var ev struct {
			Props struct{ Line string } `json:"props"`
		}
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.SplitN(ev.Props.Line, " ", 2)[0])
		switch {
		case err != nil:
			t.Fatalf("record %q", ev.Props.Line[:min(20, len(ev.Props.Line))])
		case n == next:
			next++
		case n > next:
			t.Fatalf("line %d arrived where %d was due", n, next)
		}
	}
	if next != 30 {
		t.Errorf("lines 0..%d arrived in order; want 0..29", next-1)
	}
}

func rndText(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rand.IntN(26))
	}
	return string(b)
}

// TestShipReviewLineJustUnderTheLimit: a line whose event is 1,000,000
// bytes, under KafkaSink's 1,000,012 check but over franz-go's batch limit
// once the batch's own 70-odd bytes are added: ship must end (the line
// delivered or counted as rejected), on a topic with Kafka's defaults.
func TestShipReviewLineJustUnderTheLimit(t *testing.T) {
	brokers := testkit.Brokers(t)
	topic := testkit.Unique(t, "ship-edge-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	cfg := parseShip(t, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--batch-size", "10", "--stop-timeout", "1s")
	e := newLineEncoder(cfg)
	over := len(e.encode([]byte("x"), "")) - 1
	line := rndText(1_000_000 - over)
	if n := len(e.encode([]byte(line), "")); n != 1_000_000 {
		t.Fatalf("event of %d bytes", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Ship(ctx, cfg, strings.NewReader("a\n"+line+"\nb\n"), testkit.Logger(t))
	if ctx.Err() != nil {
		t.Fatalf("ship did not end in 30s (%v)", err)
	}
	if err != nil && !strings.Contains(err.Error(), "1 of 3 lines read were not acknowledged (1 rejected)") {
		t.Fatalf("ship: %v; want all delivered, or only the large line rejected", err)
	}
}
