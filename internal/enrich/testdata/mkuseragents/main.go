// Command mkuseragents writes ../useragents.jsonl, the list TestUAAccuracy
// reads, from two registry packages, run by hand:
//
//	cd internal/enrich/testdata/mkuseragents && go run . >../useragents.jsonl
//
// The User-Agents are ua-parser-js@0.7.28's test strings (npm, MIT: phones,
// tablets, TVs, consoles, many browsers) and a sample of the strings in
// github.com/ua-parser/uap-go's "uas" file (Go module proxy, Apache-2.0:
// desktops and bots). The browser and OS families are what uap-go's parser
// (the ua-parser/uap-core regexes it embeds) answers, named as inlet's
// ParseUA names them; a bot is what uap-core calls device "Spider"; the
// device type comes from ua-parser-js's expected type where it has one,
// else from the rules of deviceType. The Client Hints cases are written
// here (hinted), their values ours, in the format of the User-Agent Client
// Hints spec. The pick is deterministic: the same inputs give the same
// list.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ua-parser/uap-go/uaparser"
)

const uaParserJS = "ua-parser-js@0.7.28"

type line struct {
	UA      string            `json:"ua"`
	Headers map[string]string `json:"headers,omitempty"`
	Browser string            `json:"browser,omitempty"`
	OS      string            `json:"os,omitempty"`
	Device  string            `json:"device"`
	Bot     bool              `json:"bot"`
	src     string
}

// uap-core's families as ParseUA names them; a family not here is left out
// of the list (a browser or OS inlet does not name).
var (
	browsers = map[string]string{
		"Chrome": "Chrome", "Chrome Mobile": "Chrome", "Chrome Mobile iOS": "Chrome", "Chrome Mobile WebView": "Chrome", "HeadlessChrome": "Chrome",
		"Firefox": "Firefox", "Firefox Mobile": "Firefox", "Firefox iOS": "Firefox", "Firefox Beta": "Firefox",
		"Safari": "Safari", "Mobile Safari": "Safari", "Mobile Safari UI/WKWebView": "Safari",
		"IE": "Internet Explorer", "IE Mobile": "Internet Explorer",
		"Edge": "Edge", "Edge Mobile": "Edge",
		"Opera": "Opera", "Opera Mobile": "Opera", "Opera Mini": "Opera Mini",
		"Samsung Internet": "Samsung Internet", "Vivaldi": "Vivaldi",
		"Facebook": "Facebook App", "Instagram": "Instagram App",
	}
	oses = map[string]string{
		"Windows": "Windows", "Mac OS X": "macOS", "iOS": "iOS", "Android": "Android", "Linux": "Linux", "Ubuntu": "Linux",
		"Fedora": "Linux", "Debian": "Linux", "Chrome OS": "ChromeOS", "Windows Phone": "Windows Phone", "FreeBSD": "FreeBSD",
	}
)

// httpLibraries are uap-core's families of HTTP clients and libraries,
// which inlet counts as bots (a script, not a person) though uap-core's
// device is not "Spider".
var httpLibraries = map[string]bool{
	"curl": true, "libcurl-agent": true, "PycURL": true, "Wget": true, "libwww-perl": true, "Java": true,
	"Python-urllib": true, "Python Requests": true, "okhttp": true, "Go-http-client": true, "Apache-HttpClient": true,
}

// automationRE are the programs, not people, that uap-core names as
// browsers (read one by one). HotJava, above, was Sun's browser.
var automationRE = regexp.MustCompile(`HeadlessChrome|MSNBOT|Validator|Feedable`)

var (
	tabletRE = regexp.MustCompile(`iPad|Tablet|Kindle|Silk/|PlayBook|Nexus (7|9|10)\b`)
	mobileRE = regexp.MustCompile(`iPhone|iPod|Mobi|Windows Phone|Windows CE|BlackBerry|Opera Mini|Symbian|Nokia|Fennec`)
	otherRE  = regexp.MustCompile(`(?i)smart-?tv|hbbtv|web0s|netcast|tizen.*tv|playstation|xbox|nintendo|crkey|appletv|roku`)
)

// deviceType labels a person's User-Agent: "" (a TV or console: none of
// ParseUA's three), tablet (an iPad, a tablet token, an Android without
// "Mobile"), mobile (a phone's token, Windows CE, Fennec), desktop
// (Windows, macOS, Linux, ChromeOS, FreeBSD), or false when no rule
// applies. The first rule that matches wins.
func deviceType(ua, os string) (string, bool) {
	switch {
	case otherRE.MatchString(ua):
		return "", true
	case tabletRE.MatchString(strings.ReplaceAll(ua, "Tablet PC", "")): // Windows' "Tablet PC 2.0": a touch screen, a PC
		return "tablet", true
	case os == "Android" && !strings.Contains(ua, "Mobi"): // "Mobile", Opera's "Mobi"
		return "tablet", true
	case mobileRE.MatchString(ua):
		return "mobile", true
	case os == "Windows" || os == "macOS" || os == "Linux" || os == "ChromeOS" || os == "FreeBSD":
		return "desktop", true
	}
	return "", false
}

func main() {
	log.SetFlags(0)
	p := uaparser.NewFromSaved()
	var people, bots []line
	seen := map[string]bool{}
	add := func(ua, jsType, src string) {
		ua = strings.TrimSpace(ua)
		if ua == "" || seen[ua] || len(ua) > 512 {
			return
		}
		seen[ua] = true
		c := p.Parse(ua)
		if c.Device.Family == "Spider" || httpLibraries[c.UserAgent.Family] && !strings.HasPrefix(ua, "HotJava") || automationRE.MatchString(ua) {
			bots = append(bots, line{UA: ua, Bot: true, src: c.UserAgent.Family})
			return
		}
		b, ok1 := browsers[c.UserAgent.Family]
		o, ok2 := oses[c.Os.Family]
		if !ok1 || !ok2 {
			return
		}
		d, ok := deviceType(ua, o)
		switch jsType {
		case "mobile", "tablet":
			d, ok = jsType, true
		case "smarttv", "console":
			d, ok = "", true
		}
		if ok {
			people = append(people, line{UA: ua, Browser: b, OS: o, Device: d, src: src})
		}
	}

	for _, ua := range uaParserJSCases() {
		add(ua[0], ua[1], "ua-parser-js")
	}
	for _, ua := range uasLines() {
		add(ua, "", "uas")
	}

	// People: at most 20 of each browser, OS and device, taken in an order
	// fixed by a hash of the string; bots: one of each bot family (three
	// of each HTTP library), 80.
	byHash := func(a, b line) int { return cmp.Compare(hash(a.UA), hash(b.UA)) }
	slices.SortStableFunc(people, byHash)
	slices.SortStableFunc(bots, byHash)
	var out []line
	per := map[string]int{}
	for _, l := range people {
		k := l.Browser + "/" + l.OS + "/" + l.Device
		if per[k] < 20 {
			per[k]++
			out = append(out, l)
		}
	}
	fam := map[string]int{}
	nb := 0
	for _, lib := range []bool{true, false} { // the HTTP libraries first
		for _, l := range bots {
			max := 1
			if lib {
				max = 3
			}
			if httpLibraries[l.src] == lib && fam[l.src] < max && nb < 80 {
				fam[l.src]++
				nb++
				out = append(out, l)
			}
		}
	}
	out = append(out, hinted()...)
	w := bufio.NewWriter(os.Stdout)
	for _, l := range out {
		b, err := json.Marshal(l)
		if err != nil {
			log.Fatal(err)
		}
		w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}
	log.Printf("%d people from the packages, %d bots, %d with Client Hints", len(out)-nb-len(hinted()), nb, len(hinted()))
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// uaParserJSCases are the User-Agents of ua-parser-js's test files, with
// the device type its device tests expect ("" elsewhere).
func uaParserJSCases() [][2]string {
	dir, err := os.MkdirTemp("", "mkuseragents")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, args := range [][]string{{"npm", "pack", "--silent", uaParserJS}, {"sh", "-c", "tar xzf ua-parser-js-*.tgz"}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Stderr = dir, os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("%v: %v", args, err)
		}
	}
	var out [][2]string
	for _, f := range []string{"device", "browser", "os"} {
		b, err := os.ReadFile(filepath.Join(dir, "package", "test", f+"-test.json"))
		if err != nil {
			log.Fatal(err)
		}
		var cs []struct {
			UA     string `json:"ua"`
			Expect struct {
				Type string `json:"type"`
			} `json:"expect"`
		}
		if err := json.Unmarshal(b, &cs); err != nil {
			log.Fatalf("%s: %v", f, err)
		}
		for _, c := range cs {
			out = append(out, [2]string{c.UA, c.Expect.Type})
		}
	}
	return out
}

// uasLines are the lines of uap-go's "uas" file, from the module cache.
func uasLines() []string {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ua-parser/uap-go").Output()
	if err != nil {
		log.Fatalf("go list: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "uas"))
	if err != nil {
		log.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

var fullVersion = regexp.MustCompile(`v="(\d+)"`)

// hinted are User-Agents as Chromium browsers send them since the
// User-Agent reduction (frozen OS version, "K" for the Android model,
// minor versions 0), with Client Hints in the format of the spec
// (https://wicg.github.io/ua-client-hints/): the browser, OS and device
// they stand for are the expected answers. The values are ours.
func hinted() []line {
	const (
		win     = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s"
		mac     = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s"
		linux   = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s"
		cros    = "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s"
		phone   = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Mobile Safari/537.36%s"
		tablet  = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s"
		desktop = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0.0.0 Safari/537.36%s" // an Android tablet asking for the desktop site
	)
	type brand struct{ name, suffix string } // a brand and the token it adds to the User-Agent
	brands := map[string]brand{
		"Chrome": {"Google Chrome", ""}, "Edge": {"Microsoft Edge", " Edg/%d.0.0.0"}, "Opera": {"Opera", " OPR/%d.0.0.0"},
		"Brave": {"Brave", ""}, "Samsung Internet": {"Samsung Internet", ""}, "Vivaldi": {"Vivaldi", ""},
	}
	grease := []string{`"Not_A Brand";v="8"`, `"Not A(Brand";v="99"`, `"Not/A)Brand";v="24"`, `"Not)A;Brand";v="99"`}
	type c struct {
		format, browser, os, platform, platformVersion, mobile, device string
		major                                                          int
	}
	cs := []c{
		{win, "Chrome", "Windows", "Windows", "15.0.0", "?0", "desktop", 120},
		{win, "Chrome", "Windows", "Windows", "10.0.0", "?0", "desktop", 118},
		{win, "Edge", "Windows", "Windows", "19.0.0", "?0", "desktop", 131},
		{win, "Opera", "Windows", "Windows", "15.0.0", "?0", "desktop", 116},
		{win, "Brave", "Windows", "Windows", "15.0.0", "?0", "desktop", 124},
		{win, "Vivaldi", "Windows", "Windows", "", "?0", "desktop", 126},
		{mac, "Chrome", "macOS", "macOS", "14.2.1", "?0", "desktop", 121},
		{mac, "Edge", "macOS", "macOS", "", "?0", "desktop", 122},
		{mac, "Brave", "macOS", "macOS", "13.6.0", "?0", "desktop", 119},
		{linux, "Chrome", "Linux", "Linux", "", "?0", "desktop", 125},
		{linux, "Brave", "Linux", "Linux", "6.5.0", "?0", "desktop", 127},
		{cros, "Chrome", "ChromeOS", "Chrome OS", "14541.0.0", "?0", "desktop", 123},
		{phone, "Chrome", "Android", "Android", "14.0.0", "?1", "mobile", 120},
		{phone, "Chrome", "Android", "Android", "", "?1", "mobile", 131},
		{phone, "Samsung Internet", "Android", "Android", "13.0.0", "?1", "mobile", 117},
		{phone, "Edge", "Android", "Android", "12.0.0", "?1", "mobile", 128},
		{phone, "Opera", "Android", "Android", "", "?1", "mobile", 121},
		{phone, "Brave", "Android", "Android", "14.0.0", "?1", "mobile", 130},
		{tablet, "Chrome", "Android", "Android", "13.0.0", "?0", "tablet", 122},
		{tablet, "Chrome", "Android", "Android", "", "?0", "tablet", 126},
		{tablet, "Samsung Internet", "Android", "Android", "14.0.0", "?0", "tablet", 123},
		{tablet, "Edge", "Android", "Android", "", "?0", "tablet", 129},
		{desktop, "Chrome", "Android", "Android", "13.0.0", "?0", "tablet", 124},
		{desktop, "Samsung Internet", "Android", "Android", "", "?0", "tablet", 125},
	}
	var out []line
	for i, c := range cs {
		b := brands[c.browser]
		suffix := b.suffix
		if strings.Contains(suffix, "%d") {
			suffix = fmt.Sprintf(suffix, c.major)
		}
		list := fmt.Sprintf(`%s, "Chromium";v="%d", "%s";v="%d"`, grease[i%len(grease)], c.major, b.name, c.major)
		if i%2 == 1 { // the order of the brands varies, as the spec asks
			list = fmt.Sprintf(`"Chromium";v="%d", %s, "%s";v="%d"`, c.major, grease[i%len(grease)], b.name, c.major)
		}
		h := map[string]string{"Sec-CH-UA": list, "Sec-CH-UA-Mobile": c.mobile, "Sec-CH-UA-Platform": `"` + c.platform + `"`}
		if c.platformVersion != "" {
			h["Sec-CH-UA-Platform-Version"] = `"` + c.platformVersion + `"`
			h["Sec-CH-UA-Full-Version-List"] = fullVersion.ReplaceAllString(list, `v="$1.0.6099.71"`)
		}
		out = append(out, line{UA: fmt.Sprintf(c.format, c.major, suffix), Headers: h, Browser: c.browser, OS: c.os, Device: c.device})
	}
	return out
}
