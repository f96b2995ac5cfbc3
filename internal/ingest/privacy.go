package ingest

import (
	"net/http"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/privacy"
)

// loadPrivacy reads the redaction key (--redact-key-file), if any, and
// says once what the settings are when they are not the defaults.
func (s *Server) loadPrivacy() error {
	c := s.cfg.Privacy
	if c.RedactKeyFile != "" {
		key, err := privacy.ReadKey(c.RedactKeyFile)
		if err != nil {
			return err
		}
		s.redactKey = key
	}
	if c.IPPolicy != privacy.Keep || c.RedactKeyFile != "" {
		s.log.Info("privacy: client addresses and redaction", "ip_policy", c.IPPolicy.String(),
			"ip_truncate_v4", c.IP.V4Bits, "ip_truncate_v6", c.IP.V6Bits, "redact_key_file", c.RedactKeyFile)
	}
	return nil
}

// requestMeta is what every endpoint that makes events records of r, from
// client p: meta (the address, the User-Agent and what they give), the
// client, then the IP policy applied to the address.
func (s *Server) requestMeta(r *http.Request, p auth.Principal) (event.Meta, enrich.Outcome) {
	meta, o := s.meta(r) // enrichment from the whole address first
	meta.Client = clientID(p)
	s.applyIPPolicy(r, &meta, p)
	return meta, o
}

// applyIPPolicy puts meta.IP under the request's IP policy: its client's
// (auth.Client.IPPolicy), else --ip-policy, made stricter, never looser,
// by its headers (privacy.FromHeader). Enrichment from the address must
// run before it: the location survives when the address does not.
func (s *Server) applyIPPolicy(r *http.Request, meta *event.Meta, p auth.Principal) {
	pol := privacy.Stricter(p.Client.Policy(s.cfg.Privacy.IPPolicy), privacy.FromHeader(r.Header))
	meta.IP = s.cfg.Privacy.IP.Apply(pol, meta.IP)
}

// redact is v with the rules of rss applied in turn (nil ones skipped,
// and, for a record Build made (built), those that name no field of it):
// new bytes when a rule set applied (v may be the batch's or the request
// body's), v itself when none did (applied false). ok is false when v is
// not a JSON object (a dead letter of a malformed event), which cannot be
// redacted.
func (s *Server) redact(v []byte, built bool, rss ...*privacy.Rules) (out []byte, applied, ok bool) {
	out = v
	for _, rs := range rss {
		// MayApply reads JSON only: a dead letter may be anything, and
		// one that is not JSON must be withheld.
		if rs == nil || built && !rs.MayApply(out) {
			continue
		}
		apply := rs.Apply
		if built {
			apply = rs.ApplyValid // checked when read: one scan, no decoder
		}
		var err error
		if out, err = apply(make([]byte, 0, len(out)+64), out, s.redactKey); err != nil {
			return nil, true, false
		}
		applied = true
	}
	return out, applied, true
}
