package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/inlet-dev/inlet/internal/membudget"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/inlet-dev/inlet/internal/event"
)

// httpError is a rejection of the whole request, mapped to a status here at
// the edge.
type httpError struct {
	status int
	msg    string
	offset int64 // byte offset in the (decompressed) body, or -1
	retry  bool  // send Retry-After
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...), offset: -1}
}

// format picks the body layout from Content-Type. sendBeacon sends strings
// as text/plain, which is read as JSON.
func format(r *http.Request, single bool) (event.Format, *httpError) {
	ct := r.Header.Get("Content-Type")
	mt := ""
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %q cannot be parsed: %v", ct, err)
		}
	}
	switch mt {
	case "", "application/json", "text/plain":
		if single {
			return event.FormatSingle, nil
		}
		return event.FormatJSON, nil
	case "application/x-ndjson", "application/jsonl", "application/x-jsonlines", "application/ndjson":
		if single {
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %s: /v1/track takes one JSON event; send NDJSON to /v1/batch", mt)
		}
		return event.FormatNDJSON, nil
	}
	return 0, errorf(http.StatusUnsupportedMediaType,
		"Content-Type %s is not supported: send application/json, application/x-ndjson or text/plain", mt)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

var gzipPool sync.Pool // *gzip.Reader

var zstdPool = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(8<<20))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}}

// readBody reads the request body into a pooled buffer, decompressing it,
// within the configured limits. The caller returns buf to bufPool when done
// with every slice of it.
// The bytes read are charged to the server's budget and added to *taken;
// the caller releases them when done.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, taken *int64) (buf *bytes.Buffer, herr *httpError) {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, errorf(http.StatusRequestEntityTooLarge, "body is %d bytes; the limit is %d", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	body := http.MaxBytesReader(rootWriter(w), r.Body, s.cfg.MaxBodyBytes)
	var src io.Reader = body
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, _ := gzipPool.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(body)
		} else {
			err = zr.Reset(body)
		}
		if err != nil {
			return nil, s.bodyReadError(err, "gzip")
		}
		defer gzipPool.Put(zr)
		src = zr
	case "zstd":
		zr := zstdPool.Get().(*zstd.Decoder)
		if err := zr.Reset(body); err != nil {
			return nil, s.bodyReadError(err, "zstd")
		}
		defer func() { _ = zr.Reset(nil); zstdPool.Put(zr) }()
		src = zr
	default:
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported: send gzip, zstd or none", enc)
	}
	buf = bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	max := s.cfg.MaxDecompressedBytes
	if enc == "" || enc == "identity" {
		max = s.cfg.MaxBodyBytes
	}
	br := &membudget.Reader{R: io.LimitReader(src, max+1), B: s.budget}
	n, err := buf.ReadFrom(br)
	*taken += br.Taken
	if err == nil && n > max {
		err = errDecompressedTooLarge
	}
	if err != nil {
		putBuf(buf)
		return nil, s.bodyReadError(err, enc)
	}
	return buf, nil
}

// rootWriter is the ResponseWriter net/http gave the handler, under every
// wrapper with an Unwrap method. http.MaxBytesReader needs it: past the limit
// it tells the server to close the connection after the answer, rather than
// read the rest of the body, and it cannot through a wrapper.
func rootWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

var (
	errDecompressedTooLarge = errors.New("decompressed too large")
)

func (s *Server) bodyReadError(err error, enc string) *httpError {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit", mbe.Limit)
	case errors.Is(err, membudget.ErrExhausted):
		return &httpError{status: http.StatusServiceUnavailable, offset: -1, retry: true,
			msg: "inlet holds too many request bodies in memory; retry later"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errorf(http.StatusRequestTimeout, "body not received within the read timeout")
	case errors.Is(err, errDecompressedTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "decompressed body exceeds %d bytes, the limit", s.cfg.MaxDecompressedBytes)
	case enc == "gzip" || enc == "x-gzip" || enc == "zstd":
		return errorf(http.StatusBadRequest, "body is not valid %s data: %v", enc, err)
	}
	return errorf(http.StatusBadRequest, "reading body: %v", err)
}

// putBuf returns a buffer to the pool unless it grew past what is worth keeping.
func putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}
