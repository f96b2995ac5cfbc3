package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/inlet-dev/inlet/internal/event"
)

// serveNetHTTP serves h with net/http, set as inlet serve sets it.
func serveNetHTTP(ctx context.Context, ln net.Listener, h *handler) error {
	srv := &http.Server{
		Handler:           netHandler{h},
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// netHandler is h as an http.Handler.
type netHandler struct{ h *handler }

var (
	contentTypeJSON = []string{"application/json"}
	cacheNoStore    = []string{"no-store"}
)

func (n netHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/batch":
	case "/readyz":
		w.WriteHeader(http.StatusOK)
		return
	default:
		http.NotFound(w, r)
		return
	}
	if n.h.noop { // cmd/noop's handler
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	g := n.h.ing
	ab := answerBufs.Get().(*[]byte)
	defer putAnswerBuf(ab)
	a := n.serve(r, g, (*ab)[:0])
	*ab = a.body
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func (netHandler) serve(r *http.Request, g *ingester, dst []byte) answer {
	switch {
	case r.Method != http.MethodPost:
		return answerError(dst, http.StatusMethodNotAllowed, "POST only")
	case !contentTypeOK(r.Header.Get("Content-Type")):
		return answerError(dst, http.StatusUnsupportedMediaType, "send application/json")
	case r.Header.Get("Content-Encoding") != "":
		return answerError(dst, http.StatusUnsupportedMediaType, "compressed bodies are not measured here")
	case r.ContentLength > g.maxBodyBytes:
		return answerError(dst, http.StatusRequestEntityTooLarge, "body too large")
	}
	bp, err := readBody(http.MaxBytesReader(nil, r.Body, g.maxBodyBytes), r.ContentLength)
	if err != nil {
		return answerError(dst, http.StatusBadRequest, "reading the body: "+err.Error())
	}
	defer bodyBufs.Put(bp)
	ip := r.RemoteAddr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		ip = clientIP(ap.Addr())
	}
	return g.serve(dst, *bp, event.Meta{ReceivedAt: g.now(), IP: ip, UA: r.UserAgent()})
}

// bodyBufs keeps request body buffers (*[]byte), as ingest's pools do; a
// body is read into one sized by its Content-Length.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// readBody reads src to its end into a pooled buffer of at least want
// bytes; the caller puts the buffer back into bodyBufs.
func readBody(src io.Reader, want int64) (*[]byte, error) {
	bp := bodyBufs.Get().(*[]byte)
	b := (*bp)[:0]
	if want > int64(cap(b)) {
		b = make([]byte, 0, want)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := src.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			*bp = b
			return bp, nil
		}
		if err != nil {
			*bp = b
			bodyBufs.Put(bp)
			return nil, err
		}
	}
}

// answerBufs keeps answer buffers (*[]byte) between requests.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func putAnswerBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		answerBufs.Put(bp)
	}
}
