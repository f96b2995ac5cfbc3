package enrich

import (
	"container/list"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/mileusna/useragent"
)

// UA is what a User-Agent (and its Client Hints) tell; "" when unknown.
type UA struct {
	Browser, BrowserVersion string
	OS, OSVersion           string
	Device                  string // desktop, mobile, tablet, or ""
	Bot                     bool
}

// The names ParseUA gives where the parser's differ.
var (
	browserNames = map[string]string{
		useragent.InternetExplorer: "Internet Explorer",
		useragent.MobileSafari:     "Safari",
		useragent.SamsungBrowser:   "Samsung Internet",
		useragent.HeadlessChrome:   "Chrome",
		useragent.OperaTouch:       "Opera",
		useragent.Msie:             "Internet Explorer",
	}
	osNames = map[string]string{useragent.CrOS: "ChromeOS", useragent.WindowsNT: "Windows", useragent.WindowsPhoneOS: "Windows Phone"}
)

// hintHeaders are the Client Hints read, in the cache key's order.
var hintHeaders = [...]string{"Sec-Ch-Ua-Full-Version-List", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform", "Sec-Ch-Ua-Platform-Version"}

// ParseUA parses ua, then lets the Client Hints of h (nil: none) override
// what they tell: the brand and its full version, the platform and its
// version, and whether the device is mobile.
func ParseUA(ua string, h http.Header) UA {
	p := useragent.Parse(ua)
	u := UA{Browser: p.Name, BrowserVersion: version(p.Version), OS: p.OS, OSVersion: version(p.OSVersion), Bot: p.Bot}
	if n, ok := browserNames[u.Browser]; ok {
		u.Browser = n
	}
	if n, ok := osNames[u.OS]; ok {
		u.OS = n
	}
	switch {
	case p.Tablet:
		u.Device = "tablet"
	case p.Mobile:
		u.Device = "mobile"
	case p.Desktop:
		u.Device = "desktop"
	}
	if h != nil {
		u.hints(h)
	}
	return u
}

// hints applies the Client Hints of h to u.
func (u *UA) hints(h http.Header) {
	list := h.Get("Sec-Ch-Ua-Full-Version-List")
	if list == "" {
		list = h.Get("Sec-Ch-Ua")
	}
	if b, v := brand(list); b != "" {
		u.Browser, u.BrowserVersion = b, v
	}
	if pl := unquote(h.Get("Sec-Ch-Ua-Platform")); pl != "" {
		if pl == "Chrome OS" || pl == "Chromium OS" {
			pl = "ChromeOS"
		}
		if pl != u.OS {
			u.OSVersion = ""
		}
		u.OS = pl
		if v := unquote(h.Get("Sec-Ch-Ua-Platform-Version")); v != "" {
			u.OSVersion = platformVersion(pl, v)
		}
	}
	switch h.Get("Sec-Ch-Ua-Mobile") {
	case "?1":
		if u.Device != "tablet" {
			u.Device = "mobile"
		}
	case "?0":
		if u.OS == "Android" {
			u.Device = "tablet" // an Android that says it is not mobile
		} else if u.Device == "" || u.Device == "mobile" {
			u.Device = "desktop"
		}
	}
}

// brandNames are the brands of Sec-CH-UA that name a browser, as ParseUA
// names it. Any other brand but Chromium and the GREASE one is kept as sent.
var brandNames = map[string]string{
	"Google Chrome": "Chrome", "Microsoft Edge": "Edge", "Opera": "Opera", "Opera GX": "Opera", "OperaMobile": "Opera",
	"Samsung Internet": "Samsung Internet", "Brave": "Brave", "Yandex": "Yandex", "YaBrowser": "Yandex", "Vivaldi": "Vivaldi",
}

// brand picks the browser of a Sec-CH-UA list (`"Brand";v="1.2", ...`): a
// named brand before Chromium, and never the GREASE brand ("Not A;Brand").
func brand(list string) (name, version string) {
	var chromium string
	for item := range strings.SplitSeq(list, ",") {
		b, params, _ := strings.Cut(strings.TrimSpace(item), ";")
		b = unquote(b)
		v := ""
		if _, after, ok := strings.Cut(params, "v="); ok {
			v = unquote(after)
		}
		switch {
		case b == "" || strings.Contains(b, "Brand"):
		case b == "Chromium":
			chromium = v
		default:
			if n, ok := brandNames[b]; ok {
				return n, v
			}
			if name == "" {
				name, version = b, v
			}
		}
	}
	if name == "" && chromium != "" {
		return "Chrome", chromium
	}
	return name, version
}

// platformVersion is the OS version of a Sec-CH-UA-Platform-Version: on
// Windows, 13 and up is 11, 1 to 10 is 10 (below, 7 or 8: left as sent).
func platformVersion(platform, v string) string {
	if platform != "Windows" {
		return v
	}
	major, _, _ := strings.Cut(v, ".")
	switch n, err := strconv.Atoi(major); {
	case err != nil:
		return v
	case n >= 13:
		return "11"
	case n >= 1:
		return "10"
	}
	return v
}

// version is v when it is one (it starts with a digit): the parser takes
// "x86_64" for Linux's version.
func version(v string) string {
	if v == "" || v[0] < '0' || v[0] > '9' {
		return ""
	}
	return v
}

func unquote(s string) string { return strings.Trim(strings.TrimSpace(s), `"`) }

// appendUA appends u as the record's "ua_parsed" member (with its comma),
// leaving out what is unknown.
func appendUA(dst []byte, u UA) []byte {
	dst = append(dst, `,"ua_parsed":{`...)
	n := len(dst)
	for _, f := range [...]struct{ k, v string }{
		{"browser", u.Browser}, {"browser_version", u.BrowserVersion},
		{"os", u.OS}, {"os_version", u.OSVersion}, {"device", u.Device},
	} {
		if f.v == "" {
			continue
		}
		if len(dst) > n {
			dst = append(dst, ',')
		}
		dst, _ = jsontext.AppendQuote(append(dst, `"`+f.k+`":`...), f.v)
	}
	return append(dst, '}')
}

// uaCache keeps the last parsed User-Agents, at most size, the least
// recently used dropped first. Safe for concurrent use.
type uaCache struct {
	mu   sync.Mutex
	size int
	m    map[string]*list.Element
	l    list.List // of *uaEntry, most recent first
}

type uaEntry struct {
	key string
	v   parsed
}

// parsed is what the cache keeps of a User-Agent: its "ua_parsed" member
// and whether it is a bot's.
type parsed struct {
	fields []byte
	bot    bool
}

func newUACache(size int) *uaCache {
	return &uaCache{size: size, m: make(map[string]*list.Element, size)}
}

func (c *uaCache) get(key string) (parsed, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return parsed{}, false
	}
	c.l.MoveToFront(e)
	return e.Value.(*uaEntry).v, true
}

func (c *uaCache) put(key string, v parsed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.l.MoveToFront(e)
		return
	}
	if c.l.Len() >= c.size {
		old := c.l.Back()
		c.l.Remove(old)
		delete(c.m, old.Value.(*uaEntry).key)
	}
	c.m[key] = c.l.PushFront(&uaEntry{key, v})
}
