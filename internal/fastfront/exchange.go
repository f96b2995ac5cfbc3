package fastfront

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// exchange is the *http.Request and http.ResponseWriter of a fasthttp
// connection's requests, reused from one to the next (a connection serves
// one request at a time).
type exchange struct {
	r    http.Request
	url  url.URL
	body body
	w    writer
	// text holds the strings of one request's header and target that
	// differ from the previous request's: at most one allocation per
	// request, cut into the header's names and values.
	text  []byte
	slots []string // the header's []string values, cut from one slab
	refs  []headerRef
	// The previous request's header names (those not common), values and
	// target, by position: a client sends much the same header each time.
	keys, vals []string
	target     string
}

// headerRef is one header line: its common name, or the length of its
// name in text, and the length of its value in text; a length of -1 means
// the previous request's string at its position.
type headerRef struct {
	key        string
	klen, vlen int
}

func newExchange(fc *fastConn) *exchange {
	ex := &exchange{}
	// WithContext is the one way to set a Request's context; the copy is
	// made once per connection.
	ex.r = *(&http.Request{}).WithContext(fc.ctx)
	ex.r.RemoteAddr = fc.remote
	ex.r.Header = http.Header{}
	ex.w.h = http.Header{}
	return ex
}

// reset makes ex the request of ctx, whose target is target and whose
// path, one of the fast ones, is path.
func (ex *exchange) reset(ctx *fasthttp.RequestCtx, path string, target []byte) {
	h := &ctx.Request.Header
	r := &ex.r
	clear(r.Header)
	// One string of every header name that is not a common one and of
	// every value, then the target; refs says how to cut it.
	t := ex.text[:0]
	refs := ex.refs[:0]
	for k, v := range h.All() {
		i := len(refs)
		ref := headerRef{key: commonHeader(k), klen: -1, vlen: -1}
		if ref.key == "" && (i >= len(ex.keys) || ex.keys[i] != string(k)) {
			t = append(t, k...)
			ref.klen = len(k)
		}
		if i >= len(ex.vals) || ex.vals[i] != string(v) {
			t = append(t, v...)
			ref.vlen = len(v)
		}
		refs = append(refs, ref)
	}
	sameTarget := ex.target == string(target)
	if !sameTarget {
		t = append(t, target...)
	}
	ex.text, ex.refs = t, refs
	var s string
	if len(t) > 0 {
		s = string(t)
	}
	if cap(ex.slots) < len(refs) {
		ex.slots = make([]string, len(refs))
	}
	slots := ex.slots[:len(refs)]
	ex.keys, ex.vals = grow(ex.keys, len(refs)), grow(ex.vals, len(refs))
	off := 0
	for i, ref := range refs {
		key := ref.key
		if key == "" {
			if ref.klen >= 0 {
				ex.keys[i] = s[off : off+ref.klen]
				off += ref.klen
			}
			key = ex.keys[i]
		} else {
			ex.keys[i] = ""
		}
		if ref.vlen >= 0 {
			ex.vals[i] = s[off : off+ref.vlen]
			off += ref.vlen
		}
		val := ex.vals[i]
		if vs, ok := r.Header[key]; ok {
			r.Header[key] = append(vs, val)
		} else {
			slots[i] = val
			r.Header[key] = slots[i : i+1 : i+1]
		}
	}
	ex.keys, ex.vals = ex.keys[:len(refs)], ex.vals[:len(refs)]
	if !sameTarget {
		ex.target = s[off:]
	}
	rawTarget := ex.target

	r.Method = method(h.Method())
	ex.url = url.URL{Path: path}
	if q := len(path); len(rawTarget) > q && rawTarget[q] == '?' {
		ex.url.RawQuery = rawTarget[q+1:]
	}
	r.URL = &ex.url
	r.RequestURI = rawTarget
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	if !h.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	r.Host = r.Header.Get("Host")
	// As net/http: the host is in r.Host, the framing in TransferEncoding.
	delete(r.Header, "Host")
	delete(r.Header, "Transfer-Encoding")
	r.Close = h.ConnectionClose()
	r.Form, r.PostForm, r.MultipartForm, r.Trailer = nil, nil, nil, nil
	r.TransferEncoding = nil
	switch cl := h.ContentLength(); {
	case cl > 0:
		r.ContentLength = int64(cl)
	case cl == -1: // chunked
		r.ContentLength = -1
		r.TransferEncoding = chunked
	default:
		r.ContentLength = 0
	}
	if r.ContentLength == 0 {
		r.Body = http.NoBody
	} else {
		ex.body.r = ctx.RequestBodyStream()
		r.Body = &ex.body
	}
	ex.w.reset(ctx)
}

// grow is ss with room for n strings at least, its own ones kept.
func grow(ss []string, n int) []string {
	if len(ss) < n {
		ss = append(ss, make([]string, n-len(ss))...)
	}
	return ss[:n]
}

// done lets go of what the request referred to.
func (ex *exchange) done() {
	ex.body.r = nil
	ex.w.ctx = nil
	ex.w.dl.Store(nil)
	if cap(ex.text) > 64<<10 {
		ex.text = nil
	}
}

var chunked = []string{"chunked"}

// commonHeader is the canonical name k spells, when it is one of those
// most requests send; "" otherwise. fasthttp has canonicalized k.
func commonHeader(k []byte) string {
	switch string(k) { // no allocation
	case "Host":
		return "Host"
	case "User-Agent":
		return "User-Agent"
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Content-Encoding":
		return "Content-Encoding"
	case "Accept":
		return "Accept"
	case "Accept-Encoding":
		return "Accept-Encoding"
	case "Accept-Language":
		return "Accept-Language"
	case "Authorization":
		return "Authorization"
	case "Origin":
		return "Origin"
	case "Referer":
		return "Referer"
	case "Connection":
		return "Connection"
	case "Cookie":
		return "Cookie"
	case "X-Forwarded-For":
		return "X-Forwarded-For"
	}
	return ""
}

// method is m as a string: a constant for the common ones.
func method(m []byte) string {
	switch string(m) {
	case http.MethodPost:
		return http.MethodPost
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodOptions:
		return http.MethodOptions
	}
	return string(m)
}

// body is a request's body: fasthttp's stream of it.
type body struct{ r io.Reader }

func (b *body) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

// Close leaves the rest of the body to fasthttp, which reads it out (up to
// a bound, else it closes the connection) before the next request.
func (b *body) Close() error { return nil }

// writer is the http.ResponseWriter of a fast request: it buffers the
// answer in fasthttp's response, written when the handler returns.
type writer struct {
	ctx   *fasthttp.RequestCtx
	h     http.Header
	wrote bool
	// headLength is the Content-Length the handler set on a HEAD answer.
	headLength int
	// dl is ctx for the deadline methods, which a timer of the handler's
	// may call from another goroutine, even after the handler returned
	// (then nil).
	dl atomic.Pointer[fasthttp.RequestCtx]
}

func (w *writer) reset(ctx *fasthttp.RequestCtx) {
	w.ctx = ctx
	w.dl.Store(ctx)
	clear(w.h)
	w.wrote = false
	w.headLength = 0
}

func (w *writer) Header() http.Header { return w.h }

func (w *writer) WriteHeader(code int) {
	if w.wrote || code < 200 { // 1xx: not sent, as the answer is buffered
		return
	}
	w.wrote = true
	rh := &w.ctx.Response.Header
	for k, vs := range w.h {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection":
			// fasthttp frames the answer by its body, but for the length
			// a HEAD answer declares; Connection: close is kept.
			if k == "Connection" && len(vs) > 0 && vs[0] == "close" {
				w.ctx.SetConnectionClose()
			}
			if k == "Content-Length" && len(vs) > 0 && w.ctx.IsHead() {
				if n, err := strconv.Atoi(vs[0]); err == nil && n >= 0 {
					w.headLength = n
				}
			}
			continue
		case "Content-Type":
			if len(vs) > 0 {
				rh.SetContentType(vs[0])
			}
			continue
		}
		for _, v := range vs {
			rh.Add(k, v)
		}
	}
	w.ctx.SetStatusCode(code)
	if code == http.StatusRequestEntityTooLarge {
		// As net/http after http.MaxBytesReader: the client need not
		// send the rest of a body that is too large.
		closeLingering(w.ctx)
	}
}

func (w *writer) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.ctx.Response.AppendBody(b) // not sent to a HEAD request, but counted in Content-Length
	return len(b), nil
}

// finish answers 200 with no body if the handler wrote nothing. The
// answer to a HEAD request says the length of the body it would have had.
func (w *writer) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if _, ok := w.h["Content-Type"]; !ok && len(w.ctx.Response.Body()) > 0 {
		// As net/http: the type of a body its handler did not name.
		w.ctx.Response.Header.SetContentType(http.DetectContentType(w.ctx.Response.Body()))
	}
	if w.ctx.IsHead() {
		if n := max(len(w.ctx.Response.Body()), w.headLength); n > 0 {
			w.ctx.Response.Header.SetContentLength(n)
		}
	}
}

// Flush does nothing: the answer goes out when the handler returns.
func (w *writer) Flush() {}

// SetReadDeadline is for http.ResponseController (the body's idle timeout).
func (w *writer) SetReadDeadline(t time.Time) error {
	ctx := w.dl.Load()
	if ctx == nil {
		return http.ErrNotSupported
	}
	return ctx.SetReadDeadline(t)
}

// SetWriteDeadline is for http.ResponseController.
func (w *writer) SetWriteDeadline(t time.Time) error {
	ctx := w.dl.Load()
	if ctx == nil {
		return http.ErrNotSupported
	}
	return ctx.SetWriteDeadline(t)
}
