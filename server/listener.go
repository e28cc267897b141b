package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the connections open at once. A connection past the
// cap is closed as soon as it is accepted rather than left waiting in the
// kernel's queue: its client learns at once that it should retry, and a
// flood of idle connections cannot starve the listener's backlog.
type limitListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	accepted atomic.Int64
	refused  atomic.Int64
	log      *slog.Logger
	// lastWarn rate-limits the log line about refused connections
	// (unix nanoseconds).
	lastWarn atomic.Int64
}

func newLimitListener(ln net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), log: log}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.accepted.Add(1)
		if l.take() {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.refused.Add(1)
		c.Close()
		if now := time.Now().UnixNano(); now-l.lastWarn.Load() > int64(time.Second) {
			l.lastWarn.Store(now)
			l.log.Warn("connection refused: at the connection cap", "max_conns", l.max, "remote", c.RemoteAddr().String())
		}
	}
}

// take claims a connection slot, if one is free.
func (l *limitListener) take() bool {
	for {
		n := l.open.Load()
		if n >= l.max {
			return false
		}
		if l.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// limitConn gives its slot back when it is closed, once.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// CloseWrite half-closes the connection where the network allows it:
// net/http does so before closing a connection whose client may still be
// sending, so that the client reads the answer instead of a reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
