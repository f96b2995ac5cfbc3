package catalogrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/inlet-dev/inlet/api/gen/pb/catalogv1"
	"github.com/inlet-dev/inlet/internal/catalog"
)

// Client calls the Catalog service of a running inlet over gRPC, with a
// client's credentials: its secret on the first call, then the session
// token of the last answer. Its errors wrap the catalog's (catalog.ErrNotFound,
// ErrInvalid, ErrUnavailable) for the codes that stand for them, and say
// what to do for the others. It is not safe for concurrent use.
type Client struct {
	addr  string
	conn  *grpc.ClientConn
	cl    catalogv1.CatalogClient
	id    string
	token string
}

// Dial makes a Client of the Catalog service at addr (an inlet's
// --grpc-listen); it connects on the first call.
func Dial(addr, id, secret string) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return &Client{addr: addr, conn: conn, cl: catalogv1.NewCatalogClient(conn), id: id, token: secret}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) creds() *catalogv1.Credentials {
	return &catalogv1.Credentials{ClientId: c.id, Token: c.token}
}

// answered takes the session token of an answer for the next calls.
func (c *Client) answered(s *catalogv1.Session) {
	if s.GetToken() != "" {
		c.token = s.GetToken()
	}
}

// fail makes a gRPC error one line that says what to do.
func (c *Client) fail(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg, code := st.Message(), st.Code()
	switch code {
	case codes.Unavailable:
		// Not answered by the server (which answers over a ready
		// connection), but by the connection that did not come up.
		if c.conn.GetState() != connectivity.Ready {
			return fmt.Errorf("cannot reach the catalog at %s (%s): is inlet running with --grpc-listen %s?", c.addr, msg, c.addr)
		}
	case codes.Unauthenticated:
		return fmt.Errorf("%s: check --client-id and the secret (--secret-file or INLET_SECRET) against the clients file of the inlet at %s", msg, c.addr)
	case codes.PermissionDenied:
		return fmt.Errorf("%s (set, import: give an admin client; inlet clients add --admin)", msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("no answer from %s in time (%s): raise --timeout or check the server", c.addr, msg)
	}
	for _, m := range catalogCodes {
		if m.code == code {
			return fmt.Errorf("%w: %s", m.err, msg)
		}
	}
	return fmt.Errorf("%s (gRPC %s)", msg, code)
}

// Get is Catalog.Get.
func (c *Client) Get(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	rp, err := c.cl.Get(ctx, &catalogv1.GetRequest{Auth: c.creds(), Group: k.Group, Name: k.Name})
	if err != nil {
		return catalog.Entry{}, c.fail(err)
	}
	c.answered(rp.GetSession())
	return fromPB(rp.GetEntry()), nil
}

// Each calls each with the entries of group ("" for all) in (group, name)
// order, asking for page at a time, until each returns false.
func (c *Client) Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error {
	token := ""
	for {
		rp, err := c.cl.List(ctx, &catalogv1.ListRequest{Auth: c.creds(), Group: group, PageSize: int32(page), PageToken: token})
		if err != nil {
			return c.fail(err)
		}
		c.answered(rp.GetSession())
		for _, e := range rp.GetEntries() {
			if !each(fromPB(e)) {
				return nil
			}
		}
		if token = rp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

// Set is Catalog.Upsert: it changes what u says of an entry, creating it
// if need be.
func (c *Client) Set(ctx context.Context, u Change) (catalog.Entry, error) {
	rq := &catalogv1.UpsertRequest{Auth: c.creds(), Group: u.Key.Group, Name: u.Key.Name, DisplayName: u.DisplayName, Schema: u.Schema, Status: pbStatuses[u.Status]}
	rp, err := c.cl.Upsert(ctx, rq)
	if err != nil {
		return catalog.Entry{}, c.fail(err)
	}
	c.answered(rp.GetSession())
	return fromPB(rp.GetEntry()), nil
}

// fromPB is the inverse of pbEntry.
func fromPB(e *catalogv1.Entry) catalog.Entry {
	out := catalog.Entry{Group: e.GetGroup(), Name: e.GetName(), Code: e.GetCode(), DisplayName: e.GetDisplayName(),
		Created: time.UnixMilli(e.GetCreatedUnixMs()).UTC(), Updated: time.UnixMilli(e.GetUpdatedUnixMs()).UTC()}
	if e.GetSchema() != "" {
		out.Schema = json.RawMessage(e.GetSchema())
	}
	out.Status = statusOf(pbStatuses, e.GetStatus())
	return out
}
