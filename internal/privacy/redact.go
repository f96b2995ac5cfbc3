package privacy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// Rule is one redaction rule as a clients or routes file writes it: the
// field at Path is dropped, or replaced by its keyed hash.
type Rule struct {
	// Path names a field inside one of the event's top-level objects
	// (props, context, traits, or any other): a dotted path
	// ("props.user.email") or a JSON pointer ("/props/user/email", with
	// ~1 for / and ~0 for ~ in a name). It never reaches into arrays.
	Path string `json:"path" yaml:"path"`
	// Action is "drop" (the field is removed) or "hash" (its value is
	// replaced by the lowercase hex HMAC-SHA256, under the key of
	// --redact-key-file, of the string's characters, or of the JSON text
	// of any other value).
	Action string `json:"action" yaml:"action"`
}

// Actions of a Rule.
const (
	ActionDrop = "drop"
	ActionHash = "hash"
)

// Rules are compiled redaction rules: a tree of the paths. A nil *Rules
// redacts nothing. Rules are immutable and safe for concurrent use.
type Rules struct {
	root   node
	hashes bool // a rule hashes: the key is needed
	n      int
	leaves [][]byte // each rule's last name, quoted as JSON writes it (MayApply)
}

type node struct {
	kids   map[string]*node
	action string // drop or hash: the field's; "": a field on the way to one
}

// Compile checks rs and compiles them; nil rs are nil Rules. An error
// names the rule (by its index, from 1) and what is wrong with it: an
// empty path, a path of one name (a top-level field, not inside an
// object), a bad JSON pointer escape, an empty name, an unknown action,
// two rules on one field, or a rule under a field another rule removes.
func Compile(rs []Rule) (*Rules, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	out := &Rules{n: len(rs)}
	for i, r := range rs {
		segs, err := splitPath(r.Path)
		if err == nil && r.Action != ActionDrop && r.Action != ActionHash {
			err = fmt.Errorf("action %q: want drop or hash", r.Action)
		}
		if err == nil {
			err = out.root.add(segs, r.Action)
		}
		if err == nil {
			q, _ := jsontext.AppendQuote(nil, segs[len(segs)-1])
			out.leaves = append(out.leaves, q)
		}
		if err != nil {
			return nil, fmt.Errorf("redact rule %d (%q): %w", i+1, r.Path, err)
		}
		out.hashes = out.hashes || r.Action == ActionHash
	}
	return out, nil
}

func (n *node) add(segs []string, action string) error {
	for i, s := range segs {
		if n.action != "" {
			return errors.New("a rule already redacts " + strings.Join(segs[:i], "."))
		}
		if n.kids == nil {
			n.kids = map[string]*node{}
		}
		k := n.kids[s]
		if k == nil {
			k = &node{}
			n.kids[s] = k
		}
		n = k
	}
	if n.action != "" {
		return errors.New("two rules redact this field")
	}
	if n.kids != nil {
		return errors.New("another rule redacts a field inside this one")
	}
	n.action = action
	return nil
}

// splitPath reads a dotted path or a JSON pointer.
func splitPath(p string) ([]string, error) {
	var segs []string
	switch {
	case p == "":
		return nil, errors.New("empty path: want props.NAME or /props/NAME")
	case p[0] == '/':
		segs = strings.Split(p[1:], "/")
		for i, s := range segs {
			for j := 0; j < len(s); j++ {
				if s[j] == '~' && (j+1 == len(s) || s[j+1] != '0' && s[j+1] != '1') {
					return nil, errors.New("bad JSON pointer: ~ must be followed by 0 or 1")
				}
			}
			segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
		}
	default:
		segs = strings.Split(p, ".")
	}
	if len(segs) < 2 {
		return nil, errors.New("names a top-level field: want a field inside one of the event's objects, as props.NAME or /props/NAME")
	}
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("an empty name in the path")
		}
	}
	return segs, nil
}

// Hashes reports whether a rule hashes (and so needs a key).
func (r *Rules) Hashes() bool { return r != nil && r.hashes }

// Len is the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return r.n
}

// MayApply reports whether a rule may apply to v, cheaply: false when no
// rule's last name is in v as a JSON string, and v has no escape (which
// could spell a name otherwise). Apply of v is v, compacted, then.
func (r *Rules) MayApply(v []byte) bool {
	if r == nil {
		return false
	}
	if bytes.IndexByte(v, '\\') >= 0 {
		return true
	}
	for _, l := range r.leaves {
		if bytes.Contains(v, l) {
			return true
		}
	}
	return false
}

// ErrUnreadable is Apply's error for a value that is not a JSON object:
// nothing of it can be kept (a dead letter of a malformed event).
var ErrUnreadable = errors.New("privacy: not a JSON object: cannot redact")

// Apply appends v, a JSON object (an event, compact or not), to dst with
// the fields the rules name dropped or hashed under key; fields that are
// not there, and paths that meet a value that is not an object, are
// left alone. The result is compact JSON. A v that is not valid JSON is
// ErrUnreadable, with dst as it was. key must be set when r.Hashes().
func (r *Rules) Apply(dst, v []byte, key []byte) ([]byte, error) {
	st := states.Get().(*state)
	defer st.put()
	st.rd.Reset(v)
	// Names are not checked for duplicates: records were checked when
	// read, and a dead letter's duplicates are each redacted.
	st.dec.Reset(&st.rd, jsontext.AllowDuplicateNames(true))
	st.out.Reset()
	st.enc.Reset(&st.out, jsontext.AllowDuplicateNames(true), jsontext.PreserveRawStrings(true))
	st.key = key
	if st.dec.PeekKind() != '{' {
		return dst, ErrUnreadable
	}
	if err := st.object(&r.root); err != nil {
		return dst, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	if _, err := st.dec.ReadToken(); err != io.EOF {
		return dst, ErrUnreadable // more than one value, or trailing bytes
	}
	return append(dst, bytes.TrimSuffix(st.out.Bytes(), []byte("\n"))...), nil
}

// state is one Apply's decoder and encoder, pooled.
type state struct {
	rd   bytes.Reader
	dec  jsontext.Decoder
	enc  jsontext.Encoder
	out  bytes.Buffer
	key  []byte
	mac  []byte
	h    hash.Hash // HMAC-SHA256 under hk, reused while the key stays
	hk   []byte
	str  []byte
	name []byte
}

var states = sync.Pool{New: func() any { return new(state) }}

func (st *state) put() {
	st.key = nil
	st.rd.Reset(nil)
	st.dec.Reset(&st.rd)
	if st.out.Cap() > 64<<10 {
		st.out = bytes.Buffer{}
	}
	st.enc.Reset(&st.out)
	states.Put(st)
}

// object copies the object at the decoder, applying n's rules to its
// fields.
func (st *state) object(n *node) error {
	tok, err := st.dec.ReadToken()
	if err != nil {
		return err
	}
	if err := st.enc.WriteToken(tok); err != nil {
		return err
	}
	for st.dec.PeekKind() != '}' {
		// The name, kept: what the decoder returns is valid until its
		// next call only.
		raw, err := st.dec.ReadValue()
		if err != nil {
			return err
		}
		st.name, _ = jsontext.AppendUnquote(st.name[:0], raw) // read valid
		k := n.kids[string(st.name)]
		if k != nil && k.action == ActionDrop {
			if err := st.dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if err := st.enc.WriteValue(raw); err != nil {
			return err
		}
		switch {
		case k == nil || k.action == "" && st.dec.PeekKind() != '{':
			err = st.copyValue()
		case k.action == ActionHash:
			var v jsontext.Value
			if v, err = st.dec.ReadValue(); err == nil {
				err = st.enc.WriteToken(jsontext.String(st.hash(v)))
			}
		default:
			err = st.object(k)
		}
		if err != nil {
			return err
		}
	}
	tok, err = st.dec.ReadToken()
	if err != nil {
		return err
	}
	return st.enc.WriteToken(tok)
}

func (st *state) copyValue() error {
	v, err := st.dec.ReadValue()
	if err != nil {
		return err
	}
	return st.enc.WriteValue(v)
}

// hash is the hex HMAC-SHA256 of v: of a string's characters, of any
// other value's JSON text.
func (st *state) hash(v jsontext.Value) string {
	if st.h == nil || !bytes.Equal(st.hk, st.key) {
		st.h, st.hk = newMAC(st.key), append(st.hk[:0], st.key...)
	}
	st.h.Reset()
	if v.Kind() == '"' {
		st.str, _ = jsontext.AppendUnquote(st.str[:0], v) // v was read valid
		st.h.Write(st.str)
	} else {
		st.str = append(st.str[:0], v...)
		cv := jsontext.Value(st.str)
		_ = cv.Compact() // the same value hashes the same however it was spaced
		st.str = cv
		st.h.Write(st.str)
	}
	st.mac = st.h.Sum(st.mac[:0])
	return hex.EncodeToString(st.mac)
}

func newMAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// Hash is the value a hash rule writes for a string s under key: the
// lowercase hex HMAC-SHA256 of s. A join on a hashed field computes it
// the same way.
func Hash(key []byte, s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

// MinKeyBytes is the shortest key ReadKey takes.
const MinKeyBytes = 16

// ReadKey reads a redaction key file: hex (of at least MinKeyBytes
// bytes) is decoded, anything else is the key as it is; a final newline
// is not part of it.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the redaction key: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if h, err := hex.DecodeString(string(b)); err == nil && len(h) >= MinKeyBytes {
		return h, nil
	}
	if len(b) < MinKeyBytes {
		return nil, fmt.Errorf("redaction key %s: %d bytes: want at least %d (e.g. `openssl rand -hex 32 > %s`)", path, len(b), MinKeyBytes, path)
	}
	return b, nil
}
