package loadclient

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestSamplerReadsPrometheusText: the sampler reads the resident memory
// and the in-flight gauge as Prometheus' text parser does: a gauge's
// labelled series are summed, exponents and comments are understood.
func TestSamplerReadsPrometheusText(t *testing.T) {
	t.Parallel()
	var inFlight atomic.Int64
	inFlight.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# HELP process_resident_memory_bytes Resident memory size in bytes.\n" +
			"# TYPE process_resident_memory_bytes gauge\n" +
			"process_resident_memory_bytes 1.2e+07\n" +
			"# TYPE inlet_rpc_in_flight gauge\n" +
			`inlet_rpc_in_flight{service="a"} ` + strconv.FormatInt(inFlight.Load(), 10) + "\n" +
			`inlet_rpc_in_flight{service="b"} 4` + "\n"))
	}))
	defer srv.Close()
	s, err := StartSampler(srv.URL, "inlet_rpc_in_flight", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	inFlight.Store(10)
	st := s.Stop()
	if st.RSSIdle != 12e6 || st.RSSPeak != 12e6 || st.InFlightPeak != 14 || st.Samples != 1 {
		t.Errorf("stats %+v: want RSS 12e6 and in-flight peak 14 (10+4) from one sample", st)
	}

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("go_goroutines 7\n"))
	}))
	defer bad.Close()
	if _, err := StartSampler(bad.URL, "inlet_rpc_in_flight", time.Hour); err == nil {
		t.Error("metrics without process_resident_memory_bytes: want an error")
	}
}
