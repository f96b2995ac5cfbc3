// Command driver sends track, identify, page, screen, group and alias
// through Segment's Go SDK (github.com/segmentio/analytics-go/v3),
// unmodified, pointed at inlet by its Endpoint setting alone.
//
// Environment: INLET_URL (inlet's base URL), WRITE_KEY, RUN (a prefix of
// the messageIds), ROUNDS (messages of each type, default 3), FAST_RETRY=1
// (retry after 50 ms instead of the SDK's back-off: the SDK retries every
// failure, a 401 too, ten times).
//
// It prints one JSON line {"sdk", "sent": [the messages as given to the
// SDK], "errors": [what the SDK reported]} and exits 1 if the SDK reported
// an error.
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/analytics-go/v3"
)

const name = "go-segment"

type callback struct {
	mu     sync.Mutex
	done   int // messages the SDK succeeded or gave up on
	errors []map[string]any
}

func (c *callback) Success(analytics.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
}

func (c *callback) Failure(m analytics.Message, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.errors = append(c.errors, map[string]any{"error": err.Error(), "message": fmt.Sprintf("%T", m)})
}

func (c *callback) settled(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done >= n
}

func main() {
	rounds, err := strconv.Atoi(os.Getenv("ROUNDS"))
	if err != nil {
		rounds = 3
	}
	run := os.Getenv("RUN")
	cb := &callback{}
	cfg := analytics.Config{
		Endpoint:  os.Getenv("INLET_URL"),
		BatchSize: 10,
		Interval:  200 * time.Millisecond,
		Callback:  cb,
		Logger:    analytics.StdLogger(log.New(os.Stderr, "analytics-go: ", log.LstdFlags)),
	}
	if os.Getenv("FAST_RETRY") == "1" {
		cfg.RetryAfter = func(int) time.Duration { return 50 * time.Millisecond }
	}
	client, err := analytics.NewWithConfig(os.Getenv("WRITE_KEY"), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(2)
	}
	var sent []map[string]any
	for i := range rounds {
		uid := fmt.Sprintf("u-%s-%d", name, i)
		id := func(t string) string { return fmt.Sprintf("%s-%s-%s-%d", run, name, t, i) }
		props := map[string]any{"order_id": fmt.Sprintf("o%d", i), "revenue": 12.5, "n": i}
		traits := map[string]any{"email": uid + "@example.com", "plan": "pro"}
		page := map[string]any{"path": fmt.Sprintf("/docs/%d", i)}
		screen := map[string]any{"tab": fmt.Sprintf("t%d", i)}
		group := map[string]any{"name": fmt.Sprintf("Acme %d", i)}
		prev := fmt.Sprintf("anon-%s-%d", name, i)
		msgs := []struct {
			m    analytics.Message
			sent map[string]any
		}{
			{analytics.Track{MessageId: id("track"), UserId: uid, Event: "Order Completed", Properties: props},
				map[string]any{"type": "track", "event": "Order Completed", "properties": props}},
			{analytics.Identify{MessageId: id("identify"), UserId: uid, Traits: traits},
				map[string]any{"type": "identify", "traits": traits}},
			{analytics.Page{MessageId: id("page"), UserId: uid, Name: "Docs", Properties: page},
				map[string]any{"type": "page", "name": "Docs", "properties": page}},
			{analytics.Screen{MessageId: id("screen"), UserId: uid, Name: "Home", Properties: screen},
				map[string]any{"type": "screen", "name": "Home", "properties": screen}},
			{analytics.Group{MessageId: id("group"), UserId: uid, GroupId: fmt.Sprintf("g-%d", i), Traits: group},
				map[string]any{"type": "group", "groupId": fmt.Sprintf("g-%d", i), "traits": group}},
			{analytics.Alias{MessageId: id("alias"), UserId: uid, PreviousId: prev},
				map[string]any{"type": "alias", "previousId": prev}},
		}
		for _, m := range msgs {
			if err := client.Enqueue(m.m); err != nil {
				cb.Failure(m.m, err)
			}
			m.sent["messageId"] = id(m.sent["type"].(string))
			m.sent["userId"] = uid
			sent = append(sent, m.sent)
		}
	}
	// Close drops a batch that is waiting to be retried ("failed to be
	// sent and the client was closed"): wait until the SDK has reported
	// every message, as a long-running service would, then close.
	for deadline := time.Now().Add(2 * time.Minute); !cb.settled(len(sent)) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if err := client.Close(); err != nil {
		cb.Failure(nil, err)
	}
	out, _ := json.Marshal(map[string]any{"sdk": name, "sent": sent, "errors": cb.errors})
	fmt.Println(string(out))
	if len(cb.errors) > 0 {
		os.Exit(1)
	}
}
