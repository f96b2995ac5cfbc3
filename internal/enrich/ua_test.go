package enrich

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
)

// uaCase is one line of testdata/useragents.jsonl: a User-Agent (with its
// Client Hints, if any) and what it is; device "" is a TV or a console.
// testdata/mkuseragents writes the list (testdata/SOURCE says from what);
// bots carry only "bot".
type uaCase struct {
	UA      string            `json:"ua"`
	Headers map[string]string `json:"headers"`
	Browser string            `json:"browser"`
	OS      string            `json:"os"`
	Device  string            `json:"device"`
	Bot     bool              `json:"bot"`
}

func loadUACases(tb testing.TB) []uaCase {
	tb.Helper()
	f, err := os.Open("testdata/useragents.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var cs []uaCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c uaCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

func (c uaCase) header() http.Header {
	if c.Headers == nil {
		return nil
	}
	h := http.Header{}
	for k, v := range c.Headers {
		h.Set(k, v)
	}
	return h
}

// DocBotPatterns are the --bot-patterns docs/enrichment.md suggests.
var docBotPatterns = []string{"bot", "crawler", "spider", "slurp", "scan", "monitor", "fetch", "preview", "check", "curl/", "wget/", "python", "go-http-client", "java/", "okhttp", "headless", "http_request", "feed", "archiver", "validator", "mailto:", "uptime", "synthetic"}

// score is how many of n cases a parse got right.
type score struct{ n, browser, os, device, all, botFlagged, humanFalseBot int }

func (s score) pct(k int) string { return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(max(s.n, 1))) }

// TestUAAccuracy parses the committed list and reports the accuracy on it:
// browser family, OS family and device type of the people's User-Agents,
// with and without their Client Hints, and how many bots are flagged, by
// the parser alone and with the docs' --bot-patterns. The floors are what
// the list gives today, less a little: a parser update that makes it
// worse fails here.
func TestUAAccuracy(t *testing.T) {
	e := &Enricher{}
	for _, p := range docBotPatterns {
		e.patterns = append(e.patterns, p)
	}
	var plain, hinted, hintsIgnored, bots, botsParser score
	for _, c := range loadUACases(t) {
		if c.Bot {
			bots.n++
			botsParser.n++
			u := ParseUA(c.UA, nil)
			if u.Bot {
				botsParser.botFlagged++
			}
			if u.Bot || e.matchBot(c.UA) {
				bots.botFlagged++
			}
			continue
		}
		tally := func(s *score, u UA) {
			s.n++
			b, o, d := u.Browser == c.Browser, u.OS == c.OS, u.Device == c.Device
			s.browser += btoi(b)
			s.os += btoi(o)
			s.device += btoi(d)
			s.all += btoi(b && o && d)
			if u.Bot || e.matchBot(c.UA) {
				s.humanFalseBot++
				t.Logf("flagged a bot: %s", c.UA)
			}
			if testing.Verbose() && os.Getenv("UA_MISSES") != "" && !(b && o && d) {
				t.Logf("miss: %q: got %s/%s/%s, want %s/%s/%s", c.UA, u.Browser, u.OS, u.Device, c.Browser, c.OS, c.Device)
			}
		}
		if c.Headers == nil {
			tally(&plain, ParseUA(c.UA, nil))
		} else {
			tally(&hinted, ParseUA(c.UA, c.header()))
			u := ParseUA(c.UA, nil)
			hintsIgnored.n++
			hintsIgnored.all += btoi(u.Browser == c.Browser && u.OS == c.OS && u.Device == c.Device)
		}
	}
	for _, r := range []struct {
		name string
		s    score
	}{{"User-Agent only", plain}, {"with Client Hints", hinted}} {
		t.Logf("%-17s %3d people: browser %s, OS %s, device %s, all three %s; flagged as bots: %d",
			r.name, r.s.n, r.s.pct(r.s.browser), r.s.pct(r.s.os), r.s.pct(r.s.device), r.s.pct(r.s.all), r.s.humanFalseBot)
	}
	t.Logf("the Client Hints cases read without their hints: all three %s", hintsIgnored.pct(hintsIgnored.all))
	t.Logf("bots: %d, flagged by the parser %s, with the docs' --bot-patterns %s", bots.n, botsParser.pct(botsParser.botFlagged), bots.pct(bots.botFlagged))

	floor := func(what string, s score, k int, min float64) {
		if got := 100 * float64(k) / float64(s.n); got < min {
			t.Errorf("%s: %.1f%%, below the floor %.0f%%", what, got, min)
		}
	}
	if plain.n+hinted.n < 200 || bots.n < 50 {
		t.Fatalf("the list has %d people and %d bots: want at least 200 and 50", plain.n+hinted.n, bots.n)
	}
	floor("browser", plain, plain.browser, 89)
	floor("OS", plain, plain.os, 82)
	floor("device", plain, plain.device, 69)
	floor("with hints, all three", hinted, hinted.all, 95)
	floor("bots flagged with --bot-patterns", bots, bots.botFlagged, 87)
	if hinted.all <= hintsIgnored.all {
		t.Errorf("Client Hints change nothing: %d right with them, %d without", hinted.all, hintsIgnored.all)
	}
	if n := plain.humanFalseBot + hinted.humanFalseBot; n > 2 {
		t.Errorf("%d people flagged as bots", n)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestClientHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		ua   string
		h    map[string]string
		want UA
	}{
		{"frozen Windows UA with hints", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
			map[string]string{"Sec-CH-UA": `"Not_A Brand";v="8", "Chromium";v="120", "Microsoft Edge";v="120"`, "Sec-CH-UA-Full-Version-List": `"Not_A Brand";v="8.0.0.0", "Chromium";v="120.0.6099.130", "Microsoft Edge";v="120.0.2210.91"`,
				"Sec-CH-UA-Mobile": "?0", "Sec-CH-UA-Platform": `"Windows"`, "Sec-CH-UA-Platform-Version": `"15.0.0"`},
			UA{Browser: "Edge", BrowserVersion: "120.0.2210.91", OS: "Windows", OSVersion: "11", Device: "desktop"}},
		{"low-entropy hints only", "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36",
			map[string]string{"Sec-CH-UA": `"Chromium";v="120", "Google Chrome";v="120", "Not?A_Brand";v="99"`, "Sec-CH-UA-Mobile": "?1", "Sec-CH-UA-Platform": `"Android"`},
			UA{Browser: "Chrome", BrowserVersion: "120", OS: "Android", OSVersion: "10", Device: "mobile"}},
		{"no hints", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15", nil,
			UA{Browser: "Safari", BrowserVersion: "17.1", OS: "macOS", OSVersion: "10.15.7", Device: "desktop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := uaCase{Headers: tc.h}
			if got := ParseUA(tc.ua, c.header()); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUACacheBounded(t *testing.T) {
	c := newUACache(2)
	c.put("a", parsed{fields: []byte("A")})
	c.put("b", parsed{fields: []byte("B")})
	c.get("a") // a is now the most recent
	c.put("c", parsed{fields: []byte("C")})
	if _, ok := c.get("b"); ok {
		t.Error("b, the least recently used, is still there")
	}
	for _, k := range []string{"a", "c"} {
		if u, ok := c.get(k); !ok || string(u.fields) != string(k[0]-'a'+'A') {
			t.Errorf("%s: got %+v, %v", k, u, ok)
		}
	}
	if n := c.l.Len(); n != 2 || len(c.m) != 2 {
		t.Errorf("%d entries, %d keys: want 2", n, len(c.m))
	}
}

// TestUACacheKeyBounded: a User-Agent is cut as the record keeps it
// before it is parsed or cached, and a request with an overlong hint is
// parsed but not cached, so that the cache's memory stays bounded.
func TestUACacheKeyBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ParseUA = true
	e, err := New(cfg, slogDiscard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := request("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0 " + strings.Repeat("x", 10_000))
	e.Request(r, "")
	r.Header.Set("Sec-CH-UA", strings.Repeat("y", 1000))
	e.Request(r, "")
	if n := len(e.cache.m); n != 1 {
		t.Fatalf("%d entries, want 1 (the overlong hint's not kept)", n)
	}
	for k := range e.cache.m {
		if len(k) > 512 {
			t.Errorf("a key of %d bytes", len(k))
		}
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
