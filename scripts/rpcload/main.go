//go:build ignore

// rpcload is a load generator for request-reply that shares no code with
// inlet (not `inlet bench`): an open loop of calls at a fixed rate, each on
// a connection of its own (HTTP/1.1, "Connection: close"), its latency
// counted from its intended send time. A call counts as answered by the
// worker when it gets 200 with its own body back (an echo worker).
//
//	go run scripts/rpcload/main.go -url http://127.0.0.1:8080/v1/rpc/svc -rate 1500 -duration 20s
//
// It prints one JSON object: calls, answered, statuses, errors, latency
// percentiles of the answered calls (ms), and the send lag (actual minus
// intended send time, ms).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

func main() {
	target := flag.String("url", "", "the service's URL: http://host:port/v1/rpc/NAME")
	rate := flag.Float64("rate", 1500, "calls per second")
	duration := flag.Duration("duration", 20*time.Second, "how long calls are started")
	timeout := flag.Duration("timeout", 12*time.Second, "a call's whole time, connecting included")
	rpcTimeout := flag.String("rpc-timeout", "10s", "Inlet-Timeout of each call")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" {
		fmt.Fprintln(os.Stderr, "rpcload: -url http://host:port/v1/rpc/NAME")
		os.Exit(2)
	}

	type result struct {
		status  int // 0: no answer
		echoed  bool
		latency time.Duration
		lag     time.Duration
		err     string
	}
	n := int(*rate * duration.Seconds())
	results := make([]result, n)
	interval := time.Duration(float64(time.Second) / *rate)
	var wg sync.WaitGroup
	start := time.Now().Add(100 * time.Millisecond)
	for i := range n {
		intended := start.Add(time.Duration(i) * interval)
		if d := time.Until(intended); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			r := &results[i]
			r.lag = time.Since(intended)
			body := []byte("call-" + strconv.Itoa(i))
			r.status, r.echoed, r.err = call(u, body, *rpcTimeout, intended.Add(*timeout))
			r.latency = time.Since(intended)
		})
	}
	wg.Wait()

	out := struct {
		Calls      int                `json:"calls"`
		Rate       float64            `json:"rate"`
		Answered   int                `json:"answered_by_worker"`
		Statuses   map[string]int     `json:"statuses"`
		Errors     map[string]int     `json:"errors"`
		Latency    map[string]float64 `json:"latency_ms"`
		SendLagP99 float64            `json:"send_lag_p99_ms"`
	}{Calls: n, Rate: *rate, Statuses: map[string]int{}, Errors: map[string]int{}, Latency: map[string]float64{}}
	var lat, lags []time.Duration
	for _, r := range results {
		lags = append(lags, r.lag)
		if r.status != 0 {
			out.Statuses[strconv.Itoa(r.status)]++
		}
		if r.err != "" {
			out.Errors[r.err]++
		}
		if r.echoed {
			out.Answered++
			lat = append(lat, r.latency)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[min(int(p*float64(len(ds))), len(ds)-1)]
	}
	slices.Sort(lat)
	slices.Sort(lags)
	out.Latency["p50"], out.Latency["p99"], out.Latency["max"] = ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), ms(pct(lat, 1))
	out.SendLagP99 = ms(pct(lags, 0.99))
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// call makes one call on a new connection, by deadline: its status, whether
// its body came back, or what went wrong (a short class of error).
func call(u *url.URL, body []byte, rpcTimeout string, deadline time.Time) (int, bool, string) {
	c, err := net.DialTimeout("tcp", u.Host, time.Until(deadline))
	if err != nil {
		return 0, false, "dial"
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: text/plain\r\nInlet-Timeout: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		u.RequestURI(), u.Host, rpcTimeout, len(body))
	if _, err := c.Write(append([]byte(req), body...)); err != nil {
		return 0, false, "write"
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return 0, false, "timeout"
		}
		return 0, false, "read"
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, false, "read body"
	}
	return resp.StatusCode, resp.StatusCode == http.StatusOK && bytes.Equal(got, body), ""
}
