package logship

import (
	"bytes"
	"context"
	"errors"
	"sync"
)

// PipeSink is a Sink that pipelines, as KafkaSink does, for the tests:
// its sends wait, in order, until Answer answers them.
type PipeSink struct {
	mu      sync.Mutex
	pending []pipeSend
	got     [][]byte
	most    int // pending sends at most
	failNow int // sends to fail at once
	timed   int // sends whose context had a deadline
}

// Timed is the number of sends whose context had a deadline: franz-go
// fails a record whose context ends, out of order with those sent after
// it, so sends to a pipelining sink must have none.
func (p *PipeSink) Timed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timed
}

// FailNext makes the next n sends fail at once, before send returns (as
// franz-go fails a record it cannot buffer).
func (p *PipeSink) FailNext(n int) {
	p.mu.Lock()
	p.failNow = n
	p.mu.Unlock()
}

type pipeSend struct {
	recs [][]byte
	done func(error)
}

var _ pipeliner = (*PipeSink)(nil)

// ErrPipeDown is what a failed Answer answers.
var ErrPipeDown = errors.New("pipe sink down")

func (p *PipeSink) send(ctx context.Context, recs [][]byte, done func(error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := ctx.Deadline(); ok {
		p.timed++
	}
	if p.failNow > 0 {
		p.failNow--
		done(ErrPipeDown)
		return
	}
	p.pending = append(p.pending, pipeSend{recs, done})
	p.most = max(p.most, len(p.pending))
}

func (p *PipeSink) buffered() int { return 1 << 20 }

func (p *PipeSink) Write(ctx context.Context, recs [][]byte) error {
	errc := make(chan error, 1)
	p.send(ctx, recs, func(err error) { errc <- err })
	return <-errc
}

func (p *PipeSink) Close(context.Context) error { return nil }

// Answer answers every pending send in order: acknowledged (keeping their
// records), or failed, as franz-go fails every buffered record of a
// partition at once. It returns how many it answered.
func (p *PipeSink) Answer(ok bool) int {
	p.mu.Lock()
	sends := p.pending
	p.pending = nil
	if ok {
		for _, s := range sends {
			for _, r := range s.recs {
				p.got = append(p.got, bytes.Clone(r))
			}
		}
	}
	p.mu.Unlock()
	for _, s := range sends {
		if ok {
			s.done(nil)
		} else {
			s.done(ErrPipeDown)
		}
	}
	return len(sends)
}

// Pending is how many sends wait for an answer now, and at most so far.
func (p *PipeSink) Pending() (now, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending), p.most
}

// Got is the records acknowledged, in order.
func (p *PipeSink) Got() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.got...)
}

// MaxFlights is the most batches a handler keeps in flight to a sink that pipelines.
const MaxFlights = maxFlights
