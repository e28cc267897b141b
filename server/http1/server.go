package http1

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configures a Server. Zero durations mean no timeout.
type Options struct {
	// Handler answers every request. Required.
	Handler http.Handler
	// ReadHeaderTimeout limits a request's head from its first byte;
	// ReadTimeout the whole request with its body; WriteTimeout each
	// response; IdleTimeout the wait for the next request on a
	// kept-alive connection.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's head (request line and header
	// fields); a larger one is refused with 431. Default 64 KiB.
	MaxHeaderBytes int
	// Logger receives handler panics and accept errors. Default: discard.
	Logger *slog.Logger
}

// Server serves HTTP/1.1 on listeners until Shutdown or Close.
type Server struct {
	opts   Options
	ctx    context.Context // every request's context
	cancel context.CancelFunc

	inShutdown atomic.Bool
	mu         sync.Mutex
	listeners  map[net.Listener]struct{}
	conns      map[*conn]struct{}
	// gone is signalled when the last connection of a shutdown ends.
	gone chan struct{}
}

// New returns a server with opts; its zero fields take their defaults.
func New(opts Options) *Server {
	if opts.Handler == nil {
		panic("http1: New without a Handler")
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:      opts,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		gone:      make(chan struct{}, 1),
	}
}

// Serve accepts connections on ln and serves each in its own goroutine.
// It returns http.ErrServerClosed after Shutdown or Close, or the error
// that stopped accepting; either way ln is closed.
func (s *Server) Serve(ln net.Listener) error {
	if !s.trackListener(ln) {
		ln.Close()
		return http.ErrServerClosed
	}
	defer s.untrackListener(ln)
	var backoff time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.shuttingDown() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors, or a transient failure: wait for
				// connections to close instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.opts.Logger.Warn("http1: accept failed; retrying", "error", err, "delay", backoff)
				time.Sleep(backoff)
				continue
			}
			ln.Close()
			return err
		}
		backoff = 0
		c := newConn(s, rwc)
		if !s.track(c) {
			rwc.Close()
			continue
		}
		go c.serve(s.ctx)
	}
}

// ServeConn serves one connection until it ends, in the calling
// goroutine. Shutdown waits for it as for the connections Serve accepts.
func (s *Server) ServeConn(rwc net.Conn) {
	c := newConn(s, rwc)
	if !s.track(c) {
		rwc.Close()
		return
	}
	c.serve(s.ctx)
}

// Shutdown stops accepting connections, closes the idle ones and waits
// until the requests in flight are answered and their connections
// closed, or ctx ends (then it returns ctx's error and leaves the rest to
// Close).
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.closeListeners()
	poll := time.Millisecond
	for {
		if s.closeIdleConns() {
			return nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.gone:
			t.Stop()
		case <-t.C:
			poll = min(2*poll, 100*time.Millisecond)
		}
	}
}

// Close closes the listeners and every connection at once, and cancels
// the context of the requests in flight.
func (s *Server) Close() error {
	s.inShutdown.Store(true)
	s.closeListeners()
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.rwc.Close()
	}
	return nil
}

func (s *Server) shuttingDown() bool { return s.inShutdown.Load() }

// closeIdleConns closes the idle connections and reports whether none is
// left.
func (s *Server) closeIdleConns() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.closeIfIdle()
	}
	return len(s.conns) == 0
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		ln.Close()
	}
}

func (s *Server) trackListener(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown() {
		return false
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrackListener(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, ln)
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.shuttingDown() {
		select {
		case s.gone <- struct{}{}:
		default:
		}
	}
}
