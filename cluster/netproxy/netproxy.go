// Package netproxy is a userspace TCP proxy whose links tests can cut, slow
// and heal: a real-process cluster test puts one in front of each node's
// internal address and partitions nodes by cutting the proxies.
package netproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the most one read forwards as one chunk.
const chunkSize = 32 << 10

// Proxy forwards every connection accepted on its address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration added to each chunk

	mu     sync.Mutex
	cut    bool
	closed bool
	links  map[*link]struct{}

	wg sync.WaitGroup
}

// New listens on listenAddr ("127.0.0.1:0" picks a port) and forwards each
// accepted connection to targetAddr.
func New(listenAddr, targetAddr string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: targetAddr, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection, both ways, and closes new ones at once
// until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Heal lets new connections through again. Connections Cut closed stay
// closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// SetDelay sets the latency added to each chunk forwarded, either way, from
// the moment it is read. Chunks are not reordered; 0 removes the delay.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Close stops listening, closes every connection and waits for every
// goroutine the proxy started.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.takeLinks()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// takeLinks empties the set of open links; p.mu is held.
func (p *Proxy) takeLinks() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	clear(p.links)
	return links
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		if !refuse {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		go p.serve(c)
	}
}

// serve dials the target for an accepted connection and forwards both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	t, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	l := &link{a: c, b: t, done: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, c, t) }()
	go func() { defer wg.Done(); p.pipe(l, t, c) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.close()
}

// link is one proxied connection: a accepted, b dialed.
type link struct {
	a, b net.Conn
	once sync.Once
	done chan struct{} // closed by close
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.a.Close()
		l.b.Close()
	})
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst: a reader stamps each chunk with the time it is
// due, a writer writes it then, so a delay adds latency without cutting
// throughput. At src's clean end it half-closes dst; on an error either way
// it closes the link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}
				select {
				case chunks <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.close()
				}
				return
			}
		}
	}()
	defer func() {
		for range chunks { // wait for the reader
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range chunks {
		if d := time.Until(c.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close()
			return
		}
	}
	// src ended cleanly: pass the end on, keep the other way open.
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	l.close()
}
