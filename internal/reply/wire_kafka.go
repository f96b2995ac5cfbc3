package reply

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
)

// This file is the Kafka side of the wire contract, both directions of both
// records: a request (RequestRecord, ParseRequest) and a reply on a Kafka
// reply topic (ReplyRecord, ParseReply). The headers are listed in wire.go.

// RecordHeader is a Kafka record header as inlet holds one: event.Header on
// its way to internal/kafka's producer, kgo.RecordHeader from franz-go. The
// two have the same fields, so the parsers take either without copying.
type RecordHeader interface {
	event.Header | kgo.RecordHeader
}

// Request is one call, as a worker reads it from the service's request topic.
type Request struct {
	ID          string    // the correlation id
	Service     string    // the service called
	Deadline    time.Time // when the caller stops waiting
	ContentType string
	// Client is the id of the authenticated client that made the call
	// (inlet serve --auth), empty without authentication.
	Client  string
	Query   string      // the raw query string of the HTTP request, if any
	Headers http.Header // the forwarded HTTP request headers (http-* record headers, prefix stripped)
	Body    []byte
	ReplyTo Address // where the reply goes
	// ReplyPartition is the partition of a kafka: reply topic the reply
	// goes to; -1 when the request names none (then any partition will do).
	ReplyPartition int32
}

// ErrMalformedRequest is returned for a request record that cannot be
// answered: no reply could be correlated, sent, or bounded in time.
var ErrMalformedRequest = errors.New("reply: malformed request")

// notForwarded are the HTTP headers a request record does not carry:
// hop-by-hop and framing headers, and those the record carries otherwise
// (Content-Type as content-type, Inlet-Timeout as the deadline).
var notForwarded = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Proxy-Connection": true, "Proxy-Authorization": true,
	"Proxy-Authenticate": true, "Content-Length": true, "Host": true, "Content-Type": true, "Inlet-Timeout": true}

// RequestRecord is req's request record on topic: key and inlet-correlation-id
// req.ID, value req.Body, EventID req.ID; inlet-reply-partition
// req.ReplyPartition when the reply goes to Kafka and it is not negative.
// req.Headers are forwarded as
// http-<name> headers, several values joined with ", ", except hop-by-hop
// and framing headers, those named by the Connection header, Content-Type
// (carried by req.ContentType) and Inlet-Timeout. Empty optional fields
// (Service, ContentType, Client, Query) are left out. The record aliases
// req.Body. req is a pointer: a Request passed by value took 300 bytes of
// the stack of every waiting request-reply call (TestRPCStackPerWaitingCall).
func RequestRecord(topic string, req *Request) event.Record {
	hs := make([]event.Header, 0, 6+len(req.Headers))
	hs = append(hs,
		event.Header{Key: HeaderCorrelationID, Value: []byte(req.ID)},
		event.Header{Key: HeaderReplyTo, Value: []byte(req.ReplyTo.String())},
		event.Header{Key: HeaderDeadline, Value: []byte(FormatDeadline(req.Deadline))})
	if req.ReplyTo.Kind == "kafka" && req.ReplyPartition >= 0 {
		hs = append(hs, event.Header{Key: HeaderReplyPartition, Value: strconv.AppendInt(nil, int64(req.ReplyPartition), 10)})
	}
	if req.Service != "" {
		hs = append(hs, event.Header{Key: HeaderService, Value: []byte(req.Service)})
	}
	if req.ContentType != "" {
		hs = append(hs, event.Header{Key: HeaderContentType, Value: []byte(req.ContentType)})
	}
	if req.Client != "" {
		hs = append(hs, event.Header{Key: HeaderClient, Value: []byte(req.Client)})
	}
	if req.Query != "" {
		hs = append(hs, event.Header{Key: HeaderQuery, Value: []byte(req.Query)})
	}
	conn := req.Headers["Connection"]
	for k, vs := range req.Headers {
		if len(vs) == 0 || notForwarded[k] || listed(conn, k) {
			continue
		}
		hs = append(hs, event.Header{Key: HTTPHeaderPrefix + strings.ToLower(k), Value: []byte(strings.Join(vs, ", "))})
	}
	return event.Record{Topic: topic, Key: []byte(req.ID), Value: req.Body, Headers: hs, EventID: req.ID}
}

// listed reports whether the Connection header values conn name header k.
func listed(conn []string, k string) bool {
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}

// ParseRequest decodes a request record. The correlation id comes from its
// header, else from the key; service stands in for a missing or empty
// inlet-service header. Of a header given twice, the first counts (the
// http-* ones add up). A request without a correlation id, or without a
// valid reply address or deadline, is an error wrapping
// ErrMalformedRequest; the Request returned then holds what was read (its
// ID, for a log line). An inlet-reply-partition that is not a partition
// number is ignored (ReplyPartition -1). Body aliases value.
func ParseRequest[H RecordHeader](key, value []byte, headers []H, service string) (Request, error) {
	req := Request{Service: service, Body: value, ReplyPartition: -1}
	var replyTo, deadline string
	var haveReplyTo, haveDeadline, haveID bool
	for _, rh := range headers {
		h := event.Header(rh)
		switch k := h.Key; {
		case k == HeaderCorrelationID:
			if !haveID {
				req.ID, haveID = string(h.Value), true
			}
		case k == HeaderReplyTo:
			if !haveReplyTo {
				replyTo, haveReplyTo = string(h.Value), true
			}
		case k == HeaderDeadline:
			if !haveDeadline {
				deadline, haveDeadline = string(h.Value), true
			}
		case k == HeaderReplyPartition:
			// Not a partition number: the reply goes by its key instead.
			if p, err := strconv.ParseInt(string(h.Value), 10, 32); err == nil && p >= 0 && req.ReplyPartition < 0 {
				req.ReplyPartition = int32(p)
			}
		case k == HeaderService:
			if len(h.Value) > 0 {
				req.Service = string(h.Value)
			}
		case k == HeaderQuery:
			req.Query = string(h.Value)
		case k == HeaderClient:
			if req.Client == "" {
				req.Client = string(h.Value)
			}
		case k == HeaderContentType:
			req.ContentType = string(h.Value)
		case strings.HasPrefix(k, HTTPHeaderPrefix) && len(k) > len(HTTPHeaderPrefix):
			if req.Headers == nil {
				req.Headers = make(http.Header)
			}
			req.Headers.Add(k[len(HTTPHeaderPrefix):], string(h.Value))
		}
	}
	if req.ID == "" {
		req.ID = string(key)
	}
	if req.ID == "" {
		return req, fmt.Errorf("%w: no %s header or record key", ErrMalformedRequest, HeaderCorrelationID)
	}
	if !haveReplyTo {
		return req, fmt.Errorf("%w: no %s header", ErrMalformedRequest, HeaderReplyTo)
	}
	addr, err := ParseAddress(replyTo)
	if err != nil {
		return req, fmt.Errorf("%w: %w", ErrMalformedRequest, err)
	}
	req.ReplyTo = addr
	if !haveDeadline {
		return req, fmt.Errorf("%w: no %s header", ErrMalformedRequest, HeaderDeadline)
	}
	if req.Deadline, err = ParseDeadline(deadline); err != nil {
		return req, fmt.Errorf("%w: %w", ErrMalformedRequest, err)
	}
	return req, nil
}

// ReplyRecord is rep's reply record on topic: key and inlet-correlation-id
// rep.ID, value rep.Body, inlet-status rep.Status, and content-type and
// inlet-error when set; its Partition is -1 (none named: the producer picks
// one; set it to the request's ReplyPartition). The record aliases rep.Body.
func ReplyRecord(topic string, rep Reply) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 4)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderCorrelationID, Value: []byte(rep.ID)},
		kgo.RecordHeader{Key: HeaderStatus, Value: strconv.AppendInt(nil, int64(rep.Status), 10)})
	if rep.ContentType != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(rep.ContentType)})
	}
	if rep.Err != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderError, Value: []byte(rep.Err)})
	}
	return &kgo.Record{Topic: topic, Partition: -1, Key: []byte(rep.ID), Value: rep.Body, Headers: hs}
}

// ParseReply decodes a reply record. The correlation id comes from its
// header, else from the key; of a header given twice, the first counts. A
// missing inlet-status means 0 (200). A reply without a correlation id, or
// with a status that is not a decimal 200 to 599 (or 0), is an error wrapping
// ErrMalformed; the Reply returned then holds the correlation id if there
// was one, so that its caller can be told. Body aliases value.
func ParseReply[H RecordHeader](key, value []byte, headers []H) (Reply, error) {
	rep := Reply{Body: value}
	var status string
	var haveID, haveStatus, haveCT, haveErr bool
	for _, rh := range headers {
		h := event.Header(rh)
		switch h.Key {
		case HeaderCorrelationID:
			if !haveID {
				rep.ID, haveID = string(h.Value), true
			}
		case HeaderStatus:
			if !haveStatus {
				status, haveStatus = string(h.Value), true
			}
		case HeaderContentType:
			if !haveCT {
				rep.ContentType, haveCT = string(h.Value), true
			}
		case HeaderError:
			if !haveErr {
				rep.Err, haveErr = string(h.Value), true
			}
		}
	}
	if rep.ID == "" {
		rep.ID = string(key)
	}
	if rep.ID == "" {
		return Reply{}, fmt.Errorf("%w: no %s header or record key", ErrMalformed, HeaderCorrelationID)
	}
	if haveStatus {
		st, err := strconv.Atoi(status)
		if err != nil || !ValidStatus(st) {
			return Reply{ID: rep.ID}, fmt.Errorf("%w: %s %q: want a final HTTP status, 200 to 599 (or 0, meaning 200)", ErrMalformed, HeaderStatus, status)
		}
		rep.Status = st
	}
	return rep, nil
}
