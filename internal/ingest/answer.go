package ingest

import (
	"net/http"
	"strconv"

	"github.com/inlet-dev/inlet/internal/event"
)

// The headers of every JSON answer. They are shared, never changed: a
// handler that adds to them (Header().Add) appends to a full slice, which
// copies it.
var (
	contentTypeJSON = []string{"application/json"}
	cacheNoStore    = []string{"no-store"}
)

// writeAnswer answers a batch or track request with a, as encoding/json
// with SetEscapeHTML(false) encodes an Answer (and a newline), without
// reflection.
func writeAnswer(w http.ResponseWriter, status int, a *Answer) {
	b := appendAnswer(make([]byte, 0, 512), a)
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appendAnswer appends a's JSON, with a newline, to dst.
func appendAnswer(dst []byte, a *Answer) []byte {
	dst = append(dst, `{"accepted":`...)
	dst = strconv.AppendInt(dst, int64(a.Accepted), 10)
	dst = append(dst, `,"rejected":`...)
	if a.Rejected == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, r := range a.Rejected {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"index":`...)
			dst = strconv.AppendInt(dst, int64(r.Index), 10)
			dst = append(dst, `,"error":`...)
			dst = event.AppendJSONString(dst, r.Error)
			if r.Reason != "" {
				dst = append(dst, `,"reason":`...)
				dst = event.AppendJSONString(dst, r.Reason)
			}
			if len(r.Violations) > 0 {
				dst = append(dst, `,"violations":[`...)
				for j, v := range r.Violations {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = append(dst, `{"type":`...)
					dst = event.AppendJSONString(dst, string(v.Type))
					if v.Path != "" {
						dst = append(dst, `,"path":`...)
						dst = event.AppendJSONString(dst, v.Path)
					}
					dst = append(dst, `,"msg":`...)
					dst = event.AppendJSONString(dst, v.Msg)
					dst = append(dst, '}')
				}
				dst = append(dst, ']')
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}\n"...)
}
