package event

import "bytes"

// Frame is Split for the hot path: it cuts body into its events, appended to
// dst, without reading the events themselves, so that each event is read
// once, by Batch.Add. It finds where each event starts and ends (strings
// and brackets) and checks what lies between them; whatever it does not
// take for a well-framed body (an error, a body past maxEvents, a layout it
// does not know) it hands to Split, whose answer it returns.
//
// What Frame leaves unchecked are the events' insides: a body Split rejects
// for a syntax error inside an event is cut by Frame, and the event is
// rejected by Batch.Add, as malformed_json, or as too_large without being
// read at all. A caller that answers such a body as Split would (a JSON or
// single layout: the whole body is refused) calls Split once Add rejected
// an event for which HidesBodyError is true.
//
// The returned slices alias body.
func Frame(dst [][]byte, body []byte, f Format, maxEvents int) ([][]byte, error) {
	b := body
	if bytes.HasPrefix(b, []byte(bom)) {
		b = b[len(bom):]
	}
	n := len(dst)
	var ok bool
	switch f {
	case FormatNDJSON:
		dst = appendLines(dst, b, maxEvents)
		ok = len(dst) > n && (maxEvents <= 0 || len(dst)-n <= maxEvents)
	case FormatSingle:
		if i := firstNonSpace(b); i >= 0 && b[i] == '{' {
			dst, ok = append(dst, b), true
		}
	default:
		dst, ok = frameJSON(dst, b, maxEvents)
		ok = ok && len(dst) > n
	}
	if ok {
		return dst, nil
	}
	items, err := Split(body, f, maxEvents)
	return append(dst[:n], items...), err
}

// frameJSON cuts a JSON array of events, or {"batch": [...]}; false for
// anything else, or past maxEvents.
func frameJSON(dst [][]byte, b []byte, maxEvents int) ([][]byte, bool) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return dst, false
	}
	wrapped := b[i] == '{'
	if wrapped {
		const key = `"batch"`
		i = skipSpace(b, i+1)
		if !bytes.HasPrefix(b[i:], []byte(key)) {
			return dst, false
		}
		i = skipSpace(b, i+len(key))
		if i == len(b) || b[i] != ':' {
			return dst, false
		}
		i = skipSpace(b, i+1)
	}
	if i == len(b) || b[i] != '[' {
		return dst, false
	}
	i = skipSpace(b, i+1)
	if i == len(b) || b[i] == ']' {
		return dst, false // empty: Split says so
	}
	n := len(dst)
	for {
		if maxEvents > 0 && len(dst)-n == maxEvents {
			return dst, false
		}
		if i == len(b) {
			return dst, false
		}
		end, ok := valueEnd(b, i)
		if !ok {
			return dst, false
		}
		dst = append(dst, b[i:end:end])
		i = skipSpace(b, end)
		if i == len(b) {
			return dst, false
		}
		if b[i] == ']' {
			i++
			break
		}
		if b[i] != ',' {
			return dst, false
		}
		i = skipSpace(b, i+1)
	}
	if wrapped {
		i = skipSpace(b, i)
		if i == len(b) || b[i] != '}' {
			return dst, false
		}
		i++
	}
	return dst, skipSpace(b, i) == len(b)
}

// valueEnd is the end of the JSON value that starts at b[i], found by its
// brackets and strings only; false when b ends first.
func valueEnd(b []byte, i int) (int, bool) {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, ok := stringEnd(b, j)
				if !ok {
					return 0, false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ' ', '\t', '\r', '\n', ',', ']', '}':
			return j, j > i
		}
		j++
	}
	return j, false
}

// stringEnd is the end of the JSON string that starts at b[i], past its
// closing quote.
func stringEnd(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		q := j + k
		esc := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			esc++
		}
		if esc%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// appendLines appends the non-blank lines of body to dst, as splitLines.
func appendLines(dst [][]byte, body []byte, maxEvents int) [][]byte {
	n := len(dst)
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		dst = append(dst, line)
		if maxEvents > 0 && len(dst)-n > maxEvents {
			break
		}
	}
	return dst
}

// HidesBodyError reports whether Batch.Add's rejection bad of an event that
// Frame cut from a body of layout f may hide a syntax error of the body
// itself, which Split would refuse: a malformed event (its own fault may be
// the body's), an event too large to be read at all, or any rejection of
// the one event of FormatSingle (Add reports a field's fault before what
// follows the event). NDJSON lines are independent: never.
func HidesBodyError(bad *Invalid, f Format) bool {
	switch {
	case bad == nil || f == FormatNDJSON:
		return false
	case f == FormatSingle:
		return true
	}
	return bad.Reason == ReasonMalformed || bad.Reason == ReasonTooLarge
}
