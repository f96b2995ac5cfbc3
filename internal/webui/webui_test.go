package webui

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/inlet-dev/inlet/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newServer(tb testing.TB, cfg Config, src Source) *httptest.Server {
	tb.Helper()
	if src.Live == nil {
		src.Live = NewLive(cfg)
	}
	mux := http.NewServeMux()
	Register(mux, cfg, src)
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

func get(tb testing.TB, url string, headers ...string) (*http.Response, string) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestSDKCachingAndETag(t *testing.T) {
	srv := newServer(t, DefaultConfig(), Source{})
	resp, body := get(t, srv.URL+"/sdk/inlet.js")
	if resp.StatusCode != 200 || !strings.Contains(body, "inlet") {
		t.Fatalf("GET /sdk/inlet.js: %d %.100s", resp.StatusCode, body)
	}
	etag := resp.Header.Get("ETag")
	for k, want := range map[string]string{"Content-Type": "text/javascript; charset=utf-8", "Cache-Control": sdkCache} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
		t.Fatalf("ETag = %q", etag)
	}
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		resp, body = get(t, srv.URL+"/sdk/inlet.js", "If-None-Match", inm)
		if resp.StatusCode != http.StatusNotModified || body != "" || resp.Header.Get("ETag") != etag {
			t.Errorf("If-None-Match %s: %d %q (ETag %q), want 304 without a body", inm, resp.StatusCode, body, resp.Header.Get("ETag"))
		}
	}
	if resp, _ = get(t, srv.URL+"/sdk/inlet.js", "If-None-Match", `"stale"`); resp.StatusCode != 200 {
		t.Errorf("a stale ETag: %d, want 200", resp.StatusCode)
	}
	if resp, body = get(t, srv.URL+"/sdk/inlet.d.ts"); resp.StatusCode != 200 || !strings.Contains(body, "InitOptions") {
		t.Errorf("GET /sdk/inlet.d.ts: %d", resp.StatusCode)
	}
}

func TestSDKIsSmall(t *testing.T) {
	a := loadAsset("dist/inlet.js")
	var n countWriter
	zw, _ := gzip.NewWriterLevel(&n, gzip.BestCompression)
	_, _ = zw.Write(a.body)
	_ = zw.Close()
	if n > 4096 {
		t.Fatalf("inlet.js is %d bytes gzipped; the budget is 4096", n)
	}
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

func TestRoutesFollowConfig(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ui, example bool
		want        map[string]int
	}{
		{"defaults", true, false, map[string]int{"/ui/": 200, "/example/": 404, "/sdk/inlet.js": 200}},
		{"ui off, example on", false, true, map[string]int{"/ui/": 404, "/ui/stream": 404, "/example/": 200, "/sdk/inlet.js": 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.UI, cfg.Example = tc.ui, tc.example
			srv := newServer(t, cfg, Source{})
			for path, want := range tc.want {
				if resp, _ := get(t, srv.URL+path); resp.StatusCode != want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
}

// sse reads server-sent events from a stream.
type sse struct {
	r    *bufio.Reader
	body io.Closer
}

func openStream(tb testing.TB, url string) (*sse, *http.Response) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return &sse{r: bufio.NewReaderSize(resp.Body, 1<<20), body: resp.Body}, resp
}

// next returns the next event's type and data.
func (s *sse) next(tb testing.TB) (string, string) {
	tb.Helper()
	var typ, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			tb.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && typ != "":
			return typ, data
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

// nextOf skips events until one of type typ.
func (s *sse) nextOf(tb testing.TB, typ string) string {
	tb.Helper()
	for {
		if t, d := s.next(tb); t == typ {
			return d
		}
	}
}

// TestStreamSendsItemsAndStats: items and counters reach the page; a
// rejected event's content only with ShowRejectedContent, else its
// reason and message, cut to maxErrorBytes.
func TestStreamSendsItemsAndStats(t *testing.T) {
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprintf("show rejected content %v", show), func(t *testing.T) { testStream(t, show) })
	}
}

func testStream(t *testing.T, showRejected bool) {
	cfg := DefaultConfig()
	cfg.ShowRejectedContent = showRejected
	live := NewLive(cfg)
	srv := newServer(t, cfg, Source{Live: live, State: func() any { return map[string]string{"ack": "kafka"} }})
	s, resp := openStream(t, srv.URL+"/ui/stream")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	if d := s.nextOf(t, "stats"); !strings.Contains(d, `"ack":"kafka"`) {
		t.Fatalf("first stats: %s", d)
	}
	testkit.WaitFor(t, 5*time.Second, "the page to be counted", live.Watching)
	live.Publish([]Item{
		{Name: "add_to_cart", Key: "anon-1", ID: "id-1", Topic: "events", Value: []byte(`{"event":"add_to_cart","props":{"sku":"A1"}}`), At: time.Now(), Offset: -1, Delivery: "spool"},
		{Key: "", Topic: "events.invalid", Value: []byte(`{"bad`), At: time.Now(), Offset: -1, Reject: &Rejection{Reason: "malformed", Error: "unexpected end " + strings.Repeat("é", 100)}},
		{Name: "page_view", Key: "anon-1", ID: "id-3", Topic: "events", Value: []byte(`{}`), Partition: 2, Offset: 41},
	})
	var got []liveItem
	for range 3 {
		var li liveItem
		if err := json.Unmarshal([]byte(s.nextOf(t, "item")), &li); err != nil {
			t.Fatal(err)
		}
		got = append(got, li)
	}
	if got[0].Kind != "event" || got[0].Name != "add_to_cart" || got[0].ID != "id-1" || got[0].Offset != nil {
		t.Errorf("item 0: %+v", got[0])
	}
	if v, _ := json.Marshal(got[0].Value); string(v) != `{"event":"add_to_cart","props":{"sku":"A1"}}` {
		t.Errorf("item 0 value %s", v)
	}
	var wantValue any
	wantErr := "unexpected end " + strings.Repeat("é", 100)
	if showRejected {
		wantValue = `{"bad`
	} else {
		wantErr = wantErr[:127] + "…" // 'é' is 2 bytes: cut at a rune's start
	}
	if got[1].Kind != "rejected" || got[1].Reason != "malformed" || got[1].Value != wantValue || got[1].Error != wantErr {
		t.Errorf("item 1: %+v, want value %v, error %q", got[1], wantValue, wantErr)
	}
	if got[2].Partition == nil || *got[2].Partition != 2 || *got[2].Offset != 41 {
		t.Errorf("item 2: %+v", got[2])
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(s.nextOf(t, "stats")), &st); err != nil {
		t.Fatal(err)
	}
	totals := map[string]uint64{}
	for _, n := range st.Names {
		totals[n.Name] = n.Total
		if len(n.Rate) != rateWindow || n.Rate[rateWindow-1]+n.Rate[rateWindow-2] != uint32(n.Total) {
			t.Errorf("%s: rate %v for a total of %d", n.Name, n.Rate, n.Total)
		}
	}
	if want := map[string]uint64{"add_to_cart": 1, "page_view": 1, "rejected: malformed": 1}; fmt.Sprint(totals) != fmt.Sprint(want) {
		t.Errorf("totals %v, want %v", totals, want)
	}
}

func TestStreamFilters(t *testing.T) {
	cfg := DefaultConfig()
	live := NewLive(cfg)
	srv := newServer(t, cfg, Source{Live: live})
	s, _ := openStream(t, srv.URL+"/ui/stream?event=click&user=u1")
	testkit.WaitFor(t, 5*time.Second, "the page to be counted", live.Watching)
	live.Publish([]Item{
		{Name: "click", Key: "u2", ID: "a", Value: []byte(`{}`), Offset: -1},
		{Name: "view", Key: "u1", ID: "b", Value: []byte(`{}`), Offset: -1},
		{Name: "click", Key: "u1", ID: "c", Value: []byte(`{}`), Offset: -1},
	})
	var li liveItem
	_ = json.Unmarshal([]byte(s.nextOf(t, "item")), &li)
	if li.ID != "c" {
		t.Fatalf("first item through the filter: %+v, want id c", li)
	}
}

// TestStalledPageNeverBlocksPublish: a page that stops reading fills its
// queue; Publish goes on at once, the page misses records, and once it
// reads again it is told how many: what it got plus what it was told it
// skipped is everything.
func TestStalledPageNeverBlocksPublish(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ViewerBuffer = 4
	live := NewLive(cfg)
	srv := newServer(t, cfg, Source{Live: live})
	s, _ := openStream(t, srv.URL+"/ui/stream")
	s.nextOf(t, "stats")
	testkit.WaitFor(t, 5*time.Second, "the page to be counted", live.Watching)

	// 256 kB records: a few fill the connection's buffers, and the stream
	// handler blocks in Write while the test does not read.
	big := []byte(`"` + strings.Repeat("x", 256<<10) + `"`)
	const n = 200
	start := time.Now()
	for i := range n {
		live.Publish([]Item{{Name: "e", ID: fmt.Sprint(i), Value: big, Offset: -1}})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("publishing %d records to a stalled page took %v", n, d)
	}
	// Reading again, the page gets what its queue held and, with the next
	// item or the next stats, how many it missed.
	items, skipped := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for items+skipped < n && time.Now().Before(deadline) {
		typ, d := s.next(t)
		switch typ {
		case "skipped":
			var sk struct{ N int }
			_ = json.Unmarshal([]byte(d), &sk)
			skipped += sk.N
		case "item":
			items++
		}
	}
	if skipped == 0 || items+skipped != n {
		t.Fatalf("got %d items and %d skipped, want some skipped and %d in all", items, skipped, n)
	}
	t.Logf("%d items, %d skipped", items, skipped)
}

func TestViewerCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxViewers = 2
	live := NewLive(cfg)
	srv := newServer(t, cfg, Source{Live: live})
	a, _ := openStream(t, srv.URL+"/ui/stream")
	openStream(t, srv.URL+"/ui/stream")
	a.nextOf(t, "stats")
	testkit.WaitFor(t, 5*time.Second, "two pages", func() bool { return live.viewers.Load() == 2 })
	resp, body := get(t, srv.URL+"/ui/stream")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "--ui-max-viewers") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third page: %d %s, want 503 naming --ui-max-viewers", resp.StatusCode, body)
	}
	a.body.Close()
	testkit.WaitFor(t, 5*time.Second, "the closed page to free its place", func() bool { return live.viewers.Load() == 1 })
	s, resp := openStream(t, srv.URL+"/ui/stream")
	if resp.StatusCode != 200 {
		t.Fatalf("after one closed: %d", resp.StatusCode)
	}
	s.nextOf(t, "stats")
}

func TestStreamEndsWhenStopping(t *testing.T) {
	cfg := DefaultConfig()
	var stopping atomic.Bool
	srv := newServer(t, cfg, Source{Stopping: stopping.Load})
	s, _ := openStream(t, srv.URL+"/ui/stream")
	s.nextOf(t, "stats")
	stopping.Store(true)
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(s.r); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end within 5 s of the gateway stopping")
	}
}

func TestPublishWithoutPagesIsFree(t *testing.T) {
	live := NewLive(DefaultConfig())
	items := []Item{{Name: "e", Value: []byte(`{}`)}}
	if a := testing.AllocsPerRun(100, func() { live.Publish(items) }); a != 0 {
		t.Fatalf("Publish without a page allocates %v times", a)
	}
	if st, _ := live.Stats(); len(st) != 0 {
		t.Fatalf("counted without a page: %v", st)
	}
}

// TestAuthorizeGuardsUI: with Source.Authorize every route under /ui asks
// it first and is not served when it refuses; the SDK is not guarded.
func TestAuthorizeGuardsUI(t *testing.T) {
	cfg := DefaultConfig()
	var asked atomic.Int32
	srv := newServer(t, cfg, Source{Authorize: func(w http.ResponseWriter, r *http.Request) bool {
		asked.Add(1)
		if r.Header.Get("Authorization") == "Basic ok" {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="inlet"`)
		http.Error(w, "sign in", http.StatusUnauthorized)
		return false
	}})
	for _, path := range []string{"/ui", "/ui/", "/ui/live.js", "/ui/stream", "/ui/nothing"} {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "<html") {
			t.Errorf("%s: %d %q, want 401", path, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, srv.URL+"/ui/", "Authorization", "Basic ok"); resp.StatusCode != http.StatusOK {
		t.Errorf("/ui/ allowed: %d", resp.StatusCode)
	}
	if resp, _ := get(t, srv.URL+"/sdk/inlet.js"); resp.StatusCode != http.StatusOK {
		t.Errorf("/sdk/inlet.js: %d, want 200 without credentials", resp.StatusCode)
	}
	if n := asked.Load(); n != 6 {
		t.Errorf("Authorize asked %d times, want 6", n)
	}
}

// TestStreamEndsWhenNoLongerAllowed: an open stream whose caller Recheck
// refuses (its client removed, or no longer an admin) ends within a few
// seconds; until then it goes on.
func TestStreamEndsWhenNoLongerAllowed(t *testing.T) {
	cfg := DefaultConfig()
	var revoked atomic.Bool
	srv := newServer(t, cfg, Source{Recheck: func(*http.Request) bool { return !revoked.Load() }})
	s, _ := openStream(t, srv.URL+"/ui/stream")
	s.nextOf(t, "stats")
	s.nextOf(t, "stats") // a recheck passed
	revoked.Store(true)
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(s.r); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end within 5 s of its caller losing its right to watch")
	}
}

// TestPageHintsFollowConfig: the stats tell the live page whether to show
// its link to /example/ (served with --example only: it was a 404 link)
// and the credentials placeholder of its curl (with --auth); the page
// hides both until told.
func TestPageHintsFollowConfig(t *testing.T) {
	for _, tc := range []struct {
		example, auth bool
	}{{false, false}, {true, true}} {
		cfg := DefaultConfig()
		cfg.Example = tc.example
		src := Source{}
		if tc.auth {
			src.Authorize = func(http.ResponseWriter, *http.Request) bool { return true }
		}
		srv := newServer(t, cfg, src)
		s, _ := openStream(t, srv.URL+"/ui/stream")
		var st statsJSON
		if err := json.Unmarshal([]byte(s.nextOf(t, "stats")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Example != tc.example || st.Auth != tc.auth {
			t.Errorf("--example %v, --auth %v: stats say example %v, auth %v", tc.example, tc.auth, st.Example, st.Auth)
		}
		s.body.Close()
	}
	_, page := get(t, newServer(t, DefaultConfig(), Source{}).URL+"/ui/")
	for _, want := range []string{`<span id="try-example" hidden>open <a href="/example/">`, `<span id="send-auth" hidden>`, `curl -H 'Content-Type: application/json' `} {
		if !strings.Contains(page, want) {
			t.Errorf("the live page lacks %s", want)
		}
	}
}
