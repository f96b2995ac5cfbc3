package catalogrpc

import (
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// limitListener keeps at most max connections open: one over it is closed
// as soon as it is accepted (the client sees the connection end, rather than
// waiting in the kernel's backlog), and counted.
type limitListener struct {
	net.Listener
	slots    chan struct{}
	open     prometheus.Gauge
	rejected prometheus.Counter
}

func newLimitListener(l net.Listener, max int, open prometheus.Gauge, rejected prometheus.Counter) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, max), open: open, rejected: rejected}
}

// Accept returns the next connection there is room for.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			l.open.Inc()
			return &limitConn{Conn: c, l: l}, nil
		default:
			l.rejected.Inc()
			c.Close()
		}
	}
}

// limitConn frees its slot when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		<-c.l.slots
		c.l.open.Dec()
	})
	return err
}
