package reply

import (
	"flag"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// RegisterFlags binds c's fields to flags of fs named "rpc-" and the
// setting; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	cliflag.List(fs, &c.Services, "rpc-services", "services POST /v1/rpc/{service} may call, comma-separated, or *; empty disables request-reply")
	fs.StringVar(&c.TopicPrefix, "rpc-topic-prefix", c.TopicPrefix, "a service's request topic is this prefix and its name")
	fs.DurationVar(&c.Timeout, "rpc-timeout", c.Timeout, "how long a call waits for its reply when it sends no Inlet-Timeout (504 past it)")
	fs.DurationVar(&c.MaxTimeout, "rpc-max-timeout", c.MaxTimeout, "the most a caller's Inlet-Timeout may ask for")
	fs.IntVar(&c.MaxInFlight, "rpc-max-in-flight", c.MaxInFlight, "calls waiting for replies at once (503 past it)")
	cliflag.Bytes(fs, &c.MaxBodyBytes, "rpc-max-body-bytes", "largest request-reply request body (413 past it, before the body is read)")
	cliflag.List(fs, &c.ForwardHeaders, "rpc-forward-headers", "credential headers copied into request records anyway, comma-separated: Authorization, Cookie; by default they are withheld, as the request topic keeps them for its retention (Proxy-Authorization never is)")
	fs.BoolVar(&c.ForwardQuery, "rpc-forward-query", c.ForwardQuery, "copy the query string into request records (inlet-query); by default it is withheld, as it may carry tokens or signatures")
}
