package privacy

import (
	"bytes"
	"encoding/hex"

	"github.com/go-json-experiment/json/jsontext"
)

// ApplyValid is Apply for v known to be a valid JSON object (a record
// inlet built, which was checked when read): one scan of its bytes,
// without a decoder's checks. Should v hold anything the scan does not
// expect (whitespace), it falls back to Apply. The result is the same
// as Apply's.
func (r *Rules) ApplyValid(dst, v []byte, key []byte) ([]byte, error) {
	st := states.Get().(*state)
	st.key = key
	out, _, ok := st.fastObject(&r.root, v, 0, dst)
	st.put()
	if ok {
		return out, nil
	}
	return r.Apply(dst[:len(dst):len(dst)], v, key)
}

// fastObject copies the object at v[i:] to dst with n's rules applied,
// and returns the index past it; ok false at a byte it does not expect.
func (st *state) fastObject(n *node, v []byte, i int, dst []byte) (out []byte, end int, ok bool) {
	if i >= len(v) || v[i] != '{' {
		return dst, i, false
	}
	dst = append(dst, '{')
	i++
	first := true
	for {
		if i >= len(v) {
			return dst, i, false
		}
		if v[i] == '}' {
			return append(dst, '}'), i + 1, true
		}
		if v[i] != '"' {
			return dst, i, false
		}
		ne := endString(v, i)
		if ne < 0 || ne >= len(v) || v[ne] != ':' {
			return dst, i, false
		}
		rawName := v[i:ne]
		var k *node
		if n.kids != nil {
			name := rawName[1 : len(rawName)-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				st.name, _ = jsontext.AppendUnquote(st.name[:0], rawName)
				name = st.name
			}
			k = n.kids[string(name)]
		}
		vs := ne + 1
		ve := skipValue(v, vs)
		if ve < 0 {
			return dst, i, false
		}
		if k == nil || k.action != ActionDrop {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(append(dst, rawName...), ':')
			switch {
			case k == nil || k.action == "" && v[vs] != '{':
				dst = append(dst, v[vs:ve]...)
			case k.action == ActionHash:
				dst = append(dst, '"')
				dst = hex.AppendEncode(dst, st.fastHash(v[vs:ve]))
				dst = append(dst, '"')
			default:
				var e int
				if dst, e, ok = st.fastObject(k, v, vs, dst); !ok || e != ve {
					return dst, i, false
				}
			}
		}
		i = ve
		if i < len(v) && v[i] == ',' {
			i++
		} else if i >= len(v) || v[i] != '}' {
			return dst, i, false
		}
	}
}

// fastHash is hash's MAC, of a compact value.
func (st *state) fastHash(v []byte) []byte {
	if st.h == nil || !bytes.Equal(st.hk, st.key) {
		st.h, st.hk = newMAC(st.key), append(st.hk[:0], st.key...)
	}
	st.h.Reset()
	if v[0] == '"' {
		if bytes.IndexByte(v, '\\') >= 0 {
			st.str, _ = jsontext.AppendUnquote(st.str[:0], v)
			st.h.Write(st.str)
		} else {
			st.h.Write(v[1 : len(v)-1])
		}
	} else {
		st.h.Write(v)
	}
	st.mac = st.h.Sum(st.mac[:0])
	return st.mac
}

// endString is the index past the string that starts at v[i] ('"'), or -1.
func endString(v []byte, i int) int {
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue is the index past the value that starts at v[i], or -1.
func skipValue(v []byte, i int) int {
	if i >= len(v) {
		return -1
	}
	switch v[i] {
	case '"':
		return endString(v, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(v); j++ {
			switch v[j] {
			case '"':
				if j = endString(v, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case ' ', '\t', '\n', '\r':
				return -1 // not compact: Apply's
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(v) && v[j] != ',' && v[j] != '}' && v[j] != ']' {
		if v[j] == ' ' || v[j] == '\t' || v[j] == '\n' || v[j] == '\r' {
			return -1 // not compact: Apply's
		}
		j++
	}
	return j
}
