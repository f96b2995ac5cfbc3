package ingest

import (
	"net/http"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/privacy"
)

// loadPrivacy reads the redaction key (--redact-key-file), if any.
func (s *Server) loadPrivacy() error {
	if s.cfg.Privacy.RedactKeyFile == "" {
		return nil
	}
	key, err := privacy.ReadKey(s.cfg.Privacy.RedactKeyFile)
	if err != nil {
		return err
	}
	s.redactKey = key
	return nil
}

// applyIPPolicy puts meta.IP under the request's IP policy: its client's
// (auth.Client.IPPolicy), else --ip-policy, made stricter, never looser,
// by its headers (privacy.FromHeader). Enrichment from the address must
// run before it: the location survives when the address does not.
func (s *Server) applyIPPolicy(r *http.Request, meta *event.Meta, p auth.Principal) {
	pol := privacy.Stricter(p.Client.Policy(s.cfg.Privacy.IPPolicy), privacy.FromHeader(r.Header))
	meta.IP = s.cfg.Privacy.IP.Apply(pol, meta.IP)
}

// redact is v with rs applied, in new bytes (v may be the batch's or the
// request body's); ok false when v is not a JSON object (a dead letter of
// a malformed event), which cannot be redacted. nil rs: v, ok.
func (s *Server) redact(v []byte, rs *privacy.Rules) (out []byte, ok bool) {
	if rs == nil {
		return v, true
	}
	out, err := rs.Apply(make([]byte, 0, len(v)), v, s.redactKey)
	return out, err == nil
}
