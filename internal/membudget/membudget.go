// Package membudget bounds the memory that request bodies hold at once,
// across every endpoint of a gateway: ingest and request-reply charge the
// bytes they read to one Budget, so no endpoint can take the memory the
// others need, and past the budget a request is refused (503) rather than
// the process grown.
//
// A Budget may also bound what the requests of one connection hold together
// (NewShared, ConnContext), so that one client, with many HTTP/2 streams or
// many stalled uploads on one connection, cannot take the whole budget.
package membudget

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// ErrExhausted is what TakeConn and a Hold return when the budget cannot
// take what a request read: the request should be answered 503 with
// Retry-After.
var ErrExhausted = errors.New("membudget: in-flight body budget exhausted")

// ErrConnShare is what TakeConn and a Hold return when the connection a
// request came on already holds its share of the budget: the request
// should be refused (429 with Retry-After); other connections still get
// theirs.
var ErrConnShare = errors.New("membudget: connection holds its share of the in-flight body budget")

// ConnShareDivisor is the default share of a budget one connection may
// hold (see NewShared): a quarter.
const ConnShareDivisor = 4

// Budget is a number of bytes that readers reserve and give back. It is
// safe for concurrent use.
type Budget struct {
	max     int64
	perConn int64
	used    atomic.Int64
}

// New returns a budget of max bytes, with no bound per connection.
func New(max int64) *Budget { return &Budget{max: max, perConn: max} }

// NewShared returns a budget of max bytes of which one connection's
// requests (see Conn) may hold at most perConn together.
func NewShared(max, perConn int64) *Budget { return &Budget{max: max, perConn: min(perConn, max)} }

// Take reserves n bytes; it reserves nothing and reports false when that
// would go over the budget.
func (b *Budget) Take(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// Release gives back n bytes taken before.
func (b *Budget) Release(n int64) { b.used.Add(-n) }

// TakeConn reserves n bytes for a request of connection c (nil: of no
// known connection, bound only by the budget). It reserves nothing and
// fails with ErrConnShare when c would hold more than its share, with
// ErrExhausted when the budget would be over.
func (b *Budget) TakeConn(c *Conn, n int64) error {
	if c != nil && c.used.Add(n) > b.perConn {
		c.used.Add(-n)
		return ErrConnShare
	}
	if !b.Take(n) {
		if c != nil {
			c.used.Add(-n)
		}
		return ErrExhausted
	}
	return nil
}

// ReleaseConn gives back n bytes taken before with TakeConn(c, n).
func (b *Budget) ReleaseConn(c *Conn, n int64) {
	if c != nil {
		c.used.Add(-n)
	}
	b.Release(n)
}

// Used is the bytes reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Max is the budget's size.
func (b *Budget) Max() int64 { return b.max }

// PerConn is what one connection's requests may hold together.
func (b *Budget) PerConn() int64 { return b.perConn }

// Conn is the tally of what one connection's requests hold. It is safe for
// concurrent use (HTTP/2 runs a connection's requests at once).
type Conn struct{ used atomic.Int64 }

// Used is the bytes the connection's requests hold now.
func (c *Conn) Used() int64 { return c.used.Load() }

type connKey struct{}

// ConnContext returns ctx with a new Conn: it has the signature of
// http.Server.ConnContext, so that every request of one connection (HTTP/1
// or HTTP/2) finds the same Conn with ConnFrom.
func ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, new(Conn))
}

// ConnFrom is the Conn ctx carries (a request's context carries its
// connection's), or nil.
func ConnFrom(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// Hold is what one request holds of a budget. It is not safe for
// concurrent use.
type Hold struct {
	B     *Budget
	Conn  *Conn // nil: bound only by B
	Taken int64
}

// Take reserves n more bytes (see TakeConn).
func (h *Hold) Take(n int64) error {
	if err := h.B.TakeConn(h.Conn, n); err != nil {
		return err
	}
	h.Taken += n
	return nil
}

// Drop gives back n of the bytes the hold took (a buffer it is done with).
func (h *Hold) Drop(n int64) {
	h.B.ReleaseConn(h.Conn, n)
	h.Taken -= n
}

// Release gives back everything the hold took.
func (h *Hold) Release() {
	h.B.ReleaseConn(h.Conn, h.Taken)
	h.Taken = 0
}
