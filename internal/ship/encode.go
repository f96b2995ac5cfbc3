package ship

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/inlet-dev/inlet/internal/event"
)

// lineEncoder makes an event of a line:
//
//	{"event":..,"id":..,"anon_id":..,"props":..,"context":{"host":..,"source":..}}
//
// written by hand (encoding/json took most of ship's CPU).
type lineEncoder struct {
	cfg  Config
	run  string
	seq  int64
	head []byte // {"event":"...","id":
	mid  []byte // ,"anon_id":"...","props":
	tail []byte // ,"context":{"host":"...","source":"..."}}
}

func newLineEncoder(cfg Config) *lineEncoder {
	id, _ := uuid.NewV7()
	host, _ := os.Hostname()
	src := cfg.source()
	e := &lineEncoder{cfg: cfg, run: id.String()}
	e.head = append(event.AppendJSONString([]byte(`{"event":`), []byte(cfg.Event)), `,"id":`...)
	if cfg.Key != "" {
		e.mid = event.AppendJSONString(append(e.mid, `,"anon_id":`...), []byte(cfg.Key))
	}
	e.mid = append(e.mid, `,"props":`...)
	e.tail = event.AppendJSONString([]byte(`,"context":{"host":`), []byte(host))
	e.tail = append(event.AppendJSONString(append(e.tail, `,"source":`...), []byte(src)), "}}"...)
	return e
}

// encode makes the event of line; id, when empty, is <run>-<seq>.
func (e *lineEncoder) encode(line []byte, id string) []byte {
	b := make([]byte, 0, len(e.head)+len(e.mid)+len(e.tail)+len(line)+64)
	b = append(b, e.head...)
	if id == "" {
		e.seq++
		b = append(append(append(b, '"'), e.run...), '-')
		b = append(strconv.AppendInt(b, e.seq, 10), '"')
	} else {
		b = event.AppendJSONString(b, []byte(id))
	}
	b = append(b, e.mid...)
	props := false
	switch e.cfg.Format {
	case "json":
		// An object that is strict JSON (RFC 7493: valid UTF-8, no lone
		// surrogates, unique names) is the props as written, compacted:
		// its names in their order, numbers and strings byte for byte.
		// Any other line is sent as a line (below), rather than changed
		// on the way: a duplicate name dropped, a bad byte replaced.
		// (Nested at most as deep as inlet takes an event: props is one
		// level under the event.)
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '{' && jsontext.Value(t).IsValid() && depth(t) < event.MaxDepth {
			start := len(b)
			b = append(b, t...)
			if v := jsontext.Value(b[start:]); v.Compact() == nil {
				b, props = b[:start+len(v)], true
			} else {
				b = b[:start]
			}
		}
	case "logfmt":
		if m := parseLogfmt(string(line)); len(m) > 0 {
			p, _ := json.Marshal(m)
			b, props = append(b, p...), true
		}
	}
	if !props {
		b = append(event.AppendJSONString(append(b, `{"line":`...), line), '}')
	}
	return append(b, e.tail...)
}

// parseLogfmt reads key=value pairs (values may be "quoted"); a bare key
// is "true".
func parseLogfmt(s string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' {
			i++
		}
		key := s[k:i]
		if key == "" {
			i++
			continue
		}
		if i >= len(s) || s[i] == ' ' {
			m[key] = "true"
			continue
		}
		i++ // '='
		if i < len(s) && s[i] == '"' {
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			if j >= len(s) { // no closing quote: the rest of the line
				m[key] = s[i+1:]
				break
			}
			if v, err := strconv.Unquote(s[i : j+1]); err == nil {
				m[key] = v
			} else {
				m[key] = s[i+1 : j]
			}
			i = j + 1
			continue
		}
		v := i
		for i < len(s) && s[i] != ' ' {
			i++
		}
		m[key] = s[v:i]
	}
	return m
}

// depth is how deeply valid JSON v nests objects and arrays ({} is 1).
func depth(v []byte) int {
	d, most, in := 0, 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			d++
			most = max(most, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return most
}
