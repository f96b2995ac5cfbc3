package bench

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
// next request for its slot. Deadlines are checked by the writer, at most
// sweepSlack after they pass.
type h2cClient struct {
	addr      string // host:port to dial
	method    string
	authority string
	path      string              // path and query
	header    []hpack.HeaderField // lower-case names, connection-specific ones left out

	slots  []h2cSlot
	next   atomic.Uint64
	closed atomic.Bool
	wg     sync.WaitGroup // the sessions' goroutines
}

// h2cSlot holds one of the client's connections. Lock order: h2cSlot.mu,
// then h2cSession.mu.
type h2cSlot struct {
	mu sync.Mutex
	s  *h2cSession // nil: not dialled yet
}

// HTTP/2 settings of the client.
const (
	// h2cStreamWindow is the receive window of a stream we advertise, and
	// h2cConnWindow the connection's: answers are read as they come and
	// discarded, so large windows cost nothing and never stall the server.
	h2cStreamWindow = 4 << 20
	h2cConnWindow   = 1 << 30
	// A window is replenished once this much of it is consumed.
	h2cStreamUpdate = h2cStreamWindow / 2
	h2cConnUpdate   = 16 << 20
	// sweepSlack is how late after its deadline a request may be failed:
	// the writer wakes for a deadline this much after it, so that one
	// wake-up expires every request due within that time.
	sweepSlack = 5 * time.Millisecond
	// h2cDialTimeout bounds the dialling of a connection.
	h2cDialTimeout = 10 * time.Second
	// h2cMaxStreamID is the last client stream id; the connection is
	// replaced when it is used up.
	h2cMaxStreamID = 1<<31 - 1
)

// Errors of the h2c client. Each wraps the error Classify names it by.
var (
	errH2CClosed  = fmt.Errorf("h2c: client closed: %w", net.ErrClosed)
	errH2CTimeout = fmt.Errorf("h2c: no answer within the timeout: %w", context.DeadlineExceeded)
	errH2CIDs     = fmt.Errorf("h2c: stream ids of the connection used up: %w", io.EOF)
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

// h2cGoAwayError fails the streams a server's GOAWAY left unprocessed: it
// closed the connection for them without an answer ("closed").
type h2cGoAwayError struct {
	code http2.ErrCode
	last uint32
}

func (e *h2cGoAwayError) Error() string {
	return fmt.Sprintf("h2c: the server went away (GOAWAY %v, last stream %d) without answering", e.code, e.last)
}
func (e *h2cGoAwayError) Unwrap() error { return io.ErrUnexpectedEOF }

// newH2CClient makes a client of the requests method u, with the header
// (which must not hold Host: host, if set, overrides u's authority). It
// dials nothing until the first request.
func newH2CClient(u *url.URL, method, host string, header http.Header, conns int) *h2cClient {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	c := &h2cClient{addr: addr, method: method, authority: u.Host, path: u.RequestURI(), slots: make([]h2cSlot, max(conns, 1))}
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
func (c *h2cClient) start(ctx context.Context, deadline time.Time, body []byte, events int, done func(Result)) {
	st := &h2cStream{body: body, size: int64(len(body)), events: events, deadline: deadline, done: done, hidx: -1}
	s := c.session()
	if s == nil {
		done(st.result(errH2CClosed))
		return
	}
	s.add(ctx, st)
}

// session returns the connection of the next slot, a new one if it is
// missing, broken or going away; nil once the client is closed.
func (c *h2cClient) session() *h2cSession {
	slot := &c.slots[c.next.Add(1)%uint64(len(c.slots))]
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	if slot.s != nil && slot.s.usable() {
		return slot.s
	}
	slot.s = newH2CSession(c)
	return slot.s
}

// close fails every request in flight and closes the connections, and
// waits for their goroutines.
func (c *h2cClient) close() {
	c.closed.Store(true)
	for i := range c.slots {
		slot := &c.slots[i]
		slot.mu.Lock()
		s := slot.s
		slot.s = nil
		slot.mu.Unlock()
		if s != nil {
			s.fail(errH2CClosed)
		}
	}
	c.wg.Wait()
}

// h2cStream is one request, from start until done is called. The fields
// below id are guarded by its session's mu.
type h2cStream struct {
	size     int64 // of the body
	events   int
	deadline time.Time
	done     func(Result)

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

func (st *h2cStream) result(err error) Result {
	if err != nil {
		return Result{Err: err, Sent: st.size, Received: st.received, Events: st.events}
	}
	return Result{Status: statusText(st.status), OK: st.status/100 == 2, Sent: st.size, Received: st.received, Events: st.events}
}

// h2cSession is one connection of the client and the requests on it. Its
// writer goroutine dials, then sends; its reader goroutine reads and
// completes the streams.
type h2cSession struct {
	c      *h2cClient
	wake   chan struct{} // the writer has work; buffered 1
	quit   chan struct{} // closed on failure
	dialCx context.Context
	cancel context.CancelFunc // stops a dial in progress

	mu        sync.Mutex // guards all below
	err       error      // set once the session failed
	nc        net.Conn
	streams   map[uint32]*h2cStream // sent, not finished
	pending   []*h2cStream          // not sent yet, in order; finished ones are skipped
	sendq     []*h2cStream          // sent with body left to send
	ctrl      []h2cControl          // frames to send before any request
	deadlines h2cDeadlines
	nextID    uint32
	active    uint32 // streams sent, not finished
	settings  bool   // the server's first SETTINGS came
	goaway    bool   // no more streams: GOAWAY came or ids ran out
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
	kind   http2.FrameType // settings (an ACK), ping (an ACK), window update or RST_STREAM
	stream uint32
	val    uint32 // the increment or the error code
	ping   [8]byte
}

// completion is a done call to make once the session's lock is released.
type completion struct {
	done func(Result)
	res  Result
}

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
	c.wg.Add(1)
	go s.writeLoop()
	return s
}

// usable says whether new requests may go on s.
func (s *h2cSession) usable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && !s.goaway
}

func (s *h2cSession) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// add queues st for the writer.
func (s *h2cSession) add(ctx context.Context, st *h2cStream) {
	s.mu.Lock()
	if s.err != nil || s.goaway {
		err := s.err
		if err == nil {
			err = errH2CClosed
		}
		s.mu.Unlock()
		st.done(st.result(err))
		return
	}
	s.pending = append(s.pending, st)
	if !st.deadline.IsZero() {
		heap.Push(&s.deadlines, st)
	}
	if ctx.Done() != nil {
		// Runs in a goroutine of its own, after add has unlocked.
		st.stopWatch = context.AfterFunc(ctx, func() { s.cancelStream(st, ctx.Err()) })
	}
	s.mu.Unlock()
	s.signal()
}

// cancelStream fails st with err, resetting it if it was sent.
func (s *h2cSession) cancelStream(st *h2cStream, err error) {
	s.mu.Lock()
	if st.finished {
		s.mu.Unlock()
		return
	}
	s.finish(st, true)
	s.mu.Unlock()
	s.signal()
	st.done(st.result(err))
}

// finish takes st out of the session. If reset, a stream that was sent is
// reset (RST_STREAM CANCEL), as is one whose body is not all sent: the
// server need not wait for the rest. The caller calls st.done. s.mu must
// be held.
func (s *h2cSession) finish(st *h2cStream, reset bool) {
	st.finished = true
	if st.hidx >= 0 {
		heap.Remove(&s.deadlines, st.hidx)
	}
	if st.stopWatch != nil {
		st.stopWatch()
	}
	if st.id != 0 {
		delete(s.streams, st.id)
		s.active--
		if reset || len(st.body) > 0 {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameRSTStream, stream: st.id, val: uint32(http2.ErrCodeCancel)})
		}
	}
	st.body = nil
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
	var done []completion
	for _, st := range s.streams {
		s.finish(st, false)
		done = append(done, completion{st.done, st.result(err)})
	}
	for _, st := range s.pending {
		if !st.finished {
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
	for _, d := range done {
		d.done(d.res)
	}
}

// writeLoop dials, starts the reader, then sends batches of frames until
// the session fails.
func (s *h2cSession) writeLoop() {
	defer s.c.wg.Done()
	d := net.Dialer{Timeout: h2cDialTimeout, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(s.dialCx, "tcp", s.c.addr)
	if err != nil {
		s.fail(fmt.Errorf("h2c: dialing %s: %w", s.c.addr, err))
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.nc = nc
	s.mu.Unlock()

	bw := bufio.NewWriterSize(nc, 64<<10)
	fr := http2.NewFramer(bw, nil)
	_, _ = bw.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2cStreamWindow},
	)
	_ = fr.WriteWindowUpdate(0, h2cConnWindow-65535)
	if err := bw.Flush(); err != nil {
		s.fail(fmt.Errorf("h2c: starting HTTP/2 with %s: %w", s.c.addr, err))
		return
	}
	s.c.wg.Add(1)
	go s.readLoop(nc)

	w := h2cWriter{s: s, bw: bw, fr: fr}
	w.enc = hpack.NewEncoder(&w.hbuf)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-s.wake:
		case <-timer.C:
		case <-s.quit:
			return
		}
		next, err := w.batch()
		if err != nil {
			s.fail(fmt.Errorf("h2c: writing to %s: %w", s.c.addr, err))
			return
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next) + sweepSlack)
		} else {
			timer.Stop()
		}
	}
}

// h2cWriter is the writer goroutine's state: what it takes from the
// session under the lock, then writes without it.
type h2cWriter struct {
	s       *h2cSession
	bw      *bufio.Writer
	fr      *http2.Framer
	enc     *hpack.Encoder
	hbuf    bytes.Buffer
	ctrl    []h2cControl
	heads   []*h2cStream
	chunks  []h2cChunk
	expired []completion
}

type h2cChunk struct {
	stream uint32
	data   []byte
	end    bool
}

// batch fails the requests past their deadline, then writes the control
// frames, the new requests and the body data the windows allow, with one
// flush. It returns the next deadline (zero: none).
func (w *h2cWriter) batch() (next time.Time, err error) {
	s := w.s
	w.ctrl, w.heads, w.chunks, w.expired = w.ctrl[:0], w.heads[:0], w.chunks[:0], w.expired[:0]
	now := time.Now()
	s.mu.Lock()
	for len(s.deadlines) > 0 && !s.deadlines[0].deadline.After(now) {
		st := s.deadlines[0]
		s.finish(st, true)
		w.expired = append(w.expired, completion{st.done, st.result(errH2CTimeout)})
	}
	for s.settings && !s.goaway && len(s.pending) > 0 && s.active < s.maxStreams {
		st := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		if st.finished {
			continue
		}
		if s.nextID > h2cMaxStreamID {
			s.goaway = true
			s.finish(st, false)
			w.expired = append(w.expired, completion{st.done, st.result(errH2CIDs)})
			break
		}
		st.id, s.nextID = s.nextID, s.nextID+2
		st.window = int64(s.streamWindow)
		s.streams[st.id] = st
		s.active++
		w.heads = append(w.heads, st)
		if len(st.body) > 0 {
			s.sendq = append(s.sendq, st)
		}
	}
	if s.goaway {
		// Nothing more goes on this connection; the slot dials another.
		for _, st := range s.pending {
			if st != nil && !st.finished {
				s.finish(st, false)
				w.expired = append(w.expired, completion{st.done, st.result(errH2CIDs)})
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
	if len(s.deadlines) > 0 {
		next = s.deadlines[0].deadline
	}
	s.mu.Unlock()

	for _, d := range w.expired {
		d.done(d.res)
	}
	clear(w.expired)
	if len(w.ctrl) == 0 && len(w.heads) == 0 && len(w.chunks) == 0 {
		return next, nil
	}
	for _, c := range w.ctrl {
		switch c.kind {
		case http2.FrameSettings:
			err = w.fr.WriteSettingsAck()
		case http2.FramePing:
			err = w.fr.WritePing(true, c.ping)
		case http2.FrameWindowUpdate:
			err = w.fr.WriteWindowUpdate(c.stream, c.val)
		case http2.FrameRSTStream:
			err = w.fr.WriteRSTStream(c.stream, http2.ErrCode(c.val))
		}
		if err != nil {
			return next, err
		}
	}
	for _, st := range w.heads {
		if err := w.writeHeaders(st, maxFrame); err != nil {
			return next, err
		}
	}
	clear(w.heads)
	for _, c := range w.chunks {
		if err := w.fr.WriteData(c.stream, c.end, c.data); err != nil {
			return next, err
		}
	}
	clear(w.chunks)
	return next, w.bw.Flush()
}

// writeHeaders encodes st's request header in HEADERS (and CONTINUATION
// frames if it is larger than a frame).
func (w *h2cWriter) writeHeaders(st *h2cStream, maxFrame int) error {
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
	if st.size > 0 || c.method != http.MethodGet && c.method != http.MethodHead {
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(st.size, 10)})
	}
	block := w.hbuf.Bytes()
	first := block[:min(len(block), maxFrame)]
	block = block[len(first):]
	err := w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: first, EndStream: st.size == 0, EndHeaders: len(block) == 0})
	for err == nil && len(block) > 0 {
		frag := block[:min(len(block), maxFrame)]
		block = block[len(frag):]
		err = w.fr.WriteContinuation(st.id, len(block) == 0, frag)
	}
	return err
}

// readLoop reads the server's frames until the connection fails.
func (s *h2cSession) readLoop(nc net.Conn) {
	defer s.c.wg.Done()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(nc, 64<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var done []completion
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				s.mu.Lock()
				if st := s.streams[se.StreamID]; st != nil {
					s.finish(st, true)
					done = append(done, completion{st.done, st.result(fmt.Errorf("h2c: reading from %s: %w", s.c.addr, se))})
				}
				s.mu.Unlock()
				s.signal()
				done = s.complete(done)
				continue
			}
			s.fail(fmt.Errorf("h2c: reading from %s: %w", s.c.addr, err))
			return
		}
		s.mu.Lock()
		wake, drained := s.handle(f, &done)
		s.mu.Unlock()
		if wake {
			s.signal()
		}
		done = s.complete(done)
		if drained {
			s.fail(&h2cGoAwayError{code: http2.ErrCodeNo})
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
// has work, and whether the session went away and has no stream left.
// s.mu must be held.
func (s *h2cSession) handle(f http2.Frame, done *[]completion) (wake, drained bool) {
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
				*done = append(*done, completion{st.done, st.result(fmt.Errorf("h2c: invalid :status %q from %s", f.PseudoValue("status"), s.c.addr))})
				return true, false
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
		if s.unacked += n; s.unacked >= h2cConnUpdate {
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
			return true, false
		}
		if st.unacked += n; st.unacked >= h2cStreamUpdate {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameWindowUpdate, stream: st.id, val: uint32(st.unacked)})
			st.unacked, wake = 0, true
		}
	case *http2.RSTStreamFrame:
		if st := s.streams[f.StreamID]; st != nil {
			s.finish(st, false)
			*done = append(*done, completion{st.done, st.result(&h2cResetError{f.ErrCode})})
			wake = true
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			break
		}
		_ = f.ForeachSetting(func(set http2.Setting) error {
			switch set.ID {
			case http2.SettingMaxConcurrentStreams:
				s.maxStreams = set.Val
			case http2.SettingInitialWindowSize:
				// Applies to the open streams too (RFC 9113 6.9.2).
				delta := int64(set.Val) - int64(s.streamWindow)
				for _, st := range s.streams {
					st.window += delta
				}
				s.streamWindow = set.Val
			case http2.SettingMaxFrameSize:
				s.maxFrame = set.Val
			case http2.SettingHeaderTableSize:
				s.tableSize, s.tableChanged = set.Val, true
			}
			return nil
		})
		s.settings = true
		s.ctrl = append(s.ctrl, h2cControl{kind: http2.FrameSettings})
		wake = true
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			s.connWindow += int64(f.Increment)
		} else if st := s.streams[f.StreamID]; st != nil {
			st.window += int64(f.Increment)
		}
		wake = len(s.sendq) > 0
	case *http2.PingFrame:
		if !f.IsAck() {
			s.ctrl = append(s.ctrl, h2cControl{kind: http2.FramePing, ping: f.Data})
			wake = true
		}
	case *http2.GoAwayFrame:
		s.goaway = true
		err := &h2cGoAwayError{code: f.ErrCode, last: f.LastStreamID}
		for id, st := range s.streams {
			if id > f.LastStreamID {
				s.finish(st, false)
				*done = append(*done, completion{st.done, st.result(err)})
			}
		}
		for _, st := range s.pending {
			if st != nil && !st.finished {
				s.finish(st, false)
				*done = append(*done, completion{st.done, st.result(err)})
			}
		}
		s.pending = nil
	}
	return wake, s.goaway && s.active == 0
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
