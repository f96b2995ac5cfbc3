package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--stall-every", "3", "--stall", "300ms"}, pw)
	}()
	addr, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url := "http://" + strings.TrimSpace(addr) + "/v1/batch"

	post := func() (int, time.Duration) {
		start := time.Now()
		resp, err := http.Post(url, "application/json", strings.NewReader(`[{"event":"x"}]`))
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	for i := 1; i <= 2; i++ {
		if code, took := post(); code != http.StatusNoContent || took > 200*time.Millisecond {
			t.Fatalf("request %d: %d after %v, want 204 at once", i, code, took)
		}
	}
	// The third request stalls the server: it and one sent meanwhile wait.
	var wg sync.WaitGroup
	wg.Go(func() {
		if code, took := post(); code != http.StatusNoContent || took < 250*time.Millisecond {
			t.Errorf("stalling request: %d after %v, want 204 after the stall", code, took)
		}
	})
	time.Sleep(100 * time.Millisecond)
	if code, took := post(); code != http.StatusNoContent || took < 120*time.Millisecond {
		t.Errorf("request during the stall: %d after %v, want 204 at the end of the stall", code, took)
	}
	wg.Wait()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
