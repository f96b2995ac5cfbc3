package worker

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/reply"
)

// Request is one call read from the service's request topic.
type Request struct {
	ID          string    // the correlation id
	Service     string    // the service called
	Deadline    time.Time // when the caller stops waiting
	ContentType string
	Query       string      // the raw query string of the HTTP request, if any
	Headers     http.Header // the forwarded HTTP request headers (http-* record headers, prefix stripped)
	Body        []byte
	ReplyTo     reply.Address // where the reply goes
}

// errMalformed marks a request that cannot be answered.
var errMalformed = errors.New("worker: malformed request")

// parseRequest reads a request record as reply/wire.go lays it out. service
// stands in for a missing inlet-service header. The correlation id comes from
// its header, else from the record key. A request without a correlation id, a
// valid reply address or a valid deadline is malformed: no reply can be
// correlated, sent, or bounded in time.
func parseRequest(r *kgo.Record, service string) (Request, error) {
	req := Request{Service: service, Body: r.Value}
	var replyTo, deadline string
	var haveReplyTo, haveDeadline, haveID bool
	for _, h := range r.Headers {
		switch k := h.Key; {
		case k == reply.HeaderCorrelationID:
			if !haveID {
				req.ID, haveID = string(h.Value), true
			}
		case k == reply.HeaderReplyTo:
			if !haveReplyTo {
				replyTo, haveReplyTo = string(h.Value), true
			}
		case k == reply.HeaderDeadline:
			if !haveDeadline {
				deadline, haveDeadline = string(h.Value), true
			}
		case k == reply.HeaderService:
			if len(h.Value) > 0 {
				req.Service = string(h.Value)
			}
		case k == reply.HeaderQuery:
			req.Query = string(h.Value)
		case k == reply.HeaderContentType:
			req.ContentType = string(h.Value)
		case strings.HasPrefix(k, reply.HTTPHeaderPrefix) && len(k) > len(reply.HTTPHeaderPrefix):
			if req.Headers == nil {
				req.Headers = make(http.Header)
			}
			req.Headers.Add(k[len(reply.HTTPHeaderPrefix):], string(h.Value))
		}
	}
	if req.ID == "" {
		req.ID = string(r.Key)
	}
	if req.ID == "" {
		return req, fmt.Errorf("%w: no %s header or record key", errMalformed, reply.HeaderCorrelationID)
	}
	if !haveReplyTo {
		return req, fmt.Errorf("%w: no %s header", errMalformed, reply.HeaderReplyTo)
	}
	addr, err := reply.ParseAddress(replyTo)
	if err != nil {
		return req, fmt.Errorf("%w: %w", errMalformed, err)
	}
	req.ReplyTo = addr
	if !haveDeadline {
		return req, fmt.Errorf("%w: no %s header", errMalformed, reply.HeaderDeadline)
	}
	if req.Deadline, err = reply.ParseDeadline(deadline); err != nil {
		return req, fmt.Errorf("%w: %w", errMalformed, err)
	}
	return req, nil
}
