package auth

import (
	"errors"
	"path"
	"time"

	"github.com/inlet-dev/inlet/internal/privacy"
)

// Client is one entry of the clients file.
type Client struct {
	ID string `json:"id"`
	// SecretSHA256 is the hex SHA-256 of the client's secret. Secrets are
	// 256-bit random strings made by `inlet clients add`, so a plain hash
	// is enough to keep them from being read off the file (no password
	// stretching is needed for a secret nobody can guess).
	SecretSHA256 string `json:"secret_sha256"`
	// Groups the client may send events of and look up; empty for all.
	Groups []string `json:"groups,omitempty"`
	// DefaultGroup is the group of its events that name none; "" for the
	// gateway's --catalog-default-group.
	DefaultGroup string `json:"default_group,omitempty"`
	// Topics are the topics (globs, path.Match syntax) the routes file
	// (--routes) may send the client's events to; empty for all. An event
	// routed elsewhere is rejected (forbidden_topic).
	Topics []string `json:"topics,omitempty"`
	// Rate is events (or catalog calls) per second; 0 for no limit. Burst
	// is how many may come at once (default: Rate, at least 1).
	Rate  float64 `json:"rate,omitzero"`
	Burst int     `json:"burst,omitzero"`
	// Admin clients may change the catalog (Upsert, Block) and, with
	// --auth, open the live events page (/ui), which shows user data.
	Admin bool `json:"admin,omitzero"`
	// Created is when the client was added.
	Created time.Time `json:"created"`
	// IPPolicy is what its events and the logs keep of its address (keep,
	// truncate or drop); nil for the gateway's --ip-policy. A request may
	// ask for a stricter one, never a looser one.
	IPPolicy *privacy.Policy `json:"ip_policy,omitempty"`
	// Redact are the redaction rules of its events (and their dead
	// letters).
	Redact []privacy.Rule `json:"redact,omitempty"`

	redact *privacy.Rules // Redact compiled, by ParseFile and ValidateClients
}

// Policy is the client's IP policy, def when it names none.
func (c *Client) Policy(def privacy.Policy) privacy.Policy {
	if c == nil || c.IPPolicy == nil {
		return def
	}
	return *c.IPPolicy
}

// Redaction is the client's redaction rules, compiled; nil for none, and
// for a client that was not read by ParseFile (or checked by
// ValidateClients).
func (c *Client) Redaction() *privacy.Rules {
	if c == nil {
		return nil
	}
	return c.redact
}

// Group is the group of the client's events and lookups that name none:
// DefaultGroup, else its only group when Groups holds one, else "" (the
// gateway's --catalog-default-group).
func (c *Client) Group() string {
	switch {
	case c.DefaultGroup != "":
		return c.DefaultGroup
	case len(c.Groups) == 1:
		return c.Groups[0]
	}
	return ""
}

// AllowTopic reports whether the client's events may go to topic.
func (c *Client) AllowTopic(topic string) bool {
	if len(c.Topics) == 0 {
		return true
	}
	for _, g := range c.Topics {
		if ok, _ := path.Match(g, topic); ok {
			return true
		}
	}
	return false
}

// Principal is an authenticated caller.
type Principal struct {
	Client *Client
	// Session is a session token the caller may present instead of its
	// secret, and its expiry: sent back in the answer (AuthRp.token).
	Session string
	Expires time.Time
}

// Errors of authentication and admission, wrapped; each answers 401 (gRPC
// Unauthenticated), except ErrForbidden (403, PermissionDenied) and
// ErrRateLimited and ErrThrottled (429 with Retry-After, ResourceExhausted).
var (
	ErrMissing = errors.New("auth: no credentials")
	// ErrBadCredentials is an unknown client id, a secret of no client, or
	// a wrong secret for a client: one error, with one message, found by
	// one code path that takes the same time, so that an answer never
	// tells whether a client id exists.
	ErrBadCredentials = errors.New("auth: unknown client or wrong secret")
	ErrExpired        = errors.New("auth: session token expired")
	ErrTampered       = errors.New("auth: session token invalid")
	ErrWrongClient    = errors.New("auth: session token of another client")
	ErrForbidden      = errors.New("auth: not allowed")
	ErrRateLimited    = errors.New("auth: over the client's rate")
)
