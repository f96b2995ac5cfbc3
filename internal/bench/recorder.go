package bench

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

// The histograms' range: 1 µs to 60 s, 3 significant digits. Longer
// latencies are recorded as 60 s.
const (
	minLatency = time.Microsecond
	maxLatency = time.Minute
	sigFigs    = 3
	// maxStatuses bounds the distinct answers counted; more are "other".
	maxStatuses = 64
	// maxExample bounds the sample message kept for an error kind.
	maxExample = 200
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(int64(minLatency/time.Microsecond), int64(maxLatency/time.Microsecond), sigFigs)
}

func micros(d time.Duration) int64 {
	return int64(min(max(d, minLatency), maxLatency) / time.Microsecond)
}

// recorder collects a run's figures. record is safe for concurrent use.
// Its memory is bounded by the run's length: one entry per second.
type recorder struct {
	cfg     Config
	measure time.Time // the end of the warmup

	completions atomic.Int64 // every request finished, warmup included
	warmup      atomic.Int64 // requests due during the warmup

	mu          sync.Mutex // guards all below
	lat         *hdrhistogram.Histogram
	lag         *hdrhistogram.Histogram // open loop only
	cur         *hdrhistogram.Histogram // latencies of second curSec
	curSec      int
	series      []report.Second // by second of completion after measure
	started     []int64         // open loop: requests sent, by second of intended time
	requests    int64
	ok          int64
	failed      int64 // client failures and answers that are not a success
	events      int64
	eventsOK    int64
	sent        int64
	received    int64
	unfinishedN int64
	status      map[string]int64
	errs        map[string]*report.ErrorCount
	interrupted bool
}

func newRecorder(cfg Config, t0 time.Time) *recorder {
	r := &recorder{
		cfg:     cfg,
		measure: t0.Add(cfg.Warmup),
		lat:     newHistogram(),
		cur:     newHistogram(),
		series:  make([]report.Second, secondsIn(cfg.Duration)),
		status:  map[string]int64{},
		errs:    map[string]*report.ErrorCount{},
	}
	if cfg.Open() {
		r.lag = newHistogram()
		r.started = make([]int64, secondsIn(cfg.Duration))
	}
	return r
}

// secondsIn is the number of seconds, whole or begun, in d (at least 1).
func secondsIn(d time.Duration) int { return max(int((d+time.Second-1)/time.Second), 1) }

// second is the index of t's second after the warmup, within n seconds:
// requests that finish after the end count in the last second.
func (r *recorder) second(t time.Time, n int) int {
	return min(max(int(t.Sub(r.measure)/time.Second), 0), n-1)
}

// record counts one finished request, unless it was due in the warmup.
func (r *recorder) record(intended, started, done time.Time, res Result) {
	r.completions.Add(1)
	if intended.Before(r.measure) {
		r.warmup.Add(1)
		return
	}
	lat := micros(done.Sub(intended))
	kind := ""
	if res.Err != nil {
		kind = Classify(res.Err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sec := r.second(done, len(r.series))
	if sec > r.curSec {
		r.flush()
		r.curSec = sec
	}
	s := &r.series[sec]
	s.Requests++
	r.requests++
	r.sent += res.Sent
	r.received += res.Received
	r.events += int64(res.Events)
	if r.started != nil {
		r.started[r.second(intended, len(r.started))]++
		_ = r.lag.RecordValue(micros(started.Sub(intended)))
	}
	if res.Err != nil {
		r.addError(kind, res.Err)
	}
	// Latency is that of the answers; a timed-out request waited at least
	// as long as recorded, and leaving it out would flatter the server.
	// Other failures (refused, reset) have no latency worth the name.
	if res.Err == nil || kind == KindTimeout {
		_ = r.lat.RecordValue(lat)
		_ = r.cur.RecordValue(lat)
	}
	switch {
	case res.Err != nil:
		r.failed++
		s.Errors++
	case res.OK:
		r.countStatus(res.Status)
		r.ok++
		r.eventsOK += int64(res.Events)
		s.OK++
	default:
		r.countStatus(res.Status)
		r.failed++
		s.Errors++
	}
}

// unfinished counts a request cut short by the end of the run's context.
func (r *recorder) unfinished(intended time.Time) {
	r.completions.Add(1)
	if intended.Before(r.measure) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unfinishedN++
	if r.started != nil {
		r.started[r.second(intended, len(r.started))]++
	}
}

// r.mu must be held.
func (r *recorder) countStatus(s string) {
	if _, ok := r.status[s]; !ok && len(r.status) >= maxStatuses {
		s = "other"
	}
	r.status[s]++
}

// r.mu must be held.
func (r *recorder) addError(kind string, err error) {
	e := r.errs[kind]
	if e == nil {
		msg := err.Error()
		if len(msg) > maxExample {
			msg = msg[:maxExample] + "..."
		}
		e = &report.ErrorCount{Kind: kind, Example: msg}
		r.errs[kind] = e
	}
	e.Count++
}

// flush closes the latency figures of second curSec. r.mu must be held.
func (r *recorder) flush() {
	if r.cur.TotalCount() == 0 {
		return
	}
	s := &r.series[r.curSec]
	s.P50 = report.Millis(r.cur.ValueAtQuantile(50))
	s.P99 = report.Millis(r.cur.ValueAtQuantile(99))
	s.Max = report.Millis(r.cur.Max())
	r.cur.Reset()
}

func (r *recorder) progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Progress{
		Requests: r.requests,
		Errors:   r.failed,
		P99:      time.Duration(r.lat.ValueAtQuantile(99)) * time.Microsecond,
	}
}

// report builds the report of a run stopped at stop after its start. No
// request may be recorded any more.
func (r *recorder) report(p Pacer, stop time.Duration) *report.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush()
	cfg := r.cfg
	window := max(stop-cfg.Warmup, 0)
	rep := &report.Report{
		Mode:           "closed",
		Workers:        cfg.Workers,
		Warmup:         cfg.Warmup.Seconds(),
		Duration:       window.Seconds(),
		Start:          r.measure.Add(-cfg.Warmup).UTC().Round(0),
		Interrupted:    r.interrupted,
		WarmupRequests: r.warmup.Load(),
		Requests:       r.requests,
		OK:             r.ok,
		Unfinished:     r.unfinishedN,
		Events:         r.events,
		EventsOK:       r.eventsOK,
		BytesSent:      r.sent,
		BytesReceived:  r.received,
		Status:         map[string]int64{},
		Latency:        report.Summarize(r.lat),
	}
	for k, v := range r.status {
		rep.Status[k] = v
	}
	n := min(secondsIn(window), len(r.series))
	if cfg.Open() {
		rep.Mode = "open"
		rep.Rate, rep.StartRate = cfg.Rate, cfg.StartRate
		rep.MaxLag = cfg.MaxLag.Seconds()
		lag := report.Summarize(r.lag)
		rep.SendLag = &lag
		for i := 0; i < n && i < len(r.started); i++ {
			from := cfg.Warmup + time.Duration(i)*time.Second
			to := min(from+time.Second, stop)
			due := p.Count(to) - p.Count(from)
			dropped := max(due-r.started[i], 0)
			r.series[i].Intended, r.series[i].Dropped = due, dropped
			rep.Intended += due
			rep.Dropped += dropped
		}
	}
	// An interrupted run may have answers after it stopped.
	last := n
	for i := range r.series {
		if r.series[i].Requests > 0 {
			last = max(last, i+1)
		}
	}
	rep.Series = make([]report.Second, last)
	copy(rep.Series, r.series)
	for i := range rep.Series {
		rep.Series[i].T = i
	}
	for _, e := range r.errs {
		rep.Errors = append(rep.Errors, *e)
	}
	if rep.Dropped > 0 {
		rep.Errors = append(rep.Errors, report.ErrorCount{Kind: KindDropped, Count: rep.Dropped,
			Example: fmt.Sprintf("not started within %v of the intended time: the generator fell behind (%d requests in flight, its limit, or short of CPU itself)", cfg.MaxLag, cfg.Workers)})
	}
	sort.Slice(rep.Errors, func(i, j int) bool {
		a, b := rep.Errors[i], rep.Errors[j]
		return a.Count > b.Count || a.Count == b.Count && a.Kind < b.Kind
	})
	if window > 0 {
		rep.Throughput = float64(rep.Requests) / window.Seconds()
		rep.EventsPerSec = float64(rep.EventsOK) / window.Seconds()
	}
	if total := rep.Requests + rep.Dropped; total > 0 {
		rep.SuccessRatio = float64(rep.OK) / float64(total)
	}
	if b, err := r.lat.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
		rep.Histogram = string(b)
	}
	return rep
}
