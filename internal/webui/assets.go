package webui

import (
	"crypto/sha256"
	"encoding/base64"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/inlet-dev/inlet/web"
)

// asset is one embedded file with its ETag, computed once.
type asset struct {
	body  []byte
	etag  string
	ctype string
}

func loadAsset(name string) asset {
	b, err := fs.ReadFile(web.FS, name)
	if err != nil {
		panic("webui: embedded asset missing: " + name) // a build error, caught by every test
	}
	sum := sha256.Sum256(b)
	ct := mime.TypeByExtension(path.Ext(name))
	if strings.HasSuffix(name, ".js") || ct == "" {
		ct = map[string]string{".js": "text/javascript; charset=utf-8", ".ts": "text/plain; charset=utf-8"}[path.Ext(name)]
	}
	if strings.HasSuffix(name, ".d.ts") {
		ct = "text/plain; charset=utf-8"
	}
	return asset{body: b, etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`, ctype: ct}
}

// serve answers a with its ETag (304 on a matching If-None-Match) and
// cacheControl. HEAD gets the headers only.
func (a asset) serve(w http.ResponseWriter, r *http.Request, cacheControl string) {
	h := w.Header()
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", cacheControl)
	h.Set("Content-Type", a.ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	if etagMatch(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// ServeContent handles Range and HEAD; the zero modtime leaves
	// Last-Modified out, the ETag is the validator.
	http.ServeContent(w, r, "", zeroTime, strings.NewReader(string(a.body)))
}

// etagMatch reports whether an If-None-Match header matches etag (weak
// comparison, as RFC 9110 asks for If-None-Match).
func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// sdkCache lets browsers and CDNs keep inlet.js for an hour and revalidate
// it with the ETag after: short enough that a new release reaches pages
// the same day, without a versioned URL in every snippet.
const sdkCache = "public, max-age=3600, stale-while-revalidate=86400"

// pageCache is for the live page's and the example's files: revalidated
// every time (cheap: a 304), so an upgrade shows at once.
const pageCache = "no-cache"

// staticDir serves the embedded files under dir at prefix, each with its
// ETag; "/" is index.html.
func staticDir(dir, prefix string) http.Handler {
	files := map[string]asset{}
	_ = fs.WalkDir(web.FS, dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files[strings.TrimPrefix(p, dir+"/")] = loadAsset(p)
		}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, prefix)
		if name == "" || strings.HasSuffix(name, "/") {
			name += "index.html"
		}
		a, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		a.serve(w, r, pageCache)
	})
}
