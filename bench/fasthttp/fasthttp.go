package main

import (
	"context"
	"net"
	"net/http"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/inlet-dev/inlet/internal/event"
)

// serveFastHTTP serves h with fasthttp, with inlet serve's timeouts: the
// body is read by fasthttp before the handler runs, within
// MaxRequestBodySize (a larger one is answered 413 by fasthttp).
func serveFastHTTP(ctx context.Context, ln net.Listener, h *handler) error {
	f := fastHandler{h}
	srv := &fasthttp.Server{
		Handler:               f.serve,
		ReadTimeout:           readTimeout,
		IdleTimeout:           idleTimeout,
		MaxRequestBodySize:    int(h.ing.maxBodyBytes),
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
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
	err := srv.ShutdownWithContext(sctx)
	if serr := <-done; serr != nil && err == nil {
		err = serr
	}
	return err
}

// fastHandler is h as a fasthttp handler.
type fastHandler struct{ h *handler }

func (f fastHandler) serve(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/v1/batch":
	case "/readyz":
		ctx.SetStatusCode(http.StatusOK)
		return
	default:
		ctx.SetStatusCode(http.StatusNotFound)
		return
	}
	if f.h.noop { // fasthttp read the body already
		ctx.SetStatusCode(http.StatusNoContent)
		return
	}
	g := f.h.ing
	ab := answerBufs.Get().(*[]byte)
	defer putAnswerBuf(ab)
	a := f.ingest(ctx, g, (*ab)[:0])
	*ab = a.body
	ctx.SetStatusCode(a.status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetBytesKV(hCacheControl, vNoStore)
	ctx.SetBody(a.body)
}

var (
	ctJSON        = []byte("application/json")
	hCacheControl = []byte("Cache-Control")
	vNoStore      = []byte("no-store")
)

func (fastHandler) ingest(ctx *fasthttp.RequestCtx, g *ingester, dst []byte) answer {
	hd := &ctx.Request.Header
	switch {
	case !ctx.IsPost():
		return answerError(dst, http.StatusMethodNotAllowed, "POST only")
	case !contentTypeOK(string(hd.ContentType())):
		return answerError(dst, http.StatusUnsupportedMediaType, "send application/json")
	case len(hd.ContentEncoding()) != 0:
		return answerError(dst, http.StatusUnsupportedMediaType, "compressed bodies are not measured here")
	}
	var ip string
	if a, ok := netip.AddrFromSlice(ctx.RemoteIP()); ok {
		ip = clientIP(a)
	} else {
		ip = ctx.RemoteAddr().String()
	}
	// The body is ctx's, valid during the handler: serve reads it only
	// during the call, and the records own their bytes.
	return g.serve(dst, ctx.PostBody(), event.Meta{ReceivedAt: g.now(), IP: ip, UA: string(ctx.UserAgent())})
}
