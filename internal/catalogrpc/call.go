package catalogrpc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/event"
)

// callError is why a call failed, with the gRPC code both front ends report
// (Thrift's CatalogError uses the same numbers).
type callError struct {
	code codes.Code
	msg  string
}

func (e *callError) Error() string { return e.msg }

func failf(code codes.Code, format string, args ...any) *callError {
	return &callError{code: code, msg: fmt.Sprintf(format, args...)}
}

// codeOf is the gRPC code of a call's error (OK for nil).
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var ce *callError
	if errors.As(err, &ce) {
		return ce.code
	}
	return codes.Internal
}

// creds are a call's credentials: a client id, and its secret or a session
// token.
type creds struct{ id, token string }

// authenticate checks c; once credentials pass, the connection the call
// came on is an authenticated one (see conn).
func (s *Server) authenticate(ctx context.Context, c creds) (auth.Principal, error) {
	if c.token == "" {
		return auth.Principal{}, authFailure(auth.ErrMissing, c.id)
	}
	cn := connOf(ctx)
	p, err := s.au.AuthenticateFrom(cn.source(), c.id, c.token)
	if err != nil {
		return p, authFailure(err, c.id)
	}
	if cn != nil {
		cn.authenticated()
	}
	return p, nil
}

// authorize admits one call of p, under its rate, for group (when not "");
// write calls need an admin client.
func (s *Server) authorize(p auth.Principal, group string, write bool) error {
	id := ""
	if p.Client != nil {
		id = p.Client.ID
	}
	if retry, err := s.au.Allow(p, 1); err != nil {
		if errors.Is(err, auth.ErrRateLimited) {
			return failf(codes.ResourceExhausted, "rate limited: client %s is over its rate; retry after %v", event.Quote(id), retry.Round(time.Millisecond))
		}
		if ce := authFailure(err, id); ce.code == codes.Unauthenticated {
			return ce // e.g. the client was removed from the file since
		}
		s.log.Error("catalog RPC: admitting a call failed", "client", id, "err", err)
		return failf(codes.Internal, "internal: admitting the call failed")
	}
	if write && (p.Client == nil || !p.Client.Admin) {
		return failf(codes.PermissionDenied, "permission denied: client %s is not an admin; Upsert and Block need one", event.Quote(id))
	}
	if group != "" {
		if err := s.au.AllowGroup(p, group); err != nil {
			if errors.Is(err, auth.ErrForbidden) {
				return failf(codes.PermissionDenied, "permission denied: client %s may not use group %s", event.Quote(id), event.Quote(group))
			}
			s.log.Error("catalog RPC: checking a group failed", "client", id, "group", group, "err", err)
			return failf(codes.Internal, "internal: checking the group failed")
		}
	}
	return nil
}

// authFailure says why credentials were refused, never quoting the secret
// or token, nor saying whether a client id exists: an unknown client and a
// wrong secret get one answer.
func authFailure(err error, id string) *callError {
	var msg string
	switch {
	case errors.Is(err, auth.ErrMissing):
		msg = "no credentials: give the client id and its secret or a session token"
	case errors.Is(err, auth.ErrBadCredentials):
		msg = "no client has these credentials"
	case errors.Is(err, auth.ErrThrottled):
		return failf(codes.ResourceExhausted, "too many failed credentials from this address; retry after %d s", auth.RetryAfterSeconds(auth.RetryAfter(err)))
	case errors.Is(err, auth.ErrExpired):
		msg = "session token expired; present the client's secret for a new one"
	case errors.Is(err, auth.ErrTampered):
		msg = "session token invalid: not one this server signed"
	case errors.Is(err, auth.ErrWrongClient):
		msg = fmt.Sprintf("session token of another client than %s", event.Quote(id))
	default:
		return failf(codes.Internal, "internal: checking the credentials failed")
	}
	return &callError{code: codes.Unauthenticated, msg: "unauthenticated: " + msg}
}

// catalogFailure maps a catalog error.
func catalogFailure(ctx context.Context, err error, k catalog.Key) *callError {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return failf(codes.DeadlineExceeded, "deadline exceeded: the catalog did not answer in time for %s/%s", event.Quote(k.Group), event.Quote(k.Name))
	case errors.Is(ctx.Err(), context.Canceled):
		return failf(codes.Canceled, "canceled")
	case errors.Is(err, catalog.ErrNotFound):
		return failf(codes.NotFound, "not found: the catalog has no event type %s in group %s", event.Quote(k.Name), event.Quote(k.Group))
	case errors.Is(err, context.DeadlineExceeded):
		return failf(codes.DeadlineExceeded, "deadline exceeded: %v", err)
	}
	for _, m := range catalogCodes {
		if errors.Is(err, m.err) {
			return failf(m.code, "%s: %v%s", m.what, err, m.hint)
		}
	}
	return failf(codes.Internal, "internal: %v", err)
}

// catalogCodes is the one mapping between the catalog's errors and the
// codes both front ends answer them with (Thrift's CatalogError uses the
// same numbers): the server answers a catalog error with its code, and
// Client turns the code back into the catalog error.
var catalogCodes = []struct {
	err        error
	code       codes.Code
	what, hint string // the answer's prefix, and what it ends with
}{
	{catalog.ErrNotFound, codes.NotFound, "not found", ""},
	{catalog.ErrInvalid, codes.InvalidArgument, "invalid argument", ""},
	{catalog.ErrUnavailable, codes.Unavailable, "unavailable", "; retry"},
}

// callCtx bounds the work of one call by CallTimeout.
func (s *Server) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// cachedCatalog is a Catalog that can answer a key from memory alone
// (*catalog.Catalog): a hit then needs no timed context.
type cachedCatalog interface {
	Cached(k catalog.Key) (catalog.Entry, bool)
}

// dataType is inf.Data/DataType: the entry of (group, name), assigned on
// first sight in catalog mode open. An empty group is the client's default
// group, else the catalog's.
func (s *Server) dataType(ctx context.Context, c creds, group, name string) (catalog.Entry, auth.Principal, error) {
	p, err := s.authenticate(ctx, c)
	if err != nil {
		return catalog.Entry{}, p, err
	}
	if group == "" {
		if p.Client != nil {
			group = p.Client.Group()
		}
		if group == "" {
			group = s.cat.DefaultGroup()
		}
	}
	if err := s.authorize(p, group, false); err != nil {
		return catalog.Entry{}, p, err
	}
	k := catalog.Key{Group: group, Name: name}
	if name == "" {
		return catalog.Entry{}, p, failf(codes.InvalidArgument, "invalid argument: the event name is empty")
	}
	if err := checkNames(k); err != nil {
		return catalog.Entry{}, p, err
	}
	if cc, ok := s.cat.(cachedCatalog); ok {
		if e, hit := cc.Cached(k); hit {
			return e, p, nil
		}
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	e, err := s.cat.Lookup(ctx, k)
	if err != nil {
		return e, p, catalogFailure(ctx, err, k)
	}
	return e, p, nil
}

// get is Catalog.Get.
func (s *Server) get(ctx context.Context, c creds, k catalog.Key) (catalog.Entry, auth.Principal, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	p, err := s.authenticate(ctx, c)
	if err != nil {
		return catalog.Entry{}, p, err
	}
	if err := s.authorize(p, k.Group, false); err != nil {
		return catalog.Entry{}, p, err
	}
	if err := checkKey(k); err != nil {
		return catalog.Entry{}, p, err
	}
	e, err := s.cat.Get(ctx, k)
	if err != nil {
		return e, p, catalogFailure(ctx, err, k)
	}
	return e, p, nil
}

func checkKey(k catalog.Key) error {
	if k.Group == "" || k.Name == "" {
		return failf(codes.InvalidArgument, "invalid argument: give both the group and the name")
	}
	return checkNames(k)
}

// checkNames applies ingest's rule on names (event.CheckName) to k's group
// and name: the catalog's RPC takes no key that no event could have.
func checkNames(k catalog.Key) error {
	if err := event.CheckName("group", k.Group); err != nil {
		return failf(codes.InvalidArgument, "invalid argument: %v", err)
	}
	if err := event.CheckName("name", k.Name); err != nil {
		return failf(codes.InvalidArgument, "invalid argument: %v", err)
	}
	return nil
}

// List paging: page sizes and how many store pages one call may scan for a
// client limited to some groups.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
	maxListScans    = 8
)

// pageToken is what a List page token carries: the request's group and the
// last key returned. It is opaque to clients (base64 of JSON).
type pageToken struct {
	V     int    `json:"v"`
	Query string `json:"q"`
	Group string `json:"g"`
	Name  string `json:"n"`
}

func encodePageToken(query string, after catalog.Key) string {
	b, _ := json.Marshal(pageToken{V: 1, Query: query, Group: after.Group, Name: after.Name})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePageToken(s, query string) (catalog.Key, error) {
	if s == "" {
		return catalog.Key{}, nil
	}
	var t pageToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.V != 1 || t.Name == "" {
		return catalog.Key{}, failf(codes.InvalidArgument, "invalid argument: the page token is not one this server gave; start again with an empty one")
	}
	if t.Query != query {
		return catalog.Key{}, failf(codes.InvalidArgument, "invalid argument: the page token is of a List of group %s, not %s", event.Quote(t.Query), event.Quote(query))
	}
	return catalog.Key{Group: t.Group, Name: t.Name}, nil
}

// list is Catalog.List: a page of entries in (group, name) order, and the
// token of the next page ("" after the last). With group "", a client
// limited to some groups sees only theirs.
func (s *Server) list(ctx context.Context, c creds, group string, pageSize int32, token string) ([]catalog.Entry, string, auth.Principal, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	p, err := s.authenticate(ctx, c)
	if err != nil {
		return nil, "", p, err
	}
	if err := s.authorize(p, group, false); err != nil {
		return nil, "", p, err
	}
	if err := event.CheckName("group", group); err != nil {
		return nil, "", p, failf(codes.InvalidArgument, "invalid argument: %v", err)
	}
	size := int(pageSize)
	switch {
	case size < 0:
		return nil, "", p, failf(codes.InvalidArgument, "invalid argument: page size %d is negative", size)
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	after, err := decodePageToken(token, group)
	if err != nil {
		return nil, "", p, err
	}
	filter := group == "" && p.Client != nil && len(p.Client.Groups) > 0
	var out []catalog.Entry
	for scan := 0; scan < maxListScans; scan++ {
		// One more than asked, to know whether there is a next page.
		got, err := s.cat.List(ctx, group, after, size+1-len(out))
		if err != nil {
			return nil, "", p, catalogFailure(ctx, err, catalog.Key{Group: group})
		}
		more := len(got) > size-len(out)
		if more {
			got = got[:size-len(out)]
		}
		for _, e := range got {
			if filter && s.au.AllowGroup(p, e.Group) != nil {
				continue
			}
			out = append(out, e)
		}
		if len(got) > 0 {
			after = got[len(got)-1].Key()
		}
		if !more {
			return out, "", p, nil
		}
		if len(out) == size {
			break
		}
	}
	return out, encodePageToken(group, after), p, nil
}

// Change is what Catalog.Upsert (and `inlet catalog set`) changes of an
// entry: nil fields keep their value (are empty in a new entry); status ""
// keeps the status (planned in a new entry). A schema of "" removes it.
type Change struct {
	Key         catalog.Key
	DisplayName *string
	Schema      *string
	Status      catalog.Status
}

// apply is e (found: it exists) with c's changes; for catalog.Update, one
// read-modify-write in the store, so that two admins changing different
// fields at once both get their change.
func (c Change) apply(e catalog.Entry, found bool) (catalog.Entry, error) {
	if !found {
		e.Status = catalog.StatusPlanned
	}
	if c.DisplayName != nil {
		e.DisplayName = *c.DisplayName
	}
	if c.Schema != nil {
		e.Schema = nil
		if *c.Schema != "" {
			e.Schema = json.RawMessage(*c.Schema)
		}
	}
	if c.Status != "" {
		e.Status = c.Status
	}
	return e, nil
}

// upsert is a Catalog.Upsert request.
type upsert struct {
	Change
	// badStatus is a status number that is none of the Status values:
	// refused once the credentials have passed.
	badStatus *int32
}

// statusOf is the catalog status whose value in m (pbStatuses,
// thriftStatuses) is v; "" for none.
func statusOf[T comparable](m map[catalog.Status]T, v T) catalog.Status {
	for st, w := range m {
		if w == v {
			return st
		}
	}
	return ""
}

// upsert is Catalog.Upsert (admin clients only).
func (s *Server) upsert(ctx context.Context, c creds, u upsert) (catalog.Entry, auth.Principal, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	p, err := s.authenticate(ctx, c)
	if err != nil {
		return catalog.Entry{}, p, err
	}
	if err := s.authorize(p, u.Key.Group, true); err != nil {
		return catalog.Entry{}, p, err
	}
	if err := checkKey(u.Key); err != nil {
		return catalog.Entry{}, p, err
	}
	if u.badStatus != nil {
		return catalog.Entry{}, p, failf(codes.InvalidArgument, "invalid argument: status %d is not one of the Status values", *u.badStatus)
	}
	e, err := s.cat.Update(ctx, u.Key, u.apply)
	if err != nil {
		return e, p, catalogFailure(ctx, err, u.Key)
	}
	return e, p, nil
}

// block is Catalog.Block (admin clients only).
func (s *Server) block(ctx context.Context, c creds, k catalog.Key) (catalog.Entry, auth.Principal, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	p, err := s.authenticate(ctx, c)
	if err != nil {
		return catalog.Entry{}, p, err
	}
	if err := s.authorize(p, k.Group, true); err != nil {
		return catalog.Entry{}, p, err
	}
	if err := checkKey(k); err != nil {
		return catalog.Entry{}, p, err
	}
	e, err := s.cat.Block(ctx, k)
	if err != nil {
		return e, p, catalogFailure(ctx, err, k)
	}
	return e, p, nil
}
