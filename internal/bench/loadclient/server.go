package loadclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/report"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sampler reads a target's /metrics on an interval, in the background.
type Sampler struct {
	url      string
	inFlight string // the gauge of requests in flight
	client   *http.Client
	cancel   context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	stats report.ServerStats
}

// StartSampler reads url once now (the idle figures; it fails if url cannot
// be read), then every interval until Stop. inFlight names the gauge of
// requests in flight,
func StartSampler(url, inFlight string, interval time.Duration) (*Sampler, error) {
	s := &Sampler{url: url, inFlight: inFlight, client: &http.Client{Timeout: 2 * time.Second}, done: make(chan struct{})}
	s.stats.URL = url
	rss, _, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("bench: reading the target's metrics at %s: %w", url, err)
	}
	s.stats.RSSIdle, s.stats.RSSPeak = rss, rss
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s, nil
}

func (s *Sampler) sample() {
	rss, inFlight, err := s.read()
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Samples++
	s.stats.RSSPeak = max(s.stats.RSSPeak, rss)
	s.stats.InFlightPeak = max(s.stats.InFlightPeak, inFlight)
}

// read returns process_resident_memory_bytes and the in-flight gauge (the
// sum of its series), read with Prometheus' text parser.
func (s *Sampler) read() (rss, inFlight int64, err error) {
	resp, err := s.client.Get(s.url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return 0, 0, err
	}
	mem, ok := families["process_resident_memory_bytes"]
	if !ok {
		return 0, 0, fmt.Errorf("no process_resident_memory_bytes in %s", s.url)
	}
	return int64(sum(mem)), int64(sum(families[s.inFlight])), nil
}

// maxMetricsBytes bounds the /metrics answer read.
const maxMetricsBytes = 16 << 20

// sum is the sum of the values of a family's gauges or untyped series.
func sum(mf *dto.MetricFamily) (v float64) {
	for _, m := range mf.GetMetric() {
		v += m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}

// Stop takes a last sample, stops sampling and returns the figures.
func (s *Sampler) Stop() *report.ServerStats {
	s.cancel()
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if st.InFlightPeak > 0 && st.RSSPeak > st.RSSIdle {
		st.BytesPerInFlight = float64(st.RSSPeak-st.RSSIdle) / float64(st.InFlightPeak)
	}
	return &st
}
