// Package membudget bounds the memory that request bodies hold at once,
// across every endpoint of a gateway: ingest and request-reply charge the
// bytes they read to one Budget, so no endpoint can take the memory the
// others need, and past the budget a request is refused (503) rather than
// the process grown.
package membudget

import (
	"errors"
	"io"
	"sync/atomic"
)

// ErrExhausted is what a Reader returns when the budget cannot take what it
// read: the request should be answered 503 with Retry-After.
var ErrExhausted = errors.New("membudget: in-flight body budget exhausted")

// Budget is a number of bytes that readers reserve and give back. It is
// safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// New returns a budget of max bytes.
func New(max int64) *Budget { return &Budget{max: max} }

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

// Used is the bytes reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Max is the budget's size.
func (b *Budget) Max() int64 { return b.max }

// Reader charges what it reads from R to B, counting it in Taken, and fails
// with ErrExhausted once B cannot take more. The owner releases Taken when
// it is done with what it read. It is not safe for concurrent use.
type Reader struct {
	R     io.Reader
	B     *Budget
	Taken int64
}

func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.R.Read(p)
	if n > 0 {
		if !r.B.Take(int64(n)) {
			return 0, ErrExhausted
		}
		r.Taken += int64(n)
	}
	return n, err
}
