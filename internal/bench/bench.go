// Package bench is a load generator that measures honestly: in one warmed-up
// process, open loop at a paced rate with latency taken from each request's
// intended send time (no coordinated omission), or closed loop with a fixed
// number of workers; figures come from HdrHistogram, in a report.Report.
//
// What is measured is a Target: one function that sends one request and
// waits for its answer, or an AsyncTarget, which starts one and reports it
// through a callback, so that many requests in flight cost no goroutine
// each (RunAsync). The targets (HTTP, Kafka, the catalog's gRPC and Thrift)
// are in package loadclient; the reports' formats in package report.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/internal/bench/report"
)

// Result is the outcome of one request, as a Target reports it.
type Result struct {
	// Status is the server's answer, such as "200" or "503" for HTTP; empty
	// when no answer came (then Err is set).
	Status string
	// OK says the answer is a success (for HTTP, a 2xx status).
	OK bool
	// Err is a client-side failure: no answer was had (connection refused,
	// timeout, reset). Classify names its kind.
	Err error
	// Sent and Received are the payload bytes of the request and the answer.
	Sent, Received int64
	// Events is the number of events the request carried.
	Events int
}

// Target sends one request and waits for its answer. It is called from many
// goroutines at once, so it must be safe for concurrent use, and it must
// return soon after ctx ends (ctx carries the per-request timeout).
type Target func(ctx context.Context) Result

// AsyncTarget starts one request and returns at once, without waiting for
// the answer: with thousands of requests in flight, a goroutine blocked in a
// Target per request costs the generator more memory and GC than the
// requests themselves (see RunAsync). done is called exactly once with the
// outcome, from any goroutine and possibly before AsyncTarget returns; it
// must not block. The request must end at its deadline (a zero deadline is
// none), give or take a few milliseconds (a target may expire its requests
// in sweeps), and soon after ctx ends, with an error that Classify names.
// An AsyncTarget must be safe for concurrent use.
type AsyncTarget func(ctx context.Context, deadline time.Time, done func(Result))

// Blocking makes a Target of an AsyncTarget: it starts the request with
// ctx's deadline and waits for it.
func Blocking(t AsyncTarget) Target {
	return func(ctx context.Context) Result {
		ch := make(chan Result, 1)
		deadline, _ := ctx.Deadline()
		t(ctx, deadline, func(r Result) { ch <- r })
		return <-ch
	}
}

// Config is a run of a Target.
type Config struct {
	// Rate is the open-loop rate in requests per second; 0 runs a closed loop.
	Rate float64
	// StartRate, if positive, makes the open loop ramp linearly from StartRate
	// (held during the warmup) to Rate over Duration.
	StartRate float64
	// Workers bounds the requests in flight. In a closed loop each worker
	// sends its next request as soon as the previous one is answered.
	Workers int
	// Warmup is run before Duration and is left out of every figure.
	Warmup   time.Duration
	Duration time.Duration
	// Timeout bounds one request.
	Timeout time.Duration
	// MaxLag: in an open loop, a request that cannot start within MaxLag of
	// its intended time (every worker busy) is dropped and counted as such:
	// the generator, not the server, fell behind.
	MaxLag time.Duration
	// Progress, if set, is called about once a second from one goroutine
	// while the run lasts. It must not block.
	Progress func(Progress)
}

// DefaultConfig is a closed loop of 100 workers for 10 s after a 2 s warmup.
func DefaultConfig() Config {
	return Config{Workers: 100, Warmup: 2 * time.Second, Duration: 10 * time.Second, Timeout: 10 * time.Second, MaxLag: time.Second}
}

// Open says whether the run is an open loop.
func (c Config) Open() bool { return c.Rate > 0 }

// Pacer is the open loop's pacer: StartRate during the warmup, then a
// ramp to Rate over Duration (or Rate throughout).
func (c Config) Pacer() Pacer {
	if c.StartRate > 0 && c.StartRate != c.Rate {
		return Pacer{From: c.StartRate, To: c.Rate, Hold: c.Warmup, Ramp: c.Duration}
	}
	return ConstantPacer(c.Rate)
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Rate < 0:
		return errors.New("bench: rate must not be negative")
	case c.StartRate < 0:
		return errors.New("bench: start rate must not be negative")
	case c.StartRate > 0 && c.Rate == 0:
		return errors.New("bench: a start rate needs a rate to ramp to (a ramp is an open loop)")
	case c.Workers <= 0:
		return errors.New("bench: workers must be positive")
	case c.Workers > 100000:
		return errors.New("bench: at most 100000 workers")
	case c.Duration <= 0:
		return errors.New("bench: duration must be positive")
	case c.Duration+c.Warmup > 24*time.Hour:
		return errors.New("bench: at most 24h per run")
	case c.Warmup < 0:
		return errors.New("bench: warmup must not be negative")
	case c.Timeout <= 0:
		return errors.New("bench: timeout must be positive")
	case c.Timeout > maxLatency:
		return fmt.Errorf("bench: timeout must be at most %v (the histogram's range)", maxLatency)
	case c.Open() && c.MaxLag <= 0:
		return errors.New("bench: max lag must be positive")
	}
	if c.Open() {
		return c.Pacer().Validate()
	}
	return nil
}

// Progress is a run's state, as Config.Progress sees it once a second.
type Progress struct {
	Elapsed time.Duration // since the start of the warmup
	Warmup  bool          // still warming up: the figures below are empty
	// Rate is the requests answered (or failed) per second over the last
	// interval, warmup included.
	Rate float64
	// Requests, Errors (client failures and answers that are not a
	// success) and Dropped count the measured part so far.
	Requests, Errors, Dropped int64
	P99                       time.Duration
}

// Run runs target as cfg says and reports. It blocks until the run is over:
// the last requests are waited for (each at most cfg.Timeout). If ctx ends
// first, Run stops sending, cancels the requests in flight and reports what
// was measured until then, with Report.Interrupted set; it returns an error
// only for an invalid cfg.
func Run(ctx context.Context, cfg Config, target Target) (*report.Report, error) {
	return runTarget(ctx, cfg, target, nil)
}

// RunAsync is Run for an asynchronous target. Its open loop is one pacing
// goroutine that starts each request at its intended time, if fewer than
// cfg.Workers are in flight, and whose completions are recorded as they
// come: no goroutine waits per request, so thousands in flight cost only
// the target's own state. A closed loop runs cfg.Workers goroutines, each
// waiting for its request (see Blocking).
func RunAsync(ctx context.Context, cfg Config, target AsyncTarget) (*report.Report, error) {
	return runTarget(ctx, cfg, Blocking(target), target)
}

// runTarget is Run; async, if set, is the open loop's target instead of target.
func runTarget(ctx context.Context, cfg Config, target Target, async AsyncTarget) (*report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	rec := newRecorder(cfg, t0)
	a := &attack{cfg: cfg, target: target, rec: rec, t0: t0, end: cfg.Warmup + cfg.Duration}
	if cfg.Open() {
		a.pacer = cfg.Pacer()
	}

	var workers sync.WaitGroup
	switch {
	case cfg.Open() && async != nil:
		workers.Go(func() { a.openAsync(ctx, async) })
	case cfg.Open():
		for range cfg.Workers {
			workers.Go(func() { a.open(ctx) })
		}
	default:
		for range cfg.Workers {
			workers.Go(func() { a.closed(ctx) })
		}
	}
	stopProgress := make(chan struct{})
	var progress sync.WaitGroup
	if cfg.Progress != nil {
		progress.Go(func() { a.progress(stopProgress) })
	}
	workers.Wait()
	close(stopProgress)
	progress.Wait()

	stop := cfg.Warmup + cfg.Duration
	if at := time.Duration(a.stoppedAt.Load()); at > 0 && at < stop {
		rec.interrupted = true
		stop = at
	}
	return rec.report(a.pacer, stop), nil
}

// attack is the state a run's workers share.
type attack struct {
	cfg    Config
	target Target
	rec    *recorder
	pacer  Pacer
	t0     time.Time
	end    time.Duration // after t0: no request is sent from then on

	next      atomic.Int64 // open loop: the next request number to claim
	late      atomic.Int64 // open loop: measured requests dropped by a worker
	stoppedAt atomic.Int64 // when ctx ended, after t0
}

// open is one open-loop worker: it claims the next request due, waits for
// its time, and sends it, or drops it if it is already MaxLag late.
func (a *attack) open(ctx context.Context) {
	sleep := newSleeper()
	defer sleep.close()
	for {
		off, intended, ok := a.claim(ctx, sleep)
		if !ok {
			return
		}
		now := time.Now()
		if now.Sub(intended) > a.cfg.MaxLag {
			a.drop(off)
			continue
		}
		a.send(ctx, intended, now)
	}
}

// claim takes the next request of the open loop and waits for its intended
// time. It reports false when no request is left or ctx ended.
func (a *attack) claim(ctx context.Context, sleep *sleeper) (off time.Duration, intended time.Time, ok bool) {
	off = a.pacer.Offset(a.next.Add(1) - 1)
	if off >= a.end {
		return off, intended, false
	}
	intended = a.t0.Add(off)
	if !sleep.until(ctx, intended) {
		a.stopped()
		return off, intended, false
	}
	return off, intended, true
}

// drop counts the request due at off as dropped, if it is measured.
func (a *attack) drop(off time.Duration) {
	if off >= a.cfg.Warmup {
		a.late.Add(1)
	}
}

// openAsync is the open loop of an asynchronous target: it starts each
// request at its intended time and returns when the last one is done. A
// request that finds cfg.Workers in flight waits for one to end, until
// MaxLag after its intended time; then it is dropped, as in open.
func (a *attack) openAsync(ctx context.Context, target AsyncTarget) {
	sleep := newSleeper()
	defer sleep.close()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	slots := make(chan struct{}, a.cfg.Workers) // a token per request in flight
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		off, intended, ok := a.claim(ctx, sleep)
		if !ok {
			return
		}
		if !a.acquire(ctx, slots, wait, intended.Add(a.cfg.MaxLag)) {
			if ctx.Err() != nil {
				a.stopped()
				return
			}
			a.drop(off)
			continue
		}
		started := time.Now()
		inflight.Add(1)
		target(ctx, started.Add(a.cfg.Timeout), func(res Result) {
			done := time.Now()
			<-slots
			a.outcome(ctx, intended, started, done, res)
			inflight.Done()
		})
	}
}

// acquire takes a slot in slots, waiting until by at most; it reports
// false if none freed up by then, or if ctx ended.
func (a *attack) acquire(ctx context.Context, slots chan struct{}, wait *time.Timer, by time.Time) bool {
	d := time.Until(by)
	if d < 0 {
		return false // the generator itself is late: as in open, a drop
	}
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	wait.Reset(d)
	defer wait.Stop()
	select {
	case slots <- struct{}{}:
		return true
	case <-wait.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// closed is one closed-loop worker: it sends back to back.
func (a *attack) closed(ctx context.Context) {
	for {
		now := time.Now()
		if ctx.Err() != nil {
			a.stopped()
			return
		}
		if now.Sub(a.t0) >= a.end {
			return
		}
		a.send(ctx, now, now)
	}
}

func (a *attack) send(ctx context.Context, intended, started time.Time) {
	rctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	res := a.target(rctx)
	cancel()
	a.outcome(ctx, intended, started, time.Now(), res)
}

// outcome records the answer of a request of the run whose context is ctx.
func (a *attack) outcome(ctx context.Context, intended, started, done time.Time, res Result) {
	if res.Err != nil && ctx.Err() != nil {
		// Cut short by the interrupt, not by the server: no figure.
		a.rec.unfinished(intended)
		return
	}
	a.rec.record(intended, started, done, res)
}

func (a *attack) stopped() {
	a.stoppedAt.CompareAndSwap(0, int64(time.Since(a.t0)))
}

func (a *attack) progress(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastAt := a.rec.completions.Load(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := a.rec.completions.Load()
			p := a.rec.progress()
			p.Elapsed = now.Sub(a.t0)
			p.Warmup = p.Elapsed < a.cfg.Warmup
			p.Rate = float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			if a.cfg.Open() && !p.Warmup {
				// Requests overdue by more than MaxLag that no worker has
				// claimed will be dropped: count them now, not at the end.
				overdue := a.pacer.Count(min(p.Elapsed-a.cfg.MaxLag, a.end)) - max(a.next.Load(), a.pacer.Count(a.cfg.Warmup))
				p.Dropped = a.late.Load() + max(0, overdue)
			}
			a.cfg.Progress(p)
		}
	}
}

// Error kinds: client-side failures, counted apart from the server's answers.
const (
	KindDropped  = "dropped"  // the generator could not send it on time (overload of the generator)
	KindTimeout  = "timeout"  // no answer within the timeout
	KindRefused  = "refused"  // connection refused
	KindReset    = "reset"    // connection reset or broken
	KindClosed   = "closed"   // the server closed the connection without an answer
	KindDNS      = "dns"      // the host name did not resolve
	KindCanceled = "canceled" // canceled by the caller
	KindTLS      = "tls"      // the TLS handshake failed: a certificate not verified, no common version
	KindOther    = "other"
)

// Classify names the kind of a client-side failure.
func Classify(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &recordErr):
		return KindTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return KindReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		// net.ErrClosed: the client closed the connection on seeing the
		// server close it, while still writing the request.
		return KindClosed
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.As(err, &dnsErr):
		return KindDNS
	case errors.As(err, &netErr) && netErr.Timeout():
		return KindTimeout
	}
	return KindOther
}
