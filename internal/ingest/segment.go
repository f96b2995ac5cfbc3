package ingest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
)

// call is one events endpoint: inlet's own (/v1/batch, /v1/track, which
// read a message with a "type" as a Segment message) or one of the
// Segment tracking API's.
type call struct {
	name    string // the handler's metrics label and the routes' endpoint
	single  bool   // one message, not a batch
	segment bool   // a Segment-only path: every message is a Segment one
	typ     string // the type the path implies ("": any)
}

var (
	callBatch = &call{name: "batch"}
	callTrack = &call{name: "track", single: true}
)

// segmentCalls are the Segment tracking API's paths beside /v1/batch and
// /v1/track: the spec's, and the short ones analytics.js (analytics-next)
// posts to (apiHost + "/" + the type's first letter, "/b" for a batch).
var segmentCalls = []struct {
	path string
	c    *call
}{
	{"/v1/identify", &call{name: "identify", single: true, segment: true, typ: "identify"}},
	{"/v1/page", &call{name: "page", single: true, segment: true, typ: "page"}},
	{"/v1/screen", &call{name: "screen", single: true, segment: true, typ: "screen"}},
	{"/v1/group", &call{name: "group", single: true, segment: true, typ: "group"}},
	{"/v1/alias", &call{name: "alias", single: true, segment: true, typ: "alias"}},
	{"/v1/t", &call{name: "track", single: true, segment: true, typ: "track"}},
	{"/v1/i", &call{name: "identify", single: true, segment: true, typ: "identify"}},
	{"/v1/p", &call{name: "page", single: true, segment: true, typ: "page"}},
	{"/v1/s", &call{name: "screen", single: true, segment: true, typ: "screen"}},
	{"/v1/g", &call{name: "group", single: true, segment: true, typ: "group"}},
	{"/v1/a", &call{name: "alias", single: true, segment: true, typ: "alias"}},
	{"/v1/b", &call{name: "batch", segment: true}},
}

func segmentPaths() []string {
	ps := make([]string, len(segmentCalls))
	for i, sc := range segmentCalls {
		ps[i] = sc.path
	}
	return ps
}

func (s *Server) registerSegment(mux *http.ServeMux) {
	for _, sc := range segmentCalls {
		c := sc.c
		mux.Handle(sc.path, s.route(c.name, []string{http.MethodPost}, func(w http.ResponseWriter, r *http.Request) {
			markSegment(w)
			s.serveEvents(w, r, c)
		}))
	}
}

// markSegment has w's errors and answers take the Segment shape.
func markSegment(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.segment = true
	}
}

func isSegment(w http.ResponseWriter) bool {
	sw, ok := w.(*statusWriter)
	return ok && sw.segment
}

// precheck refuses a request by its header (checkHeader). With --auth, a
// request that carries no credentials at all may still carry a Segment
// write key in its body (analytics-python, analytics.js send it there):
// deferred is then the 401 it gets unless its body has a valid one, and
// a request refused by its header anyway gets that 401. A Segment-only
// path takes any Content-Type (SDKs send application/json, text/plain or
// none): its body is JSON.
func (s *Server) precheck(r *http.Request, c *call) (f event.Format, p auth.Principal, deferred, herr *httpError) {
	if !c.segment {
		f, p, herr = s.checkHeader(r, c.single)
	} else {
		f = event.FormatJSON
		if c.single {
			f = event.FormatSingle
		}
		if p, herr = s.authenticate(r); herr == nil {
			herr = s.bodyHeaderError(r)
		}
	}
	if herr == nil || s.auth == nil || herr.status != http.StatusUnauthorized ||
		r.Header.Get("Authorization") != "" || r.URL.Query().Has(auth.QueryParam) {
		return f, p, nil, herr
	}
	deferred = herr
	if !c.segment {
		if f, herr = format(r, c.single); herr != nil {
			return f, p, nil, deferred
		}
	}
	if herr = s.bodyHeaderError(r); herr != nil {
		return f, p, nil, deferred
	}
	return f, p, deferred, nil
}

// frame cuts body into its messages, as Frame does, and a Segment batch's
// wrapper: a body of /v1/batch that is an object with a "batch" array and
// other fields (sentAt, writeKey, context ...) whose first message is a
// Segment one, and every body of a Segment path. A request found to hold
// Segment messages is answered in the Segment shape.
func (s *Server) frame(dst [][]byte, body []byte, f event.Format, c *call, w http.ResponseWriter) ([][]byte, *event.SegmentBatch, error) {
	if !c.single && f == event.FormatJSON {
		if i := firstNonSpace(body); i >= 0 && body[i] == '{' {
			items, sb, ok, err := event.FrameSegment(dst, body, s.cfg.MaxEvents)
			if err != nil && (c.segment || isSegmentBody(body)) {
				markSegment(w)
				return dst, nil, err
			}
			if ok && (c.segment || event.IsSegment(items[0])) {
				markSegment(w)
				if len(body) > event.SegmentMaxBatchBytes {
					return dst, nil, &event.BodyError{Err: event.ErrMalformed, Offset: -1, Msg: "the batch is " + strconv.Itoa(len(body)) + " bytes; the Segment limit is " + strconv.Itoa(event.SegmentMaxBatchBytes)}
				}
				return items, &sb, nil
			}
			dst = dst[:0]
		}
	}
	items, err := event.Frame(dst, body, f, s.cfg.MaxEvents)
	if c.segment || (err == nil && len(items) > 0 && event.IsSegment(items[0])) || (err != nil && isSegmentBody(body)) {
		markSegment(w)
	}
	return items, nil, err
}

// isSegmentBody reports whether a body FrameSegment refused is a Segment
// batch: its first message has a "type".
func isSegmentBody(body []byte) bool {
	i := bytes.Index(body, []byte(`"batch"`))
	return i >= 0 && bytes.Contains(body[i:], []byte(`"type"`))
}

// authenticateKey authenticates a request that sent no credentials by the
// Segment write key of its body: the batch wrapper's writeKey, else the
// first message's. Without one, or for a body that is not Segment's, the
// answer is deferred, the 401 it had.
func (s *Server) authenticateKey(r *http.Request, body []byte, items [][]byte, sb *event.SegmentBatch, deferred *httpError) (auth.Principal, *httpError) {
	key := ""
	if sb != nil {
		key = sb.WriteKey
	}
	if key == "" && len(items) > 0 && event.IsSegment(items[0]) {
		key = event.SegmentWriteKey(items[0])
	}
	if key == "" { // counted by authenticate
		return auth.Principal{}, deferred
	}
	kr := &http.Request{Method: r.Method, URL: &url.URL{Path: r.URL.Path}, RemoteAddr: r.RemoteAddr,
		Header: http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(key+":"))}}}
	kr = kr.WithContext(r.Context())
	p, err := s.auth.FromHTTP(kr, s.clientIP(r))
	if err == nil && p.Client == nil {
		err = errors.New("the write key names no client")
	}
	if err != nil {
		s.metrics.AuthRejected.WithLabelValues(authReason(err)).Inc()
		status := auth.HTTPStatus(err)
		if status < 400 || status >= 500 {
			status = http.StatusUnauthorized
		}
		e := &httpError{status: status, offset: -1, msg: "write key refused: " + err.Error()}
		if d := auth.RetryAfter(err); d > 0 {
			e.retryAfter = auth.RetryAfterSeconds(d)
		}
		return p, e
	}
	return p, nil
}

func firstNonSpace(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n', 0xef, 0xbb, 0xbf: // a UTF-8 byte order mark too
		default:
			return i
		}
	}
	return -1
}

// segmentCodes are the "code" of a Segment error answer, by status.
var segmentCodes = map[int]string{
	http.StatusBadRequest:            "invalid_request",
	http.StatusUnauthorized:          "invalid_write_key",
	http.StatusForbidden:             "forbidden",
	http.StatusRequestEntityTooLarge: "too_large",
	http.StatusUnsupportedMediaType:  "unsupported_media_type",
	http.StatusTooManyRequests:       "rate_limited",
	http.StatusUnprocessableEntity:   "rejected",
	http.StatusServiceUnavailable:    "unavailable",
}

// segmentError is a Segment error answer: "code" and "message", as
// analytics-python reads them (it fails on a body without them), and
// inlet's "error" and "offset" beside them.
type segmentError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Error   string `json:"error"`
	Offset  *int64 `json:"offset,omitempty"`
}

func writeSegmentError(w http.ResponseWriter, e *httpError) {
	code := segmentCodes[e.status]
	if code == "" {
		code = "error"
	}
	b := segmentError{Code: code, Message: e.msg, Error: e.msg}
	if e.offset >= 0 {
		b.Offset = &e.offset
	}
	writeJSON(w, e.status, b)
}

// writeSegmentAnswer answers a Segment request once its messages are
// stored as the ack mode promises: 200 whatever the mode (analytics-python
// takes nothing else for success), with inlet's answer and
// "success": true; 400 when every message was rejected, with the first
// reason as its "message".
func writeSegmentAnswer(w http.ResponseWriter, a *Answer) {
	if a.Accepted == 0 && len(a.Rejected) > 0 {
		dst := append(make([]byte, 0, 512), `{"code":"invalid_message","message":`...)
		dst = event.AppendJSONString(dst, "no message accepted: message "+strconv.Itoa(a.Rejected[0].Index)+": "+a.Rejected[0].Error)
		dst = append(dst, ',')
		dst = append(dst, appendAnswer(nil, a)[1:]...)
		writeRaw(w, http.StatusBadRequest, dst)
		return
	}
	dst := append(make([]byte, 0, 512), `{"success":true,`...)
	dst = append(dst, appendAnswer(nil, a)[1:]...)
	writeRaw(w, http.StatusOK, dst)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
