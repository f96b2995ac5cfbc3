package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Session tokens are
//
//	"v1." + base64url(payload) + "." + base64url(HMAC-SHA256(key, payload))
//
// with payload = expiry (unix seconds, 8 bytes big-endian) | nonce (12
// random bytes) | fingerprint of the client's secret hash (8 bytes) |
// client id. The fingerprint makes a session token die with the secret it
// was minted from when a client is removed and added again with a new one.
const (
	tokenPrefix    = "v1."
	nonceLen       = 12
	fingerprintLen = 8
	payloadFixed   = 8 + nonceLen + fingerprintLen
	maxTokenLen    = 512
	// MinKeyBytes is the shortest --auth-token-key-file key accepted.
	MinKeyBytes = 32
)

var b64 = base64.RawURLEncoding.Strict()

// IsSessionToken reports whether tok has the form of a session token (a
// secret never does: it has no '.').
func IsSessionToken(tok string) bool { return strings.HasPrefix(tok, tokenPrefix) }

// fingerprint identifies a secret's hash in a token without revealing it.
func fingerprint(hash [32]byte) [fingerprintLen]byte {
	f := sha256.Sum256(append([]byte("inlet session fingerprint\x00"), hash[:]...))
	return [fingerprintLen]byte(f[:fingerprintLen])
}

// mintToken makes a session token for client id, valid until exp.
func mintToken(key []byte, id string, fp [fingerprintLen]byte, exp time.Time) (string, error) {
	p := make([]byte, payloadFixed, payloadFixed+len(id))
	binary.BigEndian.PutUint64(p, uint64(exp.Unix()))
	if _, err := rand.Read(p[8 : 8+nonceLen]); err != nil {
		return "", fmt.Errorf("auth: reading random bytes for a session token: %w", err)
	}
	copy(p[8+nonceLen:], fp[:])
	p = append(p, id...)
	return tokenPrefix + b64.EncodeToString(p) + "." + b64.EncodeToString(mac(key, p)), nil
}

func mac(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return m.Sum(nil)
}

// claims is what a verified session token says.
type claims struct {
	id  string
	fp  [fingerprintLen]byte
	exp time.Time
}

// parseToken checks a session token's form and MAC (in constant time),
// and only then reads what it says. Its errors wrap ErrTampered and never
// contain the token.
func parseToken(key []byte, tok string) (claims, error) {
	if len(tok) > maxTokenLen {
		return claims{}, fmt.Errorf("%w: longer than %d bytes", ErrTampered, maxTokenLen)
	}
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return claims{}, fmt.Errorf("%w: not a v1 session token", ErrTampered)
	}
	p64, m64, ok := strings.Cut(rest, ".")
	if !ok {
		return claims{}, fmt.Errorf("%w: malformed (want v1.PAYLOAD.MAC)", ErrTampered)
	}
	payload, err1 := b64.DecodeString(p64)
	sum, err2 := b64.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return claims{}, fmt.Errorf("%w: malformed (not base64url)", ErrTampered)
	}
	if !hmac.Equal(sum, mac(key, payload)) {
		return claims{}, fmt.Errorf("%w: signature does not match (tampered, or signed with another key)", ErrTampered)
	}
	if len(payload) <= payloadFixed {
		return claims{}, fmt.Errorf("%w: signed payload too short", ErrTampered)
	}
	c := claims{
		exp: time.Unix(int64(binary.BigEndian.Uint64(payload)), 0),
		fp:  [fingerprintLen]byte(payload[8+nonceLen : payloadFixed]),
		id:  string(payload[payloadFixed:]),
	}
	if !ValidID(c.id) {
		return claims{}, fmt.Errorf("%w: signed payload names no valid client id", ErrTampered)
	}
	return c, nil
}
