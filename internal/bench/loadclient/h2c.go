package loadclient

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cClient is a lean HTTP/2 client without TLS (prior knowledge) for one
// request template, made to hold tens of thousands of requests in flight
// in a generator that must not itself become the bottleneck. It keeps a
// fixed number of connections (slots), used round robin; each has one
// reader and one writer goroutine, and a request in flight is a small
// h2cStream in its connection's map: no goroutine, no timer, no context of
// its own. The writer sends every request queued since its last batch with
// one flush, so one write syscall carries many requests.
//
// A connection that breaks fails its streams and is dialled again by the
// next request for its slot. One timer per connection fails the requests
// past their deadline, at most sweepSlack after it, whatever the writer and
// the reader are doing; it also fails a connection whose server sends no
// SETTINGS in time, and pings one that is idle, failing it if nothing comes
// back. A write that makes no progress for writeTimeout fails its
// connection too. Requests a GOAWAY left unprocessed go over another
// connection.
//
// Kept over x/net's http2.Transport at 4,000 calls/s, 16,000 in flight: 120 vs 192 µs of CPU a call, 55 vs 403 MB, send lag p99 0.12 vs 4.9 ms (BENCHMARKS.md, issue 28).
type h2cClient struct {
	addr      string // host:port to dial
	method    string
	authority string
	path      string              // path and query
	header    []hpack.HeaderField // lower-case names, connection-specific ones left out

	// Set by newH2CClient; tests may change them before the first request.
	streamWindow, connWindow uint32 // the receive windows we advertise
	dialTimeout              time.Duration
	writeTimeout             time.Duration // a write making no progress for this long fails the connection
	settingsTimeout          time.Duration // the server's SETTINGS must come within this
	pingIdle, pingTimeout    time.Duration // a PING after pingIdle without a frame; fail after pingTimeout more

	slots []h2cSlot
	next  atomic.Uint64

	mu       sync.Mutex // guards below
	closed   bool
	sessions map[*h2cSession]struct{} // not failed yet
	wg       sync.WaitGroup           // the sessions' goroutines
}

// h2cSlot holds one of the client's connections. Lock order: h2cSlot.mu,
// then h2cSession.mu, then h2cClient.mu.
type h2cSlot struct {
	mu sync.Mutex
	s  *h2cSession // nil: not dialled yet
}

// HTTP/2 settings of the client.
const (
	// h2cStreamWindow is the receive window of a stream we advertise, and
	// h2cConnWindow the connection's: answers are read as they come and
	// discarded, so large windows cost nothing and never stall the server.
	// A window is replenished once half of it is consumed (at most
	// h2cConnUpdate for the connection's).
	h2cStreamWindow = 4 << 20
	h2cConnWindow   = 1 << 30
	h2cConnUpdate   = 16 << 20
	// h2cMaxWindow is the largest flow-control window (RFC 9113 6.9.1).
	h2cMaxWindow = 1<<31 - 1
	// h2cMaxReadFrame is the largest frame we accept: the default
	// SETTINGS_MAX_FRAME_SIZE, which we do not change.
	h2cMaxReadFrame = 16384
	// sweepSlack is how late after its deadline a request may be failed:
	// the timer wakes for a deadline this much after it, so that one
	// wake-up expires every request due within that time.
	sweepSlack = 5 * time.Millisecond
	// h2cDialTimeout bounds the dialling of a connection; the dial is given
	// up earlier if every request waiting for it has ended.
	h2cDialTimeout = 10 * time.Second
	// h2cWriteTimeout: a write that makes no progress for this long means
	// the peer is gone.
	h2cWriteTimeout = 10 * time.Second
	// h2cSettingsTimeout: the server's SETTINGS, its first frame, must come
	// within this of the connection.
	h2cSettingsTimeout = 5 * time.Second
	// A connection that read no frame for h2cPingIdle is pinged, and failed
	// if still nothing comes within h2cPingTimeout.
	h2cPingIdle    = 15 * time.Second
	h2cPingTimeout = 15 * time.Second
	// h2cMaxTries bounds the connections a request is queued on when GOAWAYs
	// leave it unprocessed.
	h2cMaxTries = 3
	// h2cMaxStreamID is the last client stream id; the connection is
	// replaced when it is used up.
	h2cMaxStreamID = 1<<31 - 1
)

// Errors of the h2c client. Each wraps the error Classify names it by.
var (
	errH2CClosed     = fmt.Errorf("h2c: client closed: %w", net.ErrClosed)
	errH2CTimeout    = fmt.Errorf("h2c: no answer within the timeout: %w", context.DeadlineExceeded)
	errH2CIDs        = fmt.Errorf("h2c: stream ids of the connection used up: %w", io.EOF)
	errH2CNoSettings = fmt.Errorf("h2c: the server sent no SETTINGS in time: %w", io.ErrUnexpectedEOF)
	errH2CNoPing     = fmt.Errorf("h2c: the server did not answer a PING on an idle connection: %w", io.ErrUnexpectedEOF)
)

// h2cResetError is a stream reset by the server (RST_STREAM). It is a
// "refused" failure if the server refused the stream unprocessed, else a
// "reset" one.
type h2cResetError struct{ code http2.ErrCode }

func (e *h2cResetError) Error() string { return "h2c: stream reset by the server: " + e.code.String() }
func (e *h2cResetError) Unwrap() error {
	if e.code == http2.ErrCodeRefusedStream {
		return syscall.ECONNREFUSED
	}
	return syscall.ECONNRESET
}

// h2cGoAwayError ends a connection the server sent GOAWAY on, once its
// last stream ended; it fails a stream the GOAWAY left unprocessed only if
// the stream was already sent that way h2cMaxTries times ("closed").
type h2cGoAwayError struct {
	code http2.ErrCode
	last uint32
}

func (e *h2cGoAwayError) Error() string {
	return fmt.Sprintf("h2c: the server went away (GOAWAY %v, last stream %d) without answering", e.code, e.last)
}
func (e *h2cGoAwayError) Unwrap() error { return io.ErrUnexpectedEOF }

// newH2CClient makes a client that sends its requests to u with method and
// header, over conns connections. The header must not hold Host: host, if
// not empty, is the authority instead of u's. It dials nothing until the
// first request.
func newH2CClient(u *url.URL, method, host string, header http.Header, conns int) *h2cClient {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	c := &h2cClient{
		addr: addr, method: method, authority: u.Host, path: u.RequestURI(),
		streamWindow: h2cStreamWindow, connWindow: h2cConnWindow,
		dialTimeout: h2cDialTimeout, writeTimeout: h2cWriteTimeout, settingsTimeout: h2cSettingsTimeout,
		pingIdle: h2cPingIdle, pingTimeout: h2cPingTimeout,
		slots: make([]h2cSlot, max(conns, 1)), sessions: map[*h2cSession]struct{}{},
	}
	if host != "" {
		c.authority = host
	}
	for name, vs := range header {
		name = strings.ToLower(name)
		switch name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "host", "content-length":
			// Connection-specific headers are malformed in HTTP/2
			// (RFC 9113 8.2.2); the length is the body's own.
			continue
		}
		for _, v := range vs {
			if name == "te" && v != "trailers" {
				continue
			}
			c.header = append(c.header, hpack.HeaderField{Name: name, Value: v})
		}
	}
	slices.SortStableFunc(c.header, func(a, b hpack.HeaderField) int { return strings.Compare(a.Name, b.Name) })
	return c
}

// start sends one request with body and calls done with its outcome,
// exactly once, possibly before start returns. It does not block: the
// request is queued on a connection (the queue is bounded by the caller's
// requests in flight). The request fails at deadline (zero: none) or when
// ctx ends.
func (c *h2cClient) start(ctx context.Context, deadline time.Time, body []byte, events int, done func(bench.Result)) {
	c.queue(&h2cStream{ctx: ctx, full: body, body: body, size: int64(len(body)), events: events, deadline: deadline, done: done, hidx: -1})
}

// queue puts st on the connection of the next slot.
func (c *h2cClient) queue(st *h2cStream) {
	s := c.session()
	if s == nil {
		st.done(st.result(errH2CClosed))
		return
	}
	s.add(st)
}

// resend queues again streams a connection did not send, or that a GOAWAY
// said the server did not process; err fails those sent too often. They
// belong to no session.
func (c *h2cClient) resend(sts []*h2cStream, err error) {
	for _, st := range sts {
		if st.tries++; st.tries > h2cMaxTries {
			st.done(st.result(err))
			continue
		}
		st.id, st.body, st.window, st.status, st.received, st.unacked = 0, st.full, 0, 0, 0, 0
		st.hidx, st.finished, st.stopWatch = -1, false, nil
		c.queue(st)
	}
}

// session returns the connection of the next slot, a new one if it is
// missing, broken or going away; nil once the client is closed.
func (c *h2cClient) session() *h2cSession {
	slot := &c.slots[c.next.Add(1)%uint64(len(c.slots))]
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.s != nil && slot.s.usable() {
		return slot.s
	}
	slot.s = newH2CSession(c)
	return slot.s
}

// close fails every request in flight and closes every connection, and
// waits for their goroutines.
func (c *h2cClient) close() {
	c.mu.Lock()
	c.closed = true
	sessions := make([]*h2cSession, 0, len(c.sessions))
	for s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	for _, s := range sessions {
		s.fail(errH2CClosed)
	}
	c.wg.Wait()
}

// h2cStream is one request, from start until done is called. The fields
// below tries are guarded by its session's mu.
type h2cStream struct {
	ctx      context.Context
	full     []byte // the body
	size     int64  // of the body
	events   int
	deadline time.Time
	done     func(bench.Result)
	tries    int // GOAWAYs it was sent again after

	id        uint32 // 0: not sent yet
	body      []byte // the part of the body not yet sent
	window    int64  // the server's send window for the stream
	status    int
	received  int64
	unacked   int32 // received bytes not yet given back in a WINDOW_UPDATE
	hidx      int   // index in the session's deadline heap, -1 if none
	finished  bool
	stopWatch func() bool // stops watching ctx
}

func (st *h2cStream) result(err error) bench.Result {
	if err != nil {
		return bench.Result{Err: err, Sent: st.size, Received: st.received, Events: st.events}
	}
	return bench.Result{Status: strconv.Itoa(st.status), OK: st.status/100 == 2, Sent: st.size, Received: st.received, Events: st.events}
}

// h2cSession is one connection of the client and the requests on it. Its
// writer goroutine dials, then sends; its reader goroutine reads and
// completes the streams; its timer expires them.
type h2cSession struct {
	c      *h2cClient
	wake   chan struct{} // the writer has work; buffered 1
	quit   chan struct{} // closed on failure
	dialCx context.Context
	cancel context.CancelFunc // stops a dial in progress
	timer  *time.Timer        // runs sweep

	mu          sync.Mutex // guards all below
	err         error      // set once the session failed
	nc          net.Conn
	streams     map[uint32]*h2cStream // sent, not finished
	pending     []*h2cStream          // not sent yet, in order; finished ones are skipped
	pendingDead int                   // about how many of pending are finished
	sendq       []*h2cStream          // sent with body left to send
	ctrl        []h2cControl          // frames to send before any request
	deadlines   h2cDeadlines
	timerAt     time.Time // when the timer fires; zero: stopped
	connected   time.Time // zero: not yet
	lastRead    time.Time // when a frame last came
	pingAt      time.Time // when our PING went out, if unanswered
	nextID      uint32
	active      uint32 // streams sent, not finished
	settings    bool   // the server's first SETTINGS came
	goaway      error  // no more streams: GOAWAY came or ids ran out
	// The server's settings and the connection's send window.
	maxStreams   uint32
	streamWindow uint32
	maxFrame     uint32
	tableSize    uint32
	tableChanged bool
	connWindow   int64
	unacked      int32 // received on the connection, not yet given back
}

// h2cControl is a frame the writer sends before the next requests.
type h2cControl struct {
	kind   http2.FrameType // settings (an ACK), ping, window update or RST_STREAM
	stream uint32
	val    uint32 // the increment or the error code
	ack    bool   // of a ping
	ping   [8]byte
}

// completion is a done call to make once the session's lock is released.
type completion struct {
	done func(bench.Result)
	res  bench.Result
}

// newH2CSession starts a connection of c; nil once c is closed.
func newH2CSession(c *h2cClient) *h2cSession {
	s := &h2cSession{
		c:            c,
		wake:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
		streams:      map[uint32]*h2cStream{},
		nextID:       1,
		maxStreams:   math.MaxUint32, // until the server says (RFC 9113 6.5.2)
		streamWindow: 65535,
		maxFrame:     16384,
		tableSize:    4096,
		connWindow:   65535,
	}
	s.dialCx, s.cancel = context.WithCancel(context.Background())
	s.timer = time.AfterFunc(time.Hour, s.sweep)
	s.timer.Stop()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		s.cancel()
		return nil
	}
	c.sessions[s] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go s.writeLoop()
	return s
}

// usable says whether new requests may go on s.
func (s *h2cSession) usable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && s.goaway == nil
}

func (s *h2cSession) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// armAt makes the timer fire by t. s.mu must be held.
func (s *h2cSession) armAt(t time.Time) {
	if s.err == nil && (s.timerAt.IsZero() || t.Before(s.timerAt)) {
		s.timerAt = t
		s.timer.Reset(time.Until(t))
	}
}

// add queues st for the writer, or on another connection if s can take no
// more.
func (s *h2cSession) add(st *h2cStream) {
	s.mu.Lock()
	if err := cmp.Or(s.err, s.goaway); err != nil {
		s.mu.Unlock()
		s.c.resend([]*h2cStream{st}, err)
		return
	}
	s.pending = append(s.pending, st)
	if !st.deadline.IsZero() {
		heap.Push(&s.deadlines, st)
		s.armAt(st.deadline.Add(sweepSlack))
	}
	if st.ctx.Done() != nil {
		// Runs in a goroutine of its own, after add has unlocked.
		ctx := st.ctx
		st.stopWatch = context.AfterFunc(ctx, func() { s.cancelStream(st, ctx.Err()) })
	}
	s.mu.Unlock()
	s.signal()
}

// drained says whether s went away and has no stream left, so that it
// should be closed (with s.goaway). s.mu must be held.
func (s *h2cSession) drained() bool {
	return s.err == nil && s.goaway != nil && s.active == 0
}

// cancelStream fails st with err, resetting it if it was sent.
func (s *h2cSession) cancelStream(st *h2cStream, err error) {
	s.mu.Lock()
	if st.finished {
		s.mu.Unlock()
		return
	}
	// Not failed yet (that finishes every stream): the writer still holds
	// the WaitGroup, and Close waits for this too.
	s.c.wg.Add(1)
	defer s.c.wg.Done()
	s.finish(st, true)
	drained := s.drained()
	s.mu.Unlock()
	s.signal()
	st.done(st.result(err))
	if drained {
		s.fail(s.goaway)
	}
}

// finish takes st out of the session. If reset, a stream that was sent is
// reset (RST_STREAM CANCEL), as is one whose body is not all sent: the
// server need not wait for the rest (clear st.body first where no reset
// may be sent). The caller calls st.done, or resends st if finish reports
// that its ctx was not done meanwhile. s.mu must be held.
func (s *h2cSession) finish(st *h2cStream, reset bool) (watchStopped bool) {
	st.finished = true
	if st.hidx >= 0 {
		heap.Remove(&s.deadlines, st.hidx)
	}
	watchStopped = st.stopWatch == nil || st.stopWatch()
	st.stopWatch = nil
	if st.id != 0 {
		delete(s.streams, st.id)
		s.active--
		if reset || len(st.body) > 0 {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameRSTStream, stream: st.id, val: uint32(http2.ErrCodeCancel)})
		}
	} else {
		s.pendingDead++
	}
	st.body = nil
	return watchStopped
}

// takeBack finishes st, which the server did not process, and adds it to
// retry, or fails it with ctx's error if its ctx ended meanwhile. s.mu must
// be held.
func (s *h2cSession) takeBack(st *h2cStream, retry *[]*h2cStream, done *[]completion) {
	st.body = nil // no RST_STREAM: nothing to stop
	if s.finish(st, false) {
		*retry = append(*retry, st)
	} else {
		*done = append(*done, completion{st.done, st.result(st.ctx.Err())})
	}
}

// fail ends the session: every request on it fails with err, and the
// connection is closed. Only the first call counts.
func (s *h2cSession) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.timer.Stop()
	var done []completion
	for _, st := range s.streams {
		s.finish(st, false)
		done = append(done, completion{st.done, st.result(err)})
	}
	for _, st := range s.pending {
		if st != nil && !st.finished {
			s.finish(st, false)
			done = append(done, completion{st.done, st.result(err)})
		}
	}
	s.pending, s.sendq, s.ctrl = nil, nil, nil
	nc := s.nc
	s.mu.Unlock()
	close(s.quit)
	s.cancel()
	if nc != nil {
		nc.Close()
	}
	s.c.mu.Lock()
	delete(s.c.sessions, s)
	s.c.mu.Unlock()
	for _, d := range done {
		d.done(d.res)
	}
}

// sweep runs from s.timer: it fails the requests past their deadline, gives
// up a dial nobody waits for any more, fails a connection whose server sent
// no SETTINGS in time or did not answer a PING, and pings an idle one.
func (s *h2cSession) sweep() {
	c := s.c
	now := time.Now()
	var done []completion
	var failure error
	wake := false
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	// Close waits for this too. The writer, which holds the WaitGroup
	// until the session failed, still does.
	c.wg.Add(1)
	defer c.wg.Done()
	s.timerAt = time.Time{}
	for len(s.deadlines) > 0 && !s.deadlines[0].deadline.After(now) {
		st := s.deadlines[0]
		s.finish(st, true)
		done = append(done, completion{st.done, st.result(errH2CTimeout)})
		wake = true
	}
	if len(s.pending) > 0 && (s.connected.IsZero() || 2*s.pendingDead > len(s.pending)) {
		kept := s.pending[:0]
		for _, st := range s.pending {
			if st != nil && !st.finished {
				kept = append(kept, st)
			}
		}
		clear(s.pending[len(kept):])
		s.pending, s.pendingDead = kept, 0
	}
	var next time.Time // of the connection's checks
	switch {
	case s.connected.IsZero():
		if len(s.pending) == 0 {
			failure = fmt.Errorf("h2c: dialing %s: given up, no request waits for it: %w", c.addr, errH2CTimeout)
		}
	case !s.settings:
		if next = s.connected.Add(c.settingsTimeout); !now.Before(next) {
			failure = errH2CNoSettings
		}
	case !s.pingAt.IsZero():
		if next = s.pingAt.Add(c.pingTimeout); !now.Before(next) {
			failure = errH2CNoPing
		}
	default:
		if next = s.lastRead.Add(c.pingIdle); !now.Before(next) {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FramePing, ping: [8]byte{'i', 'n', 'l', 'e', 't'}})
			s.pingAt, wake = now, true
			next = now.Add(c.pingTimeout)
		}
	}
	drained := s.drained()
	if failure == nil && !drained {
		if len(s.deadlines) > 0 {
			if d := s.deadlines[0].deadline.Add(sweepSlack); next.IsZero() || d.Before(next) {
				next = d
			}
		}
		if !next.IsZero() {
			s.armAt(next)
		}
	}
	s.mu.Unlock()
	if wake {
		s.signal()
	}
	for _, d := range done {
		d.done(d.res)
	}
	if failure != nil {
		s.fail(failure)
	} else if drained {
		s.fail(s.goaway)
	}
}

// writeErr is the error of a failed write.
func (s *h2cSession) writeErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("h2c: writing to %s: no progress for %v, the connection is taken as dead: %w", s.c.addr, s.c.writeTimeout, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("h2c: writing to %s: %w", s.c.addr, err)
}

// writeLoop dials, starts the reader, then sends batches of frames until
// the session fails.
func (s *h2cSession) writeLoop() {
	c := s.c
	defer c.wg.Done()
	d := net.Dialer{Timeout: c.dialTimeout, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(s.dialCx, "tcp", c.addr)
	if err != nil {
		s.fail(fmt.Errorf("h2c: dialing %s: %w", c.addr, err))
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.nc = nc
	now := time.Now()
	s.connected, s.lastRead = now, now
	s.armAt(now.Add(c.settingsTimeout))
	s.mu.Unlock()

	bw := bufio.NewWriterSize(&h2cConnWriter{nc, c.writeTimeout}, 64<<10)
	fr := http2.NewFramer(bw, nil)
	_, _ = bw.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: c.streamWindow},
	)
	if c.connWindow > 65535 {
		_ = fr.WriteWindowUpdate(0, c.connWindow-65535)
	}
	if err := bw.Flush(); err != nil {
		s.fail(fmt.Errorf("h2c: starting HTTP/2 with %s: %w", c.addr, s.writeErr(err)))
		return
	}
	c.wg.Add(1)
	go s.readLoop(nc)

	w := h2cWriter{s: s, bw: bw, fr: fr}
	w.enc = hpack.NewEncoder(&w.hbuf)
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			return
		}
		if err := w.batch(); err != nil {
			s.fail(s.writeErr(err))
			return
		}
	}
}

// h2cConnWriter writes to a connection, failing a write that makes no
// progress for timeout.
type h2cConnWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w *h2cConnWriter) Write(p []byte) (int, error) {
	if err := w.nc.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		return 0, err
	}
	return w.nc.Write(p)
}

// h2cWriter is the writer goroutine's state: what it takes from the
// session under the lock, then writes without it.
type h2cWriter struct {
	s      *h2cSession
	bw     *bufio.Writer
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	ctrl   []h2cControl
	heads  []h2cHead
	chunks []h2cChunk
	retry  []*h2cStream
}

// h2cHead is a request header to send: a copy of its stream's fields, as
// the stream may go to another session meanwhile.
type h2cHead struct {
	stream uint32
	size   int64
}

type h2cChunk struct {
	stream uint32
	data   []byte
	end    bool
}

// batch writes the control frames, the new requests and the body data the
// windows allow, with one flush.
func (w *h2cWriter) batch() error {
	s := w.s
	w.ctrl, w.heads, w.chunks, w.retry = w.ctrl[:0], w.heads[:0], w.chunks[:0], w.retry[:0]
	var done []completion
	s.mu.Lock()
	for s.settings && s.goaway == nil && len(s.pending) > 0 && s.active < s.maxStreams {
		st := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		if st.finished {
			continue
		}
		if s.nextID > h2cMaxStreamID {
			s.goaway = errH2CIDs
			s.pending = append(s.pending, nil)
			copy(s.pending[1:], s.pending)
			s.pending[0] = st
			break
		}
		st.id, s.nextID = s.nextID, s.nextID+2
		st.window = int64(s.streamWindow)
		s.streams[st.id] = st
		s.active++
		w.heads = append(w.heads, h2cHead{st.id, st.size})
		if len(st.body) > 0 {
			s.sendq = append(s.sendq, st)
		}
	}
	if s.goaway != nil {
		// Nothing more goes on this connection: what waits goes on another.
		for _, st := range s.pending {
			if st != nil && !st.finished {
				s.takeBack(st, &w.retry, &done)
			}
		}
		s.pending = nil
	}
	kept := s.sendq[:0]
	for _, st := range s.sendq {
		if st.finished {
			continue
		}
		for len(st.body) > 0 && st.window > 0 && s.connWindow > 0 {
			n := int(min(int64(len(st.body)), st.window, s.connWindow, int64(s.maxFrame)))
			w.chunks = append(w.chunks, h2cChunk{st.id, st.body[:n], n == len(st.body)})
			st.body = st.body[n:]
			st.window -= int64(n)
			s.connWindow -= int64(n)
		}
		if len(st.body) > 0 {
			kept = append(kept, st)
		}
	}
	clear(s.sendq[len(kept):])
	s.sendq = kept
	w.ctrl = append(w.ctrl, s.ctrl...)
	s.ctrl = s.ctrl[:0]
	if s.tableChanged {
		w.enc.SetMaxDynamicTableSizeLimit(s.tableSize)
		s.tableChanged = false
	}
	maxFrame := int(s.maxFrame)
	drained, goaway := s.drained(), s.goaway
	s.mu.Unlock()

	for _, d := range done {
		d.done(d.res)
	}
	if len(w.retry) > 0 {
		s.c.resend(w.retry, goaway)
		clear(w.retry)
	}
	if drained {
		s.fail(goaway)
		return nil
	}
	if len(w.ctrl) == 0 && len(w.heads) == 0 && len(w.chunks) == 0 {
		return nil
	}
	var err error
	for _, c := range w.ctrl {
		switch c.kind {
		case http2.FrameSettings:
			err = w.fr.WriteSettingsAck()
		case http2.FramePing:
			err = w.fr.WritePing(c.ack, c.ping)
		case http2.FrameWindowUpdate:
			err = w.fr.WriteWindowUpdate(c.stream, c.val)
		case http2.FrameRSTStream:
			err = w.fr.WriteRSTStream(c.stream, http2.ErrCode(c.val))
		}
		if err != nil {
			return err
		}
	}
	for _, h := range w.heads {
		if err := w.writeHeaders(h, maxFrame); err != nil {
			return err
		}
	}
	for _, c := range w.chunks {
		if err := w.fr.WriteData(c.stream, c.end, c.data); err != nil {
			return err
		}
	}
	clear(w.chunks)
	return w.bw.Flush()
}

// writeHeaders encodes a request header in HEADERS (and CONTINUATION
// frames if it is larger than a frame).
func (w *h2cWriter) writeHeaders(h h2cHead, maxFrame int) error {
	c := w.s.c
	w.hbuf.Reset()
	enc := w.enc
	_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: c.method})
	_ = enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "http"})
	_ = enc.WriteField(hpack.HeaderField{Name: ":authority", Value: c.authority})
	_ = enc.WriteField(hpack.HeaderField{Name: ":path", Value: c.path})
	for _, f := range c.header {
		_ = enc.WriteField(f)
	}
	if h.size > 0 || c.method != http.MethodGet && c.method != http.MethodHead {
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(h.size, 10)})
	}
	block := w.hbuf.Bytes()
	first := block[:min(len(block), maxFrame)]
	block = block[len(first):]
	err := w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream, BlockFragment: first, EndStream: h.size == 0, EndHeaders: len(block) == 0})
	for err == nil && len(block) > 0 {
		frag := block[:min(len(block), maxFrame)]
		block = block[len(frag):]
		err = w.fr.WriteContinuation(h.stream, len(block) == 0, frag)
	}
	return err
}

// readLoop reads the server's frames until the connection fails.
func (s *h2cSession) readLoop(nc net.Conn) {
	defer s.c.wg.Done()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(nc, 64<<10))
	fr.SetMaxReadFrameSize(h2cMaxReadFrame)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var done []completion
	var retry []*h2cStream
	for {
		f, err := fr.ReadFrame()
		var se http2.StreamError
		if err != nil && !errors.As(err, &se) {
			s.fail(fmt.Errorf("h2c: reading from %s: %w", s.c.addr, err))
			return
		}
		var connErr error
		wake := true
		s.mu.Lock()
		s.lastRead, s.pingAt = time.Now(), time.Time{}
		if err != nil {
			if st := s.streams[se.StreamID]; st != nil {
				s.finish(st, true)
				done = append(done, completion{st.done, st.result(fmt.Errorf("h2c: reading from %s: %w", s.c.addr, se))})
			}
		} else {
			wake, connErr = s.handle(f, &done, &retry)
		}
		drained, goaway := s.drained(), s.goaway
		s.mu.Unlock()
		if wake {
			s.signal()
		}
		done = s.complete(done)
		if len(retry) > 0 {
			s.c.resend(retry, goaway)
			clear(retry)
			retry = retry[:0]
		}
		if connErr != nil {
			s.fail(connErr)
			return
		}
		if drained {
			s.fail(goaway)
			return
		}
	}
}

func (s *h2cSession) complete(done []completion) []completion {
	for _, d := range done {
		d.done(d.res)
	}
	clear(done)
	return done[:0]
}

// handle applies one frame from the server. It reports whether the writer
// has work, and a connection error, if any; the streams a GOAWAY left
// unprocessed go to retry. s.mu must be held.
func (s *h2cSession) handle(f http2.Frame, done *[]completion, retry *[]*h2cStream) (wake bool, err error) {
	c := s.c
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		st := s.streams[f.StreamID]
		if st == nil {
			break // finished on our side: reset
		}
		if st.status == 0 {
			code, err := strconv.Atoi(f.PseudoValue("status"))
			if err != nil || code < 100 || code > 999 {
				s.finish(st, true)
				*done = append(*done, completion{st.done, st.result(fmt.Errorf("h2c: invalid :status %q from %s", f.PseudoValue("status"), c.addr))})
				wake = true
				break
			}
			if code >= 200 {
				st.status = code
			} else if !f.StreamEnded() {
				break // an informational answer: the final one follows
			}
		}
		if f.StreamEnded() {
			s.finish(st, false)
			*done = append(*done, completion{st.done, st.result(nil)})
			wake = true
		}
	case *http2.DataFrame:
		n := int32(f.Length)
		if s.unacked += n; s.unacked >= int32(min(h2cConnUpdate, c.connWindow/2)) {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameWindowUpdate, val: uint32(s.unacked)})
			s.unacked, wake = 0, true
		}
		st := s.streams[f.StreamID]
		if st == nil {
			break
		}
		st.received += int64(len(f.Data()))
		if f.StreamEnded() {
			s.finish(st, false)
			*done = append(*done, completion{st.done, st.result(nil)})
			wake = true
			break
		}
		if st.unacked += n; st.unacked >= int32(c.streamWindow/2) {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameWindowUpdate, stream: st.id, val: uint32(st.unacked)})
			st.unacked, wake = 0, true
		}
	case *http2.RSTStreamFrame:
		if st := s.streams[f.StreamID]; st != nil {
			st.body = nil // no RST_STREAM in reply (RFC 9113 5.4.2)
			s.finish(st, false)
			*done = append(*done, completion{st.done, st.result(&h2cResetError{f.ErrCode})})
			wake = true
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			break
		}
		err := f.ForeachSetting(func(set http2.Setting) error {
			if err := set.Valid(); err != nil {
				return fmt.Errorf("%v: %w", set, err)
			}
			switch set.ID {
			case http2.SettingMaxConcurrentStreams:
				s.maxStreams = set.Val
			case http2.SettingInitialWindowSize:
				// Applies to the open streams too (RFC 9113 6.9.2).
				delta := int64(set.Val) - int64(s.streamWindow)
				for _, st := range s.streams {
					if st.window += delta; st.window > h2cMaxWindow {
						return fmt.Errorf("%v overflows a stream's window: %w", set, http2.ConnectionError(http2.ErrCodeFlowControl))
					}
				}
				s.streamWindow = set.Val
			case http2.SettingMaxFrameSize:
				s.maxFrame = set.Val
			case http2.SettingHeaderTableSize:
				s.tableSize, s.tableChanged = set.Val, true
			}
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("h2c: invalid SETTINGS from %s: %w", c.addr, err)
		}
		if !s.settings {
			s.settings = true
			s.armAt(s.lastRead.Add(c.pingIdle)) // the timer waited for this SETTINGS
		}
		s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameSettings})
		wake = true
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			if s.connWindow += int64(f.Increment); s.connWindow > h2cMaxWindow {
				return false, fmt.Errorf("h2c: WINDOW_UPDATE from %s overflows the connection's window: %w", c.addr, http2.ConnectionError(http2.ErrCodeFlowControl))
			}
		} else if st := s.streams[f.StreamID]; st != nil {
			if st.window += int64(f.Increment); st.window > h2cMaxWindow {
				st.body = nil
				s.finish(st, false)
				s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameRSTStream, stream: st.id, val: uint32(http2.ErrCodeFlowControl)})
				*done = append(*done, completion{st.done, st.result(fmt.Errorf("h2c: WINDOW_UPDATE from %s overflows a stream's window: %w", c.addr, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeFlowControl}))})
				return true, nil
			}
		}
		wake = len(s.sendq) > 0
	case *http2.PingFrame:
		if !f.IsAck() {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FramePing, ack: true, ping: f.Data})
			wake = true
		}
	case *http2.GoAwayFrame:
		if s.goaway == nil {
			s.goaway = &h2cGoAwayError{code: f.ErrCode, last: f.LastStreamID}
		}
		// The streams above the last one and those not sent yet were not
		// processed (RFC 9113 6.8): they go on another connection.
		for id, st := range s.streams {
			if id > f.LastStreamID {
				s.takeBack(st, retry, done)
			}
		}
		for _, st := range s.pending {
			if st != nil && !st.finished {
				s.takeBack(st, retry, done)
			}
		}
		s.pending = nil
		kept := s.sendq[:0]
		for _, st := range s.sendq {
			if !st.finished {
				kept = append(kept, st)
			}
		}
		clear(s.sendq[len(kept):])
		s.sendq = kept
		wake = true
	}
	return wake, nil
}

// h2cDeadlines is a min-heap of streams by deadline (container/heap).
type h2cDeadlines []*h2cStream

func (h h2cDeadlines) Len() int           { return len(h) }
func (h h2cDeadlines) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h h2cDeadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *h2cDeadlines) Push(x any) {
	st := x.(*h2cStream)
	st.hidx = len(*h)
	*h = append(*h, st)
}
func (h *h2cDeadlines) Pop() any {
	old := *h
	st := old[len(old)-1]
	old[len(old)-1] = nil
	st.hidx = -1
	*h = old[:len(old)-1]
	return st
}
