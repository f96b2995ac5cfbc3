package relay

import (
	"context"
	"sync"
)

// Replay is a Source over a stream that can be read only once (a queue, a
// followed file): it keeps the batches yielded and not yet settled (no
// more than the engine has in flight), yields them again after Rewind,
// from their first record not settled, and tells Done of what is settled
// in the batches Read yielded.
type Replay[R any] struct {
	// Read yields the stream's next batch, as Source.Next.
	Read func(ctx context.Context) (Batch[R], error)
	// Done is told that records [from, to) of b, a batch Read yielded,
	// are settled, as Source.Settled.
	Done func(b Batch[R], from, to int, err error)

	mu   sync.Mutex // Settled runs beside Next
	kept []kept[R]  // yielded and not settled, in order
	at   int        // how many of kept were yielded since the last Rewind
}

type kept[R any] struct {
	b   Batch[R]
	off int // its first record not settled
}

// Next yields the kept batches not yielded since the last Rewind, then
// what Read yields.
func (r *Replay[R]) Next(ctx context.Context) (Batch[R], error) {
	r.mu.Lock()
	if r.at < len(r.kept) {
		k := r.kept[r.at]
		r.at++
		r.mu.Unlock()
		return Batch[R]{Records: k.b.Records[k.off:], Meta: k.b.Meta, Time: k.b.Time}, nil
	}
	r.mu.Unlock()
	b, err := r.Read(ctx)
	if err != nil {
		return b, err
	}
	r.mu.Lock()
	r.kept = append(r.kept, kept[R]{b: b})
	r.at++
	r.mu.Unlock()
	return b, nil
}

// Rewind makes Next yield the kept batches again.
func (r *Replay[R]) Rewind() error {
	r.mu.Lock()
	r.at = 0
	r.mu.Unlock()
	return nil
}

// Settled tells Done, and forgets the batch once it is all settled.
func (r *Replay[R]) Settled(y Batch[R], from, to int, err error) {
	r.mu.Lock()
	k := &r.kept[0]
	// y, as Next yielded it, is k.b from a record on; from and to count
	// in y, and it may be settled in several steps (a record at a time).
	b, base := k.b, len(k.b.Records)-len(y.Records)
	if k.off = base + to; k.off == len(k.b.Records) {
		r.kept[0] = kept[R]{}
		r.kept = r.kept[1:]
		r.at--
	}
	r.mu.Unlock()
	r.Done(b, base+from, base+to, err)
}

// Unsettled returns the records yielded and not settled, in order: what a
// stopped engine left (e.g. to keep them for the next run).
func (r *Replay[R]) Unsettled() []R {
	r.mu.Lock()
	defer r.mu.Unlock()
	var recs []R
	for _, k := range r.kept {
		recs = append(recs, k.b.Records[k.off:]...)
	}
	return recs
}
