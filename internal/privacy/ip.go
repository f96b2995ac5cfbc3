// Package privacy keeps what inlet stores about a person to what the
// operator chose: the IP policy (keep, truncate or drop the client's
// address, by default, per client and per request) and field redaction
// (rules that drop a field of an event, or replace it with a keyed hash).
//
// Everything here is safe for concurrent use; nothing does I/O but
// ReadKey.
package privacy

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Policy is what happens to a client's address. The zero value is Keep;
// a larger Policy is stricter.
type Policy uint8

// The policies, from the loosest to the strictest.
const (
	Keep     Policy = iota // the address as seen
	Truncate               // its network prefix (IP.V4Bits, IP.V6Bits), the host bits zero
	Drop                   // no address at all
)

var policyNames = [...]string{Keep: "keep", Truncate: "truncate", Drop: "drop"}

func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// ParsePolicy reads "keep", "truncate" or "drop".
func ParsePolicy(s string) (Policy, error) {
	for p, n := range policyNames {
		if s == n {
			return Policy(p), nil
		}
	}
	return Keep, fmt.Errorf("ip policy %q: want keep, truncate or drop", s)
}

// Set and the text methods let a Policy be a flag and a field of the
// clients file.
func (p *Policy) Set(s string) error {
	q, err := ParsePolicy(s)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *Policy) UnmarshalText(b []byte) error { return p.Set(string(b)) }

// Stricter is the stricter of p and q.
func Stricter(p, q Policy) Policy { return max(p, q) }

// Request headers by which a request asks for a stricter policy than its
// client's (never a looser one).
const (
	// HeaderIPPolicy is keep, truncate or drop (Jitsu's name). Any other
	// value counts as drop: a client that asks for privacy and misspells
	// it gets the most.
	HeaderIPPolicy = "X-IP-Policy"
	// HeaderSPAnonymous is Snowplow's: any value means drop.
	HeaderSPAnonymous = "SP-Anonymous"
)

// FromHeader is the policy r's headers ask for, Keep when they ask none.
func FromHeader(h http.Header) Policy {
	p := Keep
	if v := h.Values(HeaderIPPolicy); len(v) > 0 {
		for _, s := range v {
			q, err := ParsePolicy(strings.ToLower(strings.TrimSpace(s)))
			if err != nil {
				q = Drop
			}
			p = Stricter(p, q)
		}
	}
	if len(h.Values(HeaderSPAnonymous)) > 0 {
		p = Drop
	}
	return p
}

// Default prefix lengths of Truncate.
const (
	DefaultV4Bits = 24
	DefaultV6Bits = 48
)

// IP applies a Policy to addresses: Truncate keeps the first V4Bits of an
// IPv4 address and V6Bits of an IPv6 one.
type IP struct {
	V4Bits, V6Bits int
}

// Check reports prefix lengths out of range.
func (c IP) Check() error {
	if c.V4Bits < 0 || c.V4Bits > 32 {
		return fmt.Errorf("ip truncation: %d bits of IPv4: want 0 to 32", c.V4Bits)
	}
	if c.V6Bits < 0 || c.V6Bits > 128 {
		return fmt.Errorf("ip truncation: %d bits of IPv6: want 0 to 128", c.V6Bits)
	}
	return nil
}

// Apply is addr under p: addr itself (Keep), its prefix as an address
// ("203.0.113.0", "2001:db8:1::") (Truncate), or "" (Drop). An addr that
// is not an IP address cannot be truncated: "" then.
func (c IP) Apply(p Policy, addr string) string {
	switch p {
	case Keep:
		return addr
	case Truncate:
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return ""
		}
		return c.truncate(a.Unmap()).String()
	}
	return ""
}

func (c IP) truncate(a netip.Addr) netip.Addr {
	bits := c.V6Bits
	if a.Is4() {
		bits = c.V4Bits
	}
	pre, err := a.WithZone("").Prefix(bits)
	if err != nil {
		return netip.Addr{}
	}
	return pre.Addr()
}
