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
	"sync/atomic"
	"time"

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
	// retryAfter, when positive, is the Retry-After to send, in seconds
	// (a client over its rate), instead of the configured one.
	retryAfter int
	// challenge is the WWW-Authenticate of a 401; "" for none.
	challenge string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...), offset: -1}
}

// clip is s, or, for an answer quoting a request's header or query pair,
// its first event.MaxQuoteBytes bytes and "…".
func clip(s string) string {
	if len(s) <= event.MaxQuoteBytes {
		return s
	}
	return event.Prefix(s, event.MaxQuoteBytes) + "…"
}

// format picks the body layout from Content-Type. sendBeacon sends strings
// as text/plain, which is read as JSON.
func format(r *http.Request, single bool) (event.Format, *httpError) {
	ct := r.Header.Get("Content-Type")
	mt := ""
	switch ct {
	case "", "application/json", "text/plain", "application/x-ndjson":
		mt = ct // what clients send, without parameters: no parse (it allocates)
	default:
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %q cannot be parsed: %v", clip(ct), err)
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
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %s: /v1/track takes one JSON event; send NDJSON to /v1/batch", clip(mt))
		}
		return event.FormatNDJSON, nil
	}
	if mt == "application/x-www-form-urlencoded" {
		// Not read as JSON: a form's fields are not an event. The usual
		// sender is curl -d without -H.
		return 0, errorf(http.StatusUnsupportedMediaType,
			"Content-Type %s (what curl -d sends unless told otherwise) is not supported: send application/json (curl -H 'Content-Type: application/json'), application/x-ndjson or text/plain", mt)
	}
	return 0, errorf(http.StatusUnsupportedMediaType,
		"Content-Type %s is not supported: send application/json, application/x-ndjson or text/plain", clip(mt))
}

// minBuf is the smallest body buffer; bufPools[i] holds buffers of
// capacity minBuf<<i (*[]byte), up to 1 MiB. Larger ones are not kept.
// Gain: 10% less CPU and 4 KB per request (BenchmarkIngest -cpu 1, 2026-12-05).
const minBuf = 4 << 10

var bufPools [9]sync.Pool

// bufClass is the index of the smallest class of at least n bytes.
func bufClass(n int64) int {
	c := 0
	for int64(minBuf)<<c < n {
		c++
	}
	return c
}

// getBuf returns an empty buffer of at least n bytes.
func getBuf(n int64) []byte {
	c := bufClass(n)
	if c >= len(bufPools) {
		return make([]byte, 0, n)
	}
	if h, ok := bufPools[c].Get().(*[]byte); ok {
		b := (*h)[:0]
		*h = nil
		holders.Put(h)
		return b
	}
	return make([]byte, 0, minBuf<<c)
}

// putBuf gives b back for reuse; b must not be used afterwards.
func putBuf(b []byte) {
	if c := bufClass(int64(cap(b))); c < len(bufPools) && cap(b) == minBuf<<c {
		h, _ := holders.Get().(*[]byte)
		if h == nil {
			h = new([]byte)
		}
		*h = b
		bufPools[c].Put(h)
	}
}

// holders are the empty *[]byte that carry buffers in bufPools, kept so
// that putBuf does not allocate one per buffer.
var holders sync.Pool

// gzipPool keeps *gzip.Reader. Gain: a quarter less time and 38 KB per gzipped request of 10 events (-cpu 1, 2026-12-05).
var gzipPool sync.Pool

// maxZstdWindow is the largest zstd window inlet decodes (a decoder holds
// its window in memory): larger ones are refused 413, like any other
// decompression bomb.
const maxZstdWindow = 8 << 20

// newZstdPool is a pool of zstd decoders that decode at most maxDecoded
// bytes, in a window of at most maxZstdWindow.
// Gain: a third less time and 19 allocations per zstd request of 10 events (-cpu 1, 2026-12-05).
func newZstdPool(maxDecoded int64) *sync.Pool {
	window := max(min(maxZstdWindow, maxDecoded), zstd.MinWindowSize)
	return &sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(uint64(window)),
			zstd.WithDecoderMaxMemory(uint64(max(maxDecoded, window))))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	}}
}

// readBody reads the request body, within the configured limits, and
// decompresses it; the caller returns the body to the pool with putBuf when
// done with every slice of it.
//
// A compressed body is read whole, as sent, before it is decompressed (from
// memory, at CPU speed): a stalled upload holds what it sent, never what that
// inflates to. No byte for BodyIdleTimeout ends the body (408). Every buffer
// is charged to the server's budget, and to its connection's share of it,
// through hold; the caller releases hold when done. The header was
// checked first (bodyHeaderError).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, hold *membudget.Hold) (body []byte, herr *httpError) {
	enc := contentEncoding(r)
	var src io.Reader = http.MaxBytesReader(rootWriter(w), r.Body, s.cfg.MaxBodyBytes)
	if s.cfg.BodyIdleTimeout > 0 {
		idle := watchIdle(w, src, s.cfg.BodyIdleTimeout)
		defer idle.stop()
		src = idle
	}
	sent, err := readAll(src, s.cfg.MaxBodyBytes, r.ContentLength, hold)
	if err != nil {
		return nil, s.bodyReadError(err, "")
	}
	if enc == "" || enc == "identity" {
		return sent, nil
	}
	defer putBuf(sent)
	// Decompression runs at CPU speed: at most one per CPU at a time, so
	// that the decoders' own memory (a zstd window, up to 8 MiB) is bounded
	// by the CPUs, not by the requests in flight.
	select {
	case s.inflate <- struct{}{}:
		defer func() { <-s.inflate }()
	case <-r.Context().Done():
		return nil, errorf(http.StatusServiceUnavailable, "client went away")
	}
	var dec io.Reader
	switch enc {
	case "gzip", "x-gzip":
		zr, _ := gzipPool.Get().(*gzip.Reader)
		if zr == nil {
			zr, err = gzip.NewReader(bytes.NewReader(sent))
		} else {
			err = zr.Reset(bytes.NewReader(sent))
		}
		if err != nil {
			return nil, s.bodyReadError(err, "gzip")
		}
		defer gzipPool.Put(zr)
		dec = zr
	case "zstd":
		zr := s.zstd.Get().(*zstd.Decoder)
		if err := zr.Reset(bytes.NewReader(sent)); err != nil {
			return nil, s.bodyReadError(err, "zstd")
		}
		defer func() { _ = zr.Reset(nil); s.zstd.Put(zr) }()
		dec = zr
	}
	body, err = readAll(dec, s.cfg.MaxDecompressedBytes, -1, hold)
	if errors.Is(err, errTooLarge) {
		err = errDecompressedTooLarge
	}
	if err != nil {
		return nil, s.bodyReadError(err, enc)
	}
	hold.Drop(int64(cap(sent))) // put back by the deferred putBuf
	return body, nil
}

// contentEncoding is r's Content-Encoding, as readBody compares it: its
// field lines joined, as RFC 9110 reads several (two lines of gzip are a
// body gzipped twice, which is refused, not one of them applied).
func contentEncoding(r *http.Request) string {
	return strings.ToLower(strings.TrimSpace(strings.Join(r.Header.Values("Content-Encoding"), ", ")))
}

// bodyHeaderError refuses a body by its header: an announced length over
// MaxBodyBytes (413), a Content-Encoding readBody does not decode (415).
func (s *Server) bodyHeaderError(r *http.Request) *httpError {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return errorf(http.StatusRequestEntityTooLarge, "body is %d bytes; the limit is %d", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	switch enc := contentEncoding(r); enc {
	case "", "identity", "gzip", "x-gzip", "zstd":
		return nil
	default:
		return errorf(http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported: send gzip, zstd or none", clip(enc))
	}
}

// maxPresize is the most readAll takes at once for a body's announced
// length: a body up to it is read into one buffer of its size; a larger one
// grows from there as it comes, so that a stalled upload holds about what
// it sent, not what it announced.
const maxPresize = 64 << 10

// readAll reads src to its end into a pooled buffer, failing with
// errTooLarge past limit bytes. want is the length the body announced
// (Content-Length), or -1: the buffer starts at that size, up to
// maxPresize, else at minBuf, and doubles as it fills, never past limit.
// What hold is charged is the buffer's capacity, so that the budget bounds
// the memory, not only the bytes.
func readAll(src io.Reader, limit, want int64, hold *membudget.Hold) ([]byte, error) {
	first := int64(minBuf)
	if want > 0 {
		first = min(want, maxPresize)
	}
	b := getBuf(min(first, limit))
	if err := hold.Take(int64(cap(b))); err != nil {
		putBuf(b)
		return nil, err
	}
	for {
		room := min(int64(cap(b)), limit)
		if int64(len(b)) < room {
			n, err := src.Read(b[len(b):room])
			b = b[:len(b)+n]
			if err == io.EOF {
				return b, nil
			}
			if err != nil {
				putBuf(b)
				return nil, err
			}
			continue
		}
		var more []byte // a byte read to tell the end from more to come
		if room == limit || int64(len(b)) == want {
			var one [1]byte
			n, err := io.ReadFull(src, one[:])
			switch {
			case n == 0 && err == io.EOF:
				return b, nil
			case n == 1 && room == limit:
				err = errTooLarge
			case n == 1:
				more = one[:]
				err = nil
			}
			if err != nil {
				putBuf(b)
				return nil, err
			}
		}
		nb := getBuf(min(2*int64(cap(b)), limit))
		if err := hold.Take(int64(cap(nb) - cap(b))); err != nil {
			putBuf(nb)
			putBuf(b)
			return nil, err
		}
		nb = append(append(nb, b...), more...)
		putBuf(b)
		b = nb
	}
}

// idleReader ends a body that sends no byte for d: a watchdog moves the
// request's read deadline to now, so that the pending Read fails, and that
// failure becomes errBodyIdle. It leaves the server's read timeout alone
// otherwise.
//
// Read only notes when a byte came; the timer, when it goes off, sets
// itself again for the rest of d if one came since. So nothing but the
// timer's own callback sets it after watchIdle, and stop, under mu with
// the callback, knows whether one can still run.
type idleReader struct {
	r     io.Reader
	t     *time.Timer
	mu    sync.Mutex
	w     http.ResponseWriter // under mu
	done  bool                // under mu: stop ran; the callback does nothing
	d     atomic.Int64        // time.Duration
	last  atomic.Int64        // when the last byte came, in ns since base
	fired atomic.Bool
	whole bool // the body was read to its end
}

var idleBase = time.Now()

func watchIdle(w http.ResponseWriter, r io.Reader, d time.Duration) *idleReader {
	ir := &idleReader{r: r, w: w}
	ir.d.Store(int64(d))
	ir.last.Store(int64(time.Since(idleBase)))
	ir.mu.Lock() // the callback reads t under mu
	ir.t = time.AfterFunc(d, ir.fire)
	ir.mu.Unlock()
	return ir
}

func (ir *idleReader) fire() {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if ir.done {
		return
	}
	d := time.Duration(ir.d.Load())
	if quiet := time.Since(idleBase) - time.Duration(ir.last.Load()); quiet < d {
		ir.t.Reset(d - quiet) // a byte came since: not idle yet
		return
	}
	ir.fired.Store(true)
	_ = http.NewResponseController(ir.w).SetReadDeadline(time.Now()) // not supported: only the read timeout applies
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if err == io.EOF {
		ir.whole = true
	}
	if n > 0 {
		ir.last.Store(int64(time.Since(idleBase)))
	}
	if err != nil && err != io.EOF && ir.fired.Load() {
		err = fmt.Errorf("%w: %w", errBodyIdle, err)
	}
	return n, err
}

// stop ends the watchdog. Had it fired after the last byte came, the read
// deadline is cleared again: the body is read, only the answer is left.
// (After a failed body it stays: net/http then gives up the rest of the
// body and closes the connection, rather than wait for it.)
func (ir *idleReader) stop() {
	ir.mu.Lock()
	ir.done = true
	if !ir.t.Stop() && ir.fired.Load() && ir.whole {
		_ = http.NewResponseController(ir.w).SetReadDeadline(time.Time{})
	}
	ir.mu.Unlock()
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
	errTooLarge             = errors.New("body too large")
	errDecompressedTooLarge = errors.New("decompressed too large")
	errBodyIdle             = errors.New("body idle")
)

func (s *Server) bodyReadError(err error, enc string) *httpError {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "body exceeds %d bytes, the limit", mbe.Limit)
	case errors.Is(err, membudget.ErrExhausted):
		return &httpError{status: http.StatusServiceUnavailable, offset: -1, retry: true,
			msg: "inlet holds too many request bodies in memory; retry later"}
	case errors.Is(err, membudget.ErrConnShare):
		return &httpError{status: http.StatusTooManyRequests, offset: -1, retry: true,
			msg: fmt.Sprintf("the requests of this connection hold %d bytes of bodies in memory, the most one connection may; retry later", s.budget.PerConn())}
	case errors.Is(err, errBodyIdle):
		return errorf(http.StatusRequestTimeout, "no byte of the body received for %s (the body idle timeout)", s.cfg.BodyIdleTimeout)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errorf(http.StatusRequestTimeout, "body not received within the read timeout")
	case errors.Is(err, errDecompressedTooLarge), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return errorf(http.StatusRequestEntityTooLarge, "decompressed body exceeds %d bytes, the limit", s.cfg.MaxDecompressedBytes)
	case errors.Is(err, zstd.ErrWindowSizeExceeded):
		return errorf(http.StatusRequestEntityTooLarge, "the zstd body needs a window larger than %d bytes, the limit", min(maxZstdWindow, s.cfg.MaxDecompressedBytes))
	case enc == "gzip" || enc == "x-gzip" || enc == "zstd":
		return errorf(http.StatusBadRequest, "body is not valid %s data: %v", enc, err)
	}
	return errorf(http.StatusBadRequest, "reading body: %v", err)
}
