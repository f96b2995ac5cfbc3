package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
)

// LoadConfig configures Load. Start from DefaultLoadConfig.
type LoadConfig struct {
	// Target is the gateway's base URL, http://host:port; events go to
	// Target + "/v1/batch".
	Target string
	// Events is how many events to send; 0 sends until Duration ends. One
	// of Events and Duration is set.
	Events int
	// Batch is the number of events per request.
	Batch int
	// Concurrency is the number of requests in flight at most.
	Concurrency int
	// Rate is events per second; 0 sends as fast as the gateway answers.
	Rate float64
	// Duration, with Events 0, stops sending after this long. Requests in
	// flight then are finished.
	Duration time.Duration
	// Timeout bounds one request, answer included.
	Timeout time.Duration
	// Run names the run: event ids are "<Run>-<n>" (see ID).
	Run string
	// EventName is the "event" field of every event.
	EventName string
	// TLSCAFile is a PEM file of the CAs that sign an https:// Target's
	// certificate (inlet verify --tls-ca); empty: the system's.
	TLSCAFile string
	// TLSInsecureSkipVerify accepts any certificate of an https:// Target
	// (--tls-insecure-skip-verify): for tests only.
	TLSInsecureSkipVerify bool
}

// DefaultLoadConfig returns the defaults of `inlet verify`, with a new run id.
func DefaultLoadConfig() LoadConfig {
	return LoadConfig{
		Target:      "http://127.0.0.1:8080",
		Events:      10000,
		Batch:       5,
		Concurrency: 8,
		Timeout:     10 * time.Second,
		Run:         NewRun(),
		EventName:   "inlet_verify",
	}
}

// maxRunLen keeps "<run>-<n>" within inlet's 128-byte id limit.
const maxRunLen = 100

// Validate reports the first invalid setting.
func (c LoadConfig) Validate() error {
	u, err := url.Parse(c.Target)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("verify: target %q: want http://host:port", c.Target)
	case u.Scheme != "https" && (c.TLSCAFile != "" || c.TLSInsecureSkipVerify):
		return fmt.Errorf("verify: --tls-ca and --tls-insecure-skip-verify are for an https:// target, not %q", c.Target)
	case c.Events < 0:
		return errors.New("verify: events must not be negative")
	case c.Duration < 0:
		return errors.New("verify: duration must not be negative")
	case c.Events == 0 && c.Duration == 0:
		return errors.New("verify: nothing to send: set a number of events or a duration")
	case c.Events > 0 && c.Duration > 0:
		return errors.New("verify: a number of events or a duration, not both")
	case c.Batch < 1 || c.Concurrency < 1:
		return errors.New("verify: batch and concurrency must be at least 1")
	case c.Concurrency > 100000:
		return errors.New("verify: concurrency at most 100000 (the load engine's workers)")
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("verify: rate %v: want events per second, or 0 for as fast as possible", c.Rate)
	case c.Timeout <= 0 || c.Timeout > time.Minute:
		return errors.New("verify: timeout must be positive and at most 1m (the load engine's latency range)")
	case c.EventName == "" || len(c.EventName) > 128:
		return errors.New("verify: event name must be 1 to 128 bytes")
	case c.Run == "" || len(c.Run) > maxRunLen:
		return fmt.Errorf("verify: run id %q: want 1 to %d characters", c.Run, maxRunLen)
	}
	for _, r := range c.Run {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)) {
			return fmt.Errorf("verify: run id %q: want letters, digits and . _ : -", c.Run)
		}
	}
	return nil
}

// Load sends events with ids "<Run>-<n>", n from 0, in batches of
// cfg.Batch to cfg.Target + "/v1/batch", paced at cfg.Rate, with at most
// cfg.Concurrency requests in flight, and records each id in l as sent
// before its request and as acknowledged when the gateway answered 2xx
// (less any the answer lists as rejected). Each request's outcome is counted
// with l.Answered. Requests are not retried.
//
// The load runs on the bench engine (bench.RunCount): an open loop at
// cfg.Rate/cfg.Batch requests a second, or a closed loop of
// cfg.Concurrency workers. A batch that finds every worker busy waits;
// later ones are then sent as soon as possible, which catches up to the
// rate: none is dropped.
//
// An https:// target's certificate is checked with cfg.TLSCAFile's CAs
// before anything is sent: Load fails at once, in one line, if the file
// cannot be read or the certificate does not verify.
//
// Load blocks until every event was sent and answered, or Duration ended
// (requests in flight are finished), or ctx ended (requests in flight are
// abandoned, and ctx's error is returned).
func Load(ctx context.Context, cfg LoadConfig, l *Ledger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		if err := checkTLS(ctx, cfg, tc); err != nil {
			return err
		}
	}
	name, _ := json.Marshal(cfg.EventName)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	defer tr.CloseIdleConnections()
	s := sender{
		client: &http.Client{Transport: tr},
		url:    strings.TrimRight(cfg.Target, "/") + "/v1/batch",
		cfg:    cfg,
		name:   name,
		l:      l,
		ctx:    ctx,
	}
	run := bench.Config{Workers: cfg.Concurrency, Duration: cfg.Duration, Timeout: cfg.Timeout}
	if cfg.Rate > 0 {
		// A late batch waits for a worker, however late: none is dropped.
		run.Rate, run.MaxLag = cfg.Rate/float64(cfg.Batch), 24*time.Hour
	}
	var batches int64 // 0: Duration ends the run
	if cfg.Events > 0 {
		batches = int64((cfg.Events + cfg.Batch - 1) / cfg.Batch)
	}
	if _, err := bench.RunCount(ctx, run, 0, batches, s.send); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return ctx.Err()
}

// sender sends the batches of one Load.
type sender struct {
	client *http.Client
	url    string
	cfg    LoadConfig
	name   []byte // the event name as JSON
	l      *Ledger
	ctx    context.Context // Load's: its end is a cancellation, not a timeout
	next   atomic.Int64    // the first event of the next batch
}

// send sends the next batch of events and records the outcome. It is a
// bench.Target.
func (s *sender) send(ctx context.Context) bench.Result {
	n := s.cfg.Batch
	first := int(s.next.Add(int64(n))) - n
	if s.cfg.Events > 0 {
		n = min(n, s.cfg.Events-first)
	}
	ids := make([]string, n)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range ids {
		seq := first + i
		ids[i] = ID(s.cfg.Run, seq)
		if i > 0 {
			b.WriteByte(',')
		}
		// The run id holds no character JSON would escape (see Validate).
		fmt.Fprintf(&b, `{"event":%s,"id":"%s","props":{"seq":%d}}`, s.name, ids[i], seq)
	}
	b.WriteByte(']')
	res := bench.Result{Sent: int64(b.Len()), Events: n}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &b)
	if err != nil {
		s.l.Answered("error")
		return bench.Result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "inlet-verify")
	s.l.Sent(ids...)
	resp, err := s.client.Do(req)
	if err != nil {
		s.l.Answered(s.errorKind(err))
		res.Err = err
		return res
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // keep the connection when we can
	resp.Body.Close()
	res.Status, res.OK, res.Received = strconv.Itoa(resp.StatusCode), resp.StatusCode/100 == 2, int64(len(body))
	s.l.Answered(res.Status)
	if res.OK {
		s.l.Acked(acceptedIDs(ids, body)...)
	}
	return res
}

// acceptedIDs drops from ids those the batch answer lists as rejected. An
// answer that is not inlet's batch answer acknowledges every id.
func acceptedIDs(ids []string, body []byte) []string {
	var a struct {
		Rejected []struct {
			Index int `json:"index"`
		} `json:"rejected"`
	}
	if json.Unmarshal(body, &a) != nil || len(a.Rejected) == 0 {
		return ids
	}
	rejected := make(map[int]bool, len(a.Rejected))
	for _, r := range a.Rejected {
		rejected[r.Index] = true
	}
	out := make([]string, 0, len(ids))
	for i, id := range ids {
		if !rejected[i] {
			out = append(out, id)
		}
	}
	return out
}

// errorKind names a request that got no answer: "canceled" (Load's ctx
// ended), "tls", "refused", "timeout", "reset" or "error", by
// bench.Classify's kinds.
func (s *sender) errorKind(err error) string {
	if s.ctx.Err() != nil {
		return "canceled"
	}
	switch k := bench.Classify(err); k {
	case bench.KindTLS, bench.KindRefused, bench.KindTimeout, bench.KindReset:
		return k
	case bench.KindClosed:
		return bench.KindReset
	}
	return "error"
}
