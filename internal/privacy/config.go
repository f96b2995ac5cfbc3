package privacy

import (
	"flag"
	"fmt"
	"log/slog"
)

// Config is the gateway's privacy settings (flags of `inlet serve`).
type Config struct {
	// IPPolicy is the policy of requests whose client names none.
	IPPolicy Policy
	// Truncation's prefix lengths.
	IP IP
	// RedactKeyFile holds the key of hash rules; "" for none (a hash
	// rule is refused then).
	RedactKeyFile string
}

// DefaultConfig keeps addresses, and truncates to /24 and /48 when told to.
func DefaultConfig() Config {
	return Config{IP: IP{V4Bits: DefaultV4Bits, V6Bits: DefaultV6Bits}}
}

// RegisterFlags binds c's fields to flags of fs; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.IPPolicy, "ip-policy", "what events and logs keep of the client's address: keep, truncate (to --ip-truncate-v4 / --ip-truncate-v6 bits) or drop; a client of the clients file may set its own, a request may only ask for a stricter one (X-IP-Policy, SP-Anonymous)")
	fs.IntVar(&c.IP.V4Bits, "ip-truncate-v4", c.IP.V4Bits, "bits of an IPv4 address kept by the truncate policy")
	fs.IntVar(&c.IP.V6Bits, "ip-truncate-v6", c.IP.V6Bits, "bits of an IPv6 address kept by the truncate policy")
	fs.StringVar(&c.RedactKeyFile, "redact-key-file", c.RedactKeyFile, "key of the redaction rules that hash a field (HMAC-SHA256): hex, or the file's bytes as they are; at least 16 bytes (default: none, hash rules refused)")
}

// Validate checks c.
func (c Config) Validate() error {
	if c.IPPolicy > Drop {
		return fmt.Errorf("ip policy %d: want keep, truncate or drop", c.IPPolicy)
	}
	return c.IP.Check()
}

// LogHandler is h with the addresses in its records under --ip-policy
// (IP.LogHandler).
func (c Config) LogHandler(h slog.Handler) slog.Handler { return c.IP.LogHandler(h, c.IPPolicy) }
