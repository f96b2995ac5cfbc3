// Package client sends events to an inlet gateway (POST /v1/batch) from Go
// programs: Track enqueues without waiting for the network, a goroutine of
// the client's own batches the events (by count, bytes and linger), gzips
// them and retries what inlet did not acknowledge, with exponential backoff
// and jitter that honours Retry-After. Each event keeps its id across
// retries (a UUIDv7 made at Track when the event has none), so inlet's
// at-least-once delivery can be de-duplicated downstream.
//
// Nothing is dropped silently: an event that is not delivered is counted in
// Stats().Dropped under its reason and, for rejections, reported to the
// ErrorHandler.
package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Event is one event, as inlet's docs/ingest.md ("The event") defines it.
type Event struct {
	Event   string         `json:"event"`
	ID      string         `json:"id,omitempty"`
	TS      int64          `json:"ts,omitempty"` // milliseconds since the epoch
	UID     string         `json:"uid,omitempty"`
	AnonID  string         `json:"anon_id,omitempty"`
	Props   map[string]any `json:"props,omitempty"`
	Context map[string]any `json:"context,omitempty"`
}

// Errors returned by Track.
var (
	// ErrQueueFull: the queue was full (DropNewest), or stayed full for
	// the Block duration or until ctx was done. The event is counted in
	// Stats().Dropped[DropQueueFull].
	ErrQueueFull = errors.New("client: queue full")
	// ErrClosed: Close was called. The event is counted in
	// Stats().Dropped[DropClosed].
	ErrClosed = errors.New("client: closed")
)

// Reasons an event was dropped, the keys of Stats().Dropped.
const (
	DropQueueFull        = "queue_full"        // the queue was full
	DropClosed           = "closed"            // Track after Close
	DropRejected         = "rejected"          // inlet refused it for good (4xx other than 408/429, or listed in "rejected")
	DropTooLarge         = "too_large"         // alone it is over inlet's body limit (413)
	DropRetriesExhausted = "retries_exhausted" // MaxAttempts reached
	DropCloseTimeout     = "close_timeout"     // still queued or unacknowledged when Close's context was done
	DropEncode           = "encode"            // Track could not encode it as JSON
)

var dropReasons = []string{DropQueueFull, DropClosed, DropRejected, DropTooLarge, DropRetriesExhausted, DropCloseTimeout, DropEncode}

// Stats are counters since New. Queued is the number waiting now.
type Stats struct {
	Queued  int
	Tracked int64 // events Track accepted into the queue
	Sent    int64 // events inlet acknowledged
	Batches int64 // batches inlet answered 2xx
	Retried int64 // attempts that were retried (a batch retried twice counts 2)
	Dropped map[string]int64
}

// Policy is what Track does when the queue is full.
type Policy struct {
	block time.Duration
}

// DropNewest makes Track return ErrQueueFull at once when the queue is full.
func DropNewest() Policy { return Policy{} }

// Block makes Track wait up to d (or until its context is done) for room,
// then return ErrQueueFull.
func Block(d time.Duration) Policy { return Policy{block: d} }

// Option configures a Client.
type Option func(*config)

type config struct {
	http        *http.Client
	queueSize   int
	maxEvents   int
	maxBytes    int
	linger      time.Duration
	gzip        bool
	policy      Policy
	header      http.Header
	minBackoff  time.Duration
	maxBackoff  time.Duration
	maxAttempts int
	onError     func(error)
}

// WithHTTPClient sets the HTTP client (default: one with a 30 s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.http = hc } }

// WithQueueSize bounds the events waiting to be sent (default 10,000).
func WithQueueSize(n int) Option { return func(c *config) { c.queueSize = n } }

// WithBatch sets the most events (default 500, inlet's --max-events) and
// encoded bytes (default 512 KiB, under inlet's 1 MiB --max-body-bytes) of
// a batch, and how long the first event of a batch waits for more
// (default 100 ms).
func WithBatch(events, bytes int, linger time.Duration) Option {
	return func(c *config) { c.maxEvents, c.maxBytes, c.linger = events, bytes, linger }
}

// WithGzip turns gzip compression of request bodies on or off (default on).
func WithGzip(on bool) Option { return func(c *config) { c.gzip = on } }

// WithFullPolicy sets what Track does when the queue is full (default Block(0): DropNewest).
func WithFullPolicy(p Policy) Option { return func(c *config) { c.policy = p } }

// WithBearer sends "Authorization: Bearer token" (a write key) with every request.
func WithBearer(token string) Option {
	return func(c *config) { c.header.Set("Authorization", "Bearer "+token) }
}

// WithHeader adds a header to every request.
func WithHeader(name, value string) Option { return func(c *config) { c.header.Add(name, value) } }

// WithBackoff sets the first and the longest wait between attempts
// (default 100 ms and 10 s); each wait is drawn at random up to the
// doubling bound (full jitter), and is at least the server's Retry-After.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minBackoff, c.maxBackoff = min, max }
}

// WithMaxAttempts bounds the attempts per batch (default 0: retry until
// Close's context is done). A batch that used them all is dropped, counted
// under DropRetriesExhausted.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithErrorHandler is called, from the client's goroutine, for every event
// or batch that is dropped after Track accepted it. It must not block.
func WithErrorHandler(f func(error)) Option { return func(c *config) { c.onError = f } }

// Client sends events to one inlet. It is safe for concurrent use; Close
// stops it.
type Client struct {
	url string
	cfg config

	queue   chan item
	quit    chan struct{} // closed first by Close: wakes blocked Tracks
	drain   chan struct{} // closed once no Track can enqueue any more
	done    chan struct{} // closed when the sender goroutine returned
	stop    context.CancelFunc
	sendCtx context.Context

	mu     sync.RWMutex // guards closed against Tracks in flight
	closed bool
	once   sync.Once

	tracked, sent, batches, retried atomic.Int64
	dropped                         map[string]*atomic.Int64
}

type item struct {
	data  []byte
	flush chan struct{} // a Flush marker, not an event
}

// New returns a client for the inlet at baseURL (http://host:port) and
// starts its sender goroutine; Close stops it.
func New(baseURL string, opts ...Option) (*Client, error) {
	cfg := config{
		http:       &http.Client{Timeout: 30 * time.Second},
		queueSize:  10000,
		maxEvents:  500,
		maxBytes:   512 << 10,
		linger:     100 * time.Millisecond,
		gzip:       true,
		header:     http.Header{},
		minBackoff: 100 * time.Millisecond,
		maxBackoff: 10 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://"):
		return nil, fmt.Errorf("client: url %q: want http:// or https://", baseURL)
	case cfg.queueSize <= 0 || cfg.maxEvents <= 0 || cfg.maxBytes <= 0 || cfg.linger < 0:
		return nil, errors.New("client: queue size and batch bounds must be positive")
	case cfg.minBackoff <= 0 || cfg.maxBackoff < cfg.minBackoff:
		return nil, errors.New("client: want 0 < min backoff <= max backoff")
	}
	c := &Client{
		url:     strings.TrimRight(baseURL, "/") + "/v1/batch",
		cfg:     cfg,
		queue:   make(chan item, cfg.queueSize),
		quit:    make(chan struct{}),
		drain:   make(chan struct{}),
		done:    make(chan struct{}),
		dropped: map[string]*atomic.Int64{},
	}
	for _, r := range dropReasons {
		c.dropped[r] = new(atomic.Int64)
	}
	c.sendCtx, c.stop = context.WithCancel(context.Background())
	go c.run()
	return c, nil
}

// Track encodes e and enqueues it; it does not wait for the network. An
// event without an id gets a UUIDv7, kept across retries. When the queue
// is full, the client's Policy applies; the error is then ErrQueueFull.
func (c *Client) Track(ctx context.Context, e Event) error {
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			c.drop(DropEncode, 1, fmt.Errorf("client: making an event id: %w", err))
			return err
		}
		e.ID = id.String()
	}
	b, err := json.Marshal(e)
	if err != nil {
		c.drop(DropEncode, 1, nil)
		return fmt.Errorf("client: encoding event %q: %w", e.Event, err)
	}
	return c.enqueue(ctx, b)
}

// TrackJSON enqueues one event already encoded as a JSON object, as
// Track does. It is sent as it is: give it an "id" to de-duplicate
// retries. The client keeps raw; the caller must not modify it.
func (c *Client) TrackJSON(ctx context.Context, raw []byte) error {
	return c.enqueue(ctx, raw)
}

func (c *Client) enqueue(ctx context.Context, b []byte) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.drop(DropClosed, 1, nil)
		return ErrClosed
	}
	select {
	case c.queue <- item{data: b}:
		c.tracked.Add(1)
		return nil
	default:
	}
	if c.cfg.policy.block <= 0 {
		c.drop(DropQueueFull, 1, nil)
		return ErrQueueFull
	}
	t := time.NewTimer(c.cfg.policy.block)
	defer t.Stop()
	select {
	case c.queue <- item{data: b}:
		c.tracked.Add(1)
		return nil
	case <-t.C:
	case <-ctx.Done():
	case <-c.quit:
		c.drop(DropClosed, 1, nil)
		return ErrClosed
	}
	c.drop(DropQueueFull, 1, nil)
	return ErrQueueFull
}

// Flush waits until every event Track accepted before it was acknowledged
// or dropped, or until ctx is done.
func (c *Client) Flush(ctx context.Context) error {
	m := item{flush: make(chan struct{})}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	select {
	case c.queue <- m:
		c.mu.RUnlock()
	case <-ctx.Done():
		c.mu.RUnlock()
		return ctx.Err()
	case <-c.quit:
		c.mu.RUnlock()
		return ErrClosed
	}
	select {
	case <-m.flush:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops taking events, sends what is queued, and returns once it is
// acknowledged, or when ctx is done: then what is left is dropped (counted
// under DropCloseTimeout, and the error says how many) and Close returns
// without waiting for the network. Close is safe to call more than once.
func (c *Client) Close(ctx context.Context) error {
	c.once.Do(func() {
		close(c.quit)
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.drain)
	})
	select {
	case <-c.done:
	case <-ctx.Done():
		c.stop() // aborts the request in flight and the backoff
		<-c.done
	}
	if n := c.dropped[DropCloseTimeout].Load(); n > 0 {
		return fmt.Errorf("client: closing: %d events not acknowledged in time", n)
	}
	return nil
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := Stats{Queued: len(c.queue), Tracked: c.tracked.Load(), Sent: c.sent.Load(),
		Batches: c.batches.Load(), Retried: c.retried.Load(), Dropped: map[string]int64{}}
	for r, n := range c.dropped {
		if v := n.Load(); v > 0 {
			s.Dropped[r] = v
		}
	}
	return s
}

func (c *Client) drop(reason string, n int, err error) {
	c.dropped[reason].Add(int64(n))
	if err != nil && c.cfg.onError != nil {
		c.cfg.onError(err)
	}
}

// run is the sender goroutine: it batches the queue and sends each batch
// until it is acknowledged or dropped, one at a time, so events arrive in
// the order they were tracked.
func (c *Client) run() {
	defer close(c.done)
	var (
		batch   [][]byte
		size    int
		flushes []chan struct{}
		linger  *time.Timer
		lingerC <-chan time.Time
	)
	send := func() {
		if len(batch) > 0 {
			c.deliver(batch)
		}
		batch, size = nil, 0
		for _, f := range flushes {
			close(f)
		}
		flushes = nil
		if linger != nil {
			linger.Stop()
			lingerC = nil
		}
	}
	add := func(it item) {
		if it.flush != nil {
			flushes = append(flushes, it.flush)
			send()
			return
		}
		if len(batch) > 0 && size+len(it.data)+1 > c.cfg.maxBytes {
			send()
		}
		batch = append(batch, it.data)
		size += len(it.data) + 1
		if len(batch) == 1 && c.cfg.linger > 0 {
			if linger == nil {
				linger = time.NewTimer(c.cfg.linger)
			} else {
				linger.Reset(c.cfg.linger)
			}
			lingerC = linger.C
		}
		if len(batch) >= c.cfg.maxEvents || size >= c.cfg.maxBytes || c.cfg.linger == 0 {
			send()
		}
	}
	for {
		select {
		case it := <-c.queue:
			add(it)
		case <-lingerC:
			lingerC = nil
			send()
		case <-c.drain:
		drain:
			for {
				select {
				case it := <-c.queue:
					add(it)
				default:
					break drain
				}
			}
			send()
			return
		}
	}
}

// deliver sends batch until inlet answered it, or drops it with a reason.
func (c *Client) deliver(batch [][]byte) {
	for attempt := 1; ; attempt++ {
		if c.sendCtx.Err() != nil {
			c.drop(DropCloseTimeout, len(batch), nil)
			return
		}
		ans, err := c.Post(c.sendCtx, batch)
		var se *StatusError
		switch {
		case err == nil:
			c.batches.Add(1)
			c.sent.Add(int64(ans.Accepted))
			if len(ans.Rejected) > 0 {
				c.drop(DropRejected, len(ans.Rejected), &RejectedError{Rejected: ans.Rejected})
			}
			return
		case errors.As(err, &se) && se.Code == http.StatusRequestEntityTooLarge:
			if len(batch) == 1 {
				c.drop(DropTooLarge, 1, err)
				return
			}
			c.deliver(batch[:len(batch)/2]) // halves keep the order
			c.deliver(batch[len(batch)/2:])
			return
		case errors.As(err, &se) && !se.Temporary():
			if len(se.Answer.Rejected) > 0 {
				c.drop(DropRejected, len(batch), &RejectedError{Rejected: se.Answer.Rejected})
			} else {
				c.drop(DropRejected, len(batch), err)
			}
			return
		}
		if c.sendCtx.Err() != nil {
			c.drop(DropCloseTimeout, len(batch), nil)
			return
		}
		if c.cfg.maxAttempts > 0 && attempt >= c.cfg.maxAttempts {
			c.drop(DropRetriesExhausted, len(batch), fmt.Errorf("client: %d attempts: %w", attempt, err))
			return
		}
		c.retried.Add(1)
		var after time.Duration
		if se != nil {
			after = se.RetryAfter
		}
		t := time.NewTimer(Backoff(attempt, c.cfg.minBackoff, c.cfg.maxBackoff, after))
		select {
		case <-t.C:
		case <-c.sendCtx.Done():
			t.Stop()
		}
	}
}

// Backoff is the wait before attempt+1: a random duration up to
// min(max, min·2^(attempt-1)) (full jitter), and at least retryAfter plus
// up to min of jitter, so that clients told to come back at once do not
// all come back at the same instant.
func Backoff(attempt int, min, max, retryAfter time.Duration) time.Duration {
	bound := max
	if attempt < 31 {
		if b := min << (attempt - 1); b > 0 && b < max {
			bound = b
		}
	}
	d := time.Duration(rand.Int64N(int64(bound) + 1))
	if retryAfter > 0 {
		d = retryAfter + time.Duration(rand.Int64N(int64(min)+1))
	}
	return d
}

// Answer is inlet's answer to a batch.
type Answer struct {
	Accepted int        `json:"accepted"`
	Rejected []Rejected `json:"rejected"`
}

// Rejected is an event inlet refused: its index in the batch and why.
type Rejected struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// RejectedError reports events inlet refused for good.
type RejectedError struct{ Rejected []Rejected }

func (e *RejectedError) Error() string {
	if len(e.Rejected) == 0 {
		return "client: events rejected"
	}
	return fmt.Sprintf("client: %d events rejected; first: index %d: %s", len(e.Rejected), e.Rejected[0].Index, e.Rejected[0].Error)
}

// StatusError is an answer other than 2xx.
type StatusError struct {
	Code       int
	RetryAfter time.Duration // from Retry-After, 0 when absent
	Message    string        // the "error" of inlet's JSON answer, or the body
	Answer     Answer        // a 400 for a batch of invalid events lists them here
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("client: inlet answered %d: %s", e.Code, e.Message)
}

// Temporary reports whether the same request may succeed later: 408, 429
// and 5xx. Other 4xx are not retried.
func (e *StatusError) Temporary() bool {
	return e.Code == http.StatusRequestTimeout || e.Code == http.StatusTooManyRequests || e.Code >= 500
}

// Post sends raw events (JSON objects) as one batch, once, now: no queue,
// no retry. It returns inlet's answer to a 2xx, a *StatusError for any
// other status, or the transport's error. It is for callers with their own
// queue and retries (inlet's logship and `inlet ship`); it is safe for
// concurrent use.
func (c *Client) Post(ctx context.Context, raw [][]byte) (Answer, error) {
	var body bytes.Buffer
	var w io.Writer = &body
	var zw *gzip.Writer
	if c.cfg.gzip {
		zw = gzip.NewWriter(&body)
		w = zw
	}
	for _, r := range raw {
		w.Write(r)
		w.Write([]byte{'\n'})
	}
	if zw != nil {
		zw.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, &body)
	if err != nil {
		return Answer{}, fmt.Errorf("client: building request: %w", err)
	}
	for k, v := range c.cfg.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if zw != nil {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.cfg.http.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("client: posting %d events: %w", len(raw), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Answer{}, fmt.Errorf("client: reading answer: %w", err)
	}
	var ans Answer
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, &ans); err != nil && resp.StatusCode != http.StatusAccepted {
			return Answer{}, fmt.Errorf("client: decoding answer %q: %w", b, err)
		}
		if resp.StatusCode == http.StatusAccepted && ans.Accepted == 0 && len(ans.Rejected) == 0 {
			ans.Accepted = len(raw)
		}
		return ans, nil
	}
	se := &StatusError{Code: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")), Message: strings.TrimSpace(string(b))}
	var msg struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &msg) == nil && msg.Error != "" {
		se.Message = msg.Error
	}
	_ = json.Unmarshal(b, &se.Answer)
	return Answer{}, se
}

// retryAfter reads Retry-After: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}
