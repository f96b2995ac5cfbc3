// Package report is the outcome of a load run (package bench) and its
// formats: text for people, JSON, an HdrHistogram percentile file and a
// self-contained HTML page.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is the outcome of a run. Times are in milliseconds, durations of
// the run in seconds. Every figure leaves out the warmup.
type Report struct {
	Target  string `json:"target,omitempty"`  // what was measured, such as "POST http://..."
	Command string `json:"command,omitempty"` // how, as typed
	Mode    string `json:"mode"`              // "open" or "closed" loop
	// Rate is the open loop's intended rate; StartRate where a ramp began.
	Rate      float64 `json:"rate,omitempty"`
	StartRate float64 `json:"start_rate,omitempty"`
	MaxLag    float64 `json:"max_lag_s,omitempty"`
	Workers   int     `json:"workers"`
	Warmup    float64 `json:"warmup_s"`
	// Duration is the measured time: the run's duration, or less if it was
	// interrupted.
	Duration float64 `json:"duration_s"`
	// Start is when the run, its warmup first, began.
	Start       time.Time `json:"start"`
	Interrupted bool      `json:"interrupted,omitempty"`

	// WarmupRequests were due during the warmup, and are in no figure.
	WarmupRequests int64 `json:"warmup_requests"`
	// Intended is the number of requests the open loop meant to send.
	Intended int64 `json:"intended,omitempty"`
	// Requests were sent and finished: answered or failed.
	Requests int64 `json:"requests"`
	// OK were answered with a success.
	OK int64 `json:"ok"`
	// Dropped were never sent: the generator could not start them within
	// MaxLag of their intended time.
	Dropped int64 `json:"dropped"`
	// Unfinished were cut short by an interrupt.
	Unfinished int64 `json:"unfinished,omitempty"`
	// SuccessRatio is OK / (Requests + Dropped).
	SuccessRatio float64 `json:"success_ratio"`
	// Throughput is Requests per second of Duration.
	Throughput float64 `json:"requests_per_s"`
	// Events were carried by the requests; EventsOK by the successful ones,
	// and EventsPerSec is EventsOK per second.
	Events        int64   `json:"events"`
	EventsOK      int64   `json:"events_ok"`
	EventsPerSec  float64 `json:"events_per_s"`
	BytesSent     int64   `json:"bytes_sent"`
	BytesReceived int64   `json:"bytes_received"`

	// Latency is taken from each request's intended send time (in a closed
	// loop, its actual one) to its answer; timeouts count at the time they
	// waited, other client failures are not in it.
	Latency Latency `json:"latency"`
	// SendLag is how late requests were sent (open loop).
	SendLag *Latency `json:"send_lag,omitempty"`
	// Status counts the server's answers.
	Status map[string]int64 `json:"status"`
	// Errors counts the client-side failures by kind, most frequent first;
	// "dropped" is the generator's overload.
	Errors []ErrorCount `json:"errors"`
	// Series is the run second by second.
	Series []Second `json:"series"`
	// Server is what the target's /metrics said during the run, if it was read.
	Server *ServerStats `json:"server,omitempty"`
	// Histogram is the latency histogram in microseconds, in HdrHistogram's
	// compressed base64 form (V2), as its other tools read it.
	Histogram string `json:"histogram,omitempty"`

	lat *hdrhistogram.Histogram
}

// Latency summarizes a histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// Second is one second of a run, counted from the end of the warmup.
// Requests finished in it; latencies are of those.
type Second struct {
	T        int     `json:"t"`
	Requests int64   `json:"requests"`
	OK       int64   `json:"ok"`
	Errors   int64   `json:"errors"`
	Intended int64   `json:"intended,omitempty"` // open loop: due in this second
	Dropped  int64   `json:"dropped,omitempty"`  // of those due in this second
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
}

// ErrorCount is a kind of client-side failure, with one message as example.
type ErrorCount struct {
	Kind    string `json:"kind"`
	Count   int64  `json:"count"`
	Example string `json:"example,omitempty"`
}

// ServerErrors counts the answers that are not a success.
func (r *Report) ServerErrors() int64 {
	var n int64
	for s, c := range r.Status {
		if !strings.HasPrefix(s, "2") {
			n += c
		}
	}
	return n
}

// ClientErrors counts the client-side failures, dropped requests included.
func (r *Report) ClientErrors() int64 {
	var n int64
	for _, e := range r.Errors {
		n += e.Count
	}
	return n
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a report WriteJSON wrote.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading bench report: %w", err)
	}
	return &r, nil
}

// histogram is the latency histogram, decoded from Histogram if need be.
func (r *Report) histogram() (*hdrhistogram.Histogram, error) {
	if r.lat != nil {
		return r.lat, nil
	}
	if r.Histogram == "" {
		return nil, errNoHistogram
	}
	h, err := hdrhistogram.Decode([]byte(r.Histogram))
	if err != nil {
		return nil, fmt.Errorf("decoding latency histogram: %w", err)
	}
	r.lat = h
	return h, nil
}

// WriteHgrm writes the latency's percentile distribution in milliseconds in
// HdrHistogram's text form (.hgrm), which its plotters read.
func (r *Report) WriteHgrm(w io.Writer) error {
	h, err := r.histogram()
	if err != nil {
		return err
	}
	_, err = h.PercentilesPrint(w, 5, 1000)
	return err
}

// WriteText writes a summary for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	what := r.Target
	if what == "" {
		what = "target"
	}
	switch r.Mode {
	case "open":
		rate := fmt.Sprintf("%g req/s", r.Rate)
		if r.StartRate > 0 {
			rate = fmt.Sprintf("%g → %g req/s", r.StartRate, r.Rate)
		}
		fmt.Fprintf(&b, "%s\n  open loop at %s, %d connections at most, %s after %s warmup\n", what, rate, r.Workers, secs(r.Duration), secs(r.Warmup))
	default:
		fmt.Fprintf(&b, "%s\n  closed loop, %d concurrent, %s after %s warmup\n", what, r.Workers, secs(r.Duration), secs(r.Warmup))
	}
	switch {
	case r.Interrupted:
		fmt.Fprintf(&b, "  INTERRUPTED: figures cover %s, %d requests were cut short\n", secs(r.Duration), r.Unfinished)
	case r.Unfinished > 0: // interrupted after the last request was sent
		fmt.Fprintf(&b, "  INTERRUPTED while the last answers were awaited: %d requests were cut short\n", r.Unfinished)
	}
	fmt.Fprintf(&b, "  requests    %d sent, %d ok (%.2f%%), %d dropped by the generator", r.Requests, r.OK, 100*r.SuccessRatio, r.Dropped)
	if r.Mode == "open" {
		fmt.Fprintf(&b, " (%d intended)", r.Intended)
	}
	events := ""
	if r.Events > 0 {
		events = fmt.Sprintf(", %.1f events/s ok", r.EventsPerSec)
	}
	fmt.Fprintf(&b, "\n  throughput  %.1f req/s%s; sent %s, received %s\n",
		r.Throughput, events, formatSize(r.BytesSent), formatSize(r.BytesReceived))
	from := "from the intended send time"
	if r.Mode != "open" {
		from = "from the send time"
	}
	fmt.Fprintf(&b, "  latency     %s  (%d, %s)\n", latencyLine(r.Latency), r.Latency.Count, from)
	if r.SendLag != nil {
		fmt.Fprintf(&b, "  send lag    %s  (generator: actual − intended send time)\n", latencyLine(*r.SendLag))
	}
	keys := make([]string, 0, len(r.Status))
	for k := range r.Status {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "  answers    ")
	if len(keys) == 0 {
		fmt.Fprintf(&b, " none")
	}
	for _, k := range keys {
		fmt.Fprintf(&b, " %s: %d", k, r.Status[k])
	}
	fmt.Fprintf(&b, "\n  client errors")
	if len(r.Errors) == 0 {
		fmt.Fprintf(&b, " none")
	}
	fmt.Fprintln(&b)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "    %-9s %d  %s\n", e.Kind, e.Count, e.Example)
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(&b, "  server      in flight peak %d; RSS idle %s, peak %s", s.InFlightPeak, formatSize(s.RSSIdle), formatSize(s.RSSPeak))
		if s.BytesPerInFlight > 0 {
			fmt.Fprintf(&b, "; %s per request in flight", formatSize(int64(s.BytesPerInFlight)))
		}
		fmt.Fprintf(&b, "  (%d samples of %s)\n", s.Samples, s.URL)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func latencyLine(l Latency) string {
	return fmt.Sprintf("mean %s  p50 %s  p90 %s  p95 %s  p99 %s  p99.9 %s  max %s",
		fmtMs(l.Mean), fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P95), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max))
}

// fmtMs formats milliseconds with about 3 significant digits.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1e3)
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 100:
		return fmt.Sprintf("%.1fms", v)
	case v < 1000:
		return fmt.Sprintf("%.0fms", v)
	}
	return fmt.Sprintf("%.2fs", v/1e3)
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ServerStats is what a target's Prometheus /metrics said during a run:
// its resident memory, idle (before the run) and at its peak, and the most
// requests it held in flight. BytesPerInFlight is the memory growth over
// idle divided by that peak.
type ServerStats struct {
	URL              string  `json:"metrics_url"`
	Samples          int     `json:"samples"`
	InFlightPeak     int64   `json:"in_flight_peak"`
	RSSIdle          int64   `json:"rss_idle_bytes"`
	RSSPeak          int64   `json:"rss_peak_bytes"`
	BytesPerInFlight float64 `json:"bytes_per_in_flight,omitempty"`
}

// Summarize is the latency figures of a histogram of microseconds.
func Summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1e3,
		P50:   Millis(h.ValueAtQuantile(50)),
		P90:   Millis(h.ValueAtQuantile(90)),
		P95:   Millis(h.ValueAtQuantile(95)),
		P99:   Millis(h.ValueAtQuantile(99)),
		P999:  Millis(h.ValueAtQuantile(99.9)),
		Max:   Millis(h.Max()),
	}
}

// Millis converts a histogram value (µs) to milliseconds.
func Millis(us int64) float64 { return float64(us) / 1e3 }

var errNoHistogram = errors.New("bench: report has no histogram")
