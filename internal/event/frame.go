package event

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Frame cuts body into its events, appended to dst, without reading the
// events themselves, so that each event is read once, by Batch.Add. It
// finds where each event starts and ends (strings and brackets) and checks
// what lies between them. It fails with a *BodyError when the body as a
// whole cannot be read, holds no event, or holds more than maxEvents; a
// body it does not frame itself (an error, a body past maxEvents, a layout
// it does not know) it hands to a reading with encoding/json, which says
// where and why. A leading UTF-8 byte order mark is skipped (offsets still
// count it).
//
// What Frame leaves unchecked are the events' insides: a syntax error
// inside an event of a JSON or single body, for which the whole body is
// refused, is found by Batch.Add, and BodyFault says the body's error.
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
	items, err := splitBody(body, f, maxEvents)
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
		return dst, false // empty: splitBody says so
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
		dst = append(dst, b[i:end]) // body's capacity: BodyFault finds it by it
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

// BodyFault is the error of body, which Frame cut into events (item one of
// them), that Batch.Add's rejection bad of item hides, or nil: the error
// for which the whole body is refused, as if Frame had read the events'
// insides. A malformed event of a JSON body may hold the body's syntax
// error (the first one decides), so may an event too large to be read,
// and any rejection of the one event of FormatSingle (Add reports a
// field's fault before what follows the event); NDJSON lines are
// independent: never.
func BodyFault(body, item []byte, f Format, bad *Invalid) error {
	switch {
	case bad == nil || f == FormatNDJSON:
		return nil
	case f == FormatJSON && bad.Reason != ReasonMalformed && bad.Reason != ReasonTooLarge:
		return nil
	}
	at := cap(body) - cap(item) // Frame's slices keep body's capacity
	if at < 0 || at+len(item) > len(body) || len(item) == 0 || &body[at] != &item[0] {
		panic("event: BodyFault of an item Frame did not cut from body")
	}
	if f == FormatSingle { // the event is the body, after a byte order mark
		if be := checkSyntax(item); be != nil {
			be.shift(at)
			return be
		}
		return nil
	}
	// The event is an element of the body's array: read as one, nested as
	// in the body, up to the byte after it (Frame checked the rest), and a
	// space, so that the end of it (no fault) has an offset of its own.
	prefix := "["
	if b := bytes.TrimPrefix(body, []byte(bom)); b[firstNonSpace(b)] == '{' {
		prefix = `{"":[`
	}
	w := append(append([]byte(prefix), body[at:min(at+len(item)+1, len(body))]...), ' ')
	var v json.RawMessage
	var se *json.SyntaxError
	if !errors.As(json.Unmarshal(w, &v), &se) || se.Offset == int64(len(w)) || json.Valid(item) {
		return nil // valid alone, it nests past encoding/json's limit only within the body, which a reading event by event lets through
	}
	return malformedAt(int64(at-len(prefix))+se.Offset-1, se)
}
