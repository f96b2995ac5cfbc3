package event

import (
	"strconv"
	"unicode/utf8"
)

// MaxQuoteBytes is the most of a client's input that an error message
// quotes.
const MaxQuoteBytes = 128

// Quote returns s quoted as %q quotes it, cut to its first MaxQuoteBytes
// bytes (at a character's start) followed by its length when longer: an
// error names what it refuses without echoing all of it back.
func Quote(s string) string {
	if len(s) <= MaxQuoteBytes {
		return strconv.Quote(s)
	}
	return strconv.Quote(Prefix(s, MaxQuoteBytes)) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Prefix is s cut to at most n bytes, not within a character: the one cut
// of every message, log field and header value that bounds what it keeps
// of a client's input.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// AppendJSONString appends s quoted as encoding/json quotes strings with
// HTML escaping off: \b \f \n \r \t and \" \\ as such, other control bytes
// as \u00XX, each byte of invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped. It is the quoting of the answers of ingest and of the events of
// inlet ship, written out rather than through a JSON library: neither path
// can afford reflection, and both want encoding/json's bytes exactly.
func AppendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
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
		// At most a rune's bytes: the conversion needs no allocation.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
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
