package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

// Sampler reads a target's /metrics on an interval, in the background.
type Sampler struct {
	url      string
	inFlight string // the gauge of requests in flight
	client   *http.Client
	cancel   context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	stats ServerStats
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

// read returns process_resident_memory_bytes and the in-flight gauge.
func (s *Sampler) read() (rss, inFlight int64, err error) {
	resp, err := s.client.Get(s.url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %s", resp.Status)
	}
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, perr := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if perr != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			rss, found = int64(v), true
		case s.inFlight:
			inFlight = int64(v)
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("no process_resident_memory_bytes in %s", s.url)
	}
	return rss, inFlight, sc.Err()
}

// Stop takes a last sample, stops sampling and returns the figures.
func (s *Sampler) Stop() *ServerStats {
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
