package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// h2cPool sends requests over a fixed number of HTTP/2 connections without
// TLS, round robin. A request on a connection whose streams are all in use
// waits for one (the server's SETTINGS_MAX_CONCURRENT_STREAMS) instead of
// dialing another: net/http's pooling dials a new connection then, which
// under thousands of requests in flight runs out of file descriptors.
type h2cPool struct {
	addr  string
	tr    *http2.Transport
	next  atomic.Uint64
	slots []h2cSlot
}

type h2cSlot struct {
	mu sync.Mutex
	cc *http2.ClientConn
}

func newH2CPool(addr string, conns int) *h2cPool {
	tr := &http2.Transport{
		AllowHTTP:                  true,
		StrictMaxConcurrentStreams: true,
		DisableCompression:         true,
		ReadIdleTimeout:            30 * time.Second,
	}
	return &h2cPool{addr: addr, tr: tr, slots: make([]h2cSlot, max(conns, 1))}
}

// conn returns the connection of the next slot, dialing it if it is
// missing or can no longer take requests.
func (p *h2cPool) conn(ctx context.Context) (*http2.ClientConn, error) {
	s := &p.slots[p.next.Add(1)%uint64(len(p.slots))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc != nil {
		st := s.cc.State()
		if !st.Closed && !st.Closing {
			return s.cc, nil
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	cc, err := p.tr.NewClientConn(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("starting HTTP/2: %w", err)
	}
	s.cc = cc
	return cc, nil
}

func (p *h2cPool) RoundTrip(req *http.Request) (*http.Response, error) {
	cc, err := p.conn(req.Context())
	if err != nil {
		return nil, err
	}
	return cc.RoundTrip(req)
}

func (p *h2cPool) close() {
	for i := range p.slots {
		s := &p.slots[i]
		s.mu.Lock()
		if s.cc != nil {
			s.cc.Close()
			s.cc = nil
		}
		s.mu.Unlock()
	}
}
