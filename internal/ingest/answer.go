package ingest

import (
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"
)

// The headers of every JSON answer. They are shared, never changed: a
// handler that adds to them (Header().Add) appends to a full slice, which
// copies it.
var (
	contentTypeJSON = []string{"application/json"}
	cacheNoStore    = []string{"no-store"}
)

// answerBufs keeps the buffers answers are encoded into.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeAnswer answers a batch or track request with a, as encoding/json
// with SetEscapeHTML(false) encodes an Answer (and a newline), without
// reflection.
func writeAnswer(w http.ResponseWriter, status int, a *Answer) {
	bp := answerBufs.Get().(*[]byte)
	b := appendAnswer((*bp)[:0], a)
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
	w.WriteHeader(status)
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 {
		*bp = b
		answerBufs.Put(bp)
	}
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
			dst = appendJSONString(dst, r.Error)
			if len(r.Violations) > 0 {
				dst = append(dst, `,"violations":[`...)
				for j, v := range r.Violations {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = append(dst, `{"type":`...)
					dst = appendJSONString(dst, string(v.Type))
					if v.Path != "" {
						dst = append(dst, `,"path":`...)
						dst = appendJSONString(dst, v.Path)
					}
					dst = append(dst, `,"msg":`...)
					dst = appendJSONString(dst, v.Msg)
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

// appendJSONString appends s quoted as encoding/json quotes strings with
// HTML escaping off: \b \f \n \r \t and \" \\ as such, other control bytes
// as \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
