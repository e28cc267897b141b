package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

var (
	errConnectTimeout = errors.New("timed out opening the stream")
	errWriteTimeout   = errors.New("timed out writing to the stream")
	errAddrChanged    = errors.New("the peer's address changed")
	errClosed         = errors.New("transport closed")
	errBodyClosed     = errors.New("the stream's body was closed")
)

// peer is the outbound side toward one peer: its queue and the goroutine
// that keeps a stream open to it and writes the queue to it.
type peer struct {
	t  *Transport
	id uint64

	wake   chan struct{} // something was queued (capacity 1)
	redial chan struct{} // skip the backoff: the address changed, or the peer is heard (capacity 1)

	mu           sync.Mutex
	addr         string
	queue        []Message
	dropped      int // since the last log of drops
	lastDropLog  time.Time
	streamCancel context.CancelCauseFunc
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	return &peer{t: t, id: id, addr: addr, wake: make(chan struct{}, 1), redial: make(chan struct{}, 1)}
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if addr == p.addr {
		return
	}
	p.addr = addr
	if p.streamCancel != nil {
		p.streamCancel(errAddrChanged)
	}
	p.dialNow()
}

// dialNow ends the wait before the next attempt to open a stream, if one
// is under way.
func (p *peer) dialNow() {
	select {
	case p.redial <- struct{}{}:
	default:
	}
}

// enqueue queues msgs up to the bound and drops the rest.
func (p *peer) enqueue(msgs []Message) {
	p.mu.Lock()
	room := max(p.t.qmax-len(p.queue), 0)
	n := min(room, len(msgs))
	p.queue = append(p.queue, msgs[:n]...)
	var logDrops int
	if n < len(msgs) {
		// Log the first drop, then at most every 10 seconds.
		p.dropped += len(msgs) - n
		if now := time.Now(); now.Sub(p.lastDropLog) >= 10*time.Second {
			logDrops, p.dropped, p.lastDropLog = p.dropped, 0, now
		}
	}
	p.mu.Unlock()
	if logDrops > 0 {
		p.t.log.Warn("raft messages dropped: the peer's queue is full", "peer", p.id, "dropped", logDrops, "queue", p.t.qmax)
	}
}

func (p *peer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns everything queued, but heartbeats a later one supersedes
// (latestHeartbeats), and empties the queue.
func (p *peer) take() []Message {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	return latestHeartbeats(q)
}

// run keeps a stream open to the peer until the transport closes.
func (p *peer) run() {
	defer p.t.wg.Done()
	backoff := p.t.tune.minBackoff
	lastErr := "" // of the last failure to open a stream logged as a warning
	for {
		up, err := p.stream()
		if p.t.ctx.Err() != nil {
			return
		}
		p.t.markUnreachable(p.id)
		if up {
			backoff, lastErr = p.t.tune.minBackoff, ""
			p.t.log.Warn("raft stream to peer broke", "peer", p.id, "err", err)
		} else if msg := err.Error(); msg != lastErr {
			// Warn once per reason, not at every retry.
			lastErr = msg
			p.t.log.Warn("cannot open raft stream to peer", "peer", p.id, "err", err)
		} else {
			p.t.log.Debug("cannot open raft stream to peer", "peer", p.id, "err", err, "retry", backoff)
		}
		// Wait backoff, ±25%.
		d := backoff*3/4 + rand.N(backoff/2+1)
		timer := time.NewTimer(d)
		select {
		case <-p.t.ctx.Done():
			timer.Stop()
			return
		case <-p.redial:
		case <-timer.C:
		}
		timer.Stop()
		if !up {
			backoff = min(2*backoff, p.t.tune.maxBackoff)
		}
	}
}

// stream opens a stream to the peer, whose body (streamBody) writes the
// queue to it, and waits until the stream breaks or the transport closes.
// It reports whether the stream was open (the peer answered 200) and why
// it ended.
func (p *peer) stream() (up bool, err error) {
	ctx, cancel := context.WithCancelCause(p.t.ctx)
	defer cancel(errClosed)
	p.mu.Lock()
	addr := p.addr
	p.streamCancel = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.streamCancel = nil
		p.mu.Unlock()
	}()

	writeTimeout := time.AfterFunc(time.Hour, func() { cancel(errWriteTimeout) })
	writeTimeout.Stop() // the body's reads arm it
	defer writeTimeout.Stop()
	body := &streamBody{p: p, ctx: ctx, timeout: writeTimeout, closed: make(chan struct{})}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+StreamPath, body)
	if err != nil {
		return false, err
	}
	req.Header.Set(VersionHeader, StreamVersion)
	req.Header.Set("Content-Type", streamContentType)
	Sign(req, p.t.secret, "raft", p.t.self, p.id, p.t.now())
	timer := time.AfterFunc(p.t.tune.connectTimeout, func() { cancel(errConnectTimeout) })
	resp, err := p.t.client.Do(req)
	timer.Stop()
	if err != nil {
		if c := context.Cause(ctx); c != nil {
			err = c
		}
		return false, fmt.Errorf("%s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return false, fmt.Errorf("%s refused the stream: %s: %s", addr, resp.Status, strings.TrimSpace(string(msg)))
	}
	p.t.log.Debug("raft stream to peer open", "peer", p.id, "addr", addr)
	// The peer answers nothing on a healthy stream: its body ends when the
	// peer closes the stream (with a line saying why, if it refused a frame)
	// or fails when the connection does. Meanwhile the HTTP/2 transport
	// writes what streamBody reads from the queue. A cancelled stream is
	// closed, which ends both.
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer stop()
	msg, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if s := strings.TrimSpace(string(msg)); s != "" {
		cancel(fmt.Errorf("the peer closed the stream: %s", s))
	} else if err != nil {
		cancel(fmt.Errorf("reading the stream's response: %w", err))
	} else {
		cancel(errors.New("the peer closed the stream"))
	}
	resp.Body.Close()
	return true, context.Cause(ctx)
}

// streamBody is a stream's request body: the HTTP/2 transport's goroutine
// that writes it reads the peer's queue through it, as frames, so no
// goroutine of this package stands between Send and the connection. What
// one Read returns is written before the next Read is called; a batch
// taken from the queue must be written whole within the write timeout, or
// the stream is cancelled.
type streamBody struct {
	p         *peer
	ctx       context.Context
	timeout   *time.Timer // cancels the stream with errWriteTimeout
	buf       []byte      // the frames of the batch being written
	off       int         // how much of buf was read
	closed    chan struct{}
	closeOnce sync.Once
}

func (b *streamBody) Read(dst []byte) (int, error) {
	p := b.p
	for b.off == len(b.buf) {
		b.timeout.Stop() // the last batch is written
		if cap(b.buf) > 1<<20 {
			b.buf = nil
		}
		b.buf, b.off = b.buf[:0], 0
		select {
		case <-b.ctx.Done():
			return 0, context.Cause(b.ctx)
		case <-b.closed:
			return 0, errBodyClosed
		case <-p.wake:
		}
		if hook := p.t.tune.beforeTake; hook != nil {
			hook(p.id)
		}
		msgs := p.take()
		if len(msgs) == 0 {
			continue
		}
		var dropped []Message
		b.buf, _, dropped = appendFrames(b.buf, msgs, p.t.tune.maxFrame)
		for _, m := range dropped {
			p.t.log.Error("raft message dropped: too large for a frame or not marshallable", "peer", p.id, "group", m.Group,
				"type", m.Raft.GetType().String(), "bytes", proto.Size(m.Raft), "max", p.t.tune.maxFrame-countField-messageHeader)
		}
		if len(b.buf) > 0 {
			b.timeout.Reset(p.t.tune.writeTimeout)
		}
	}
	n := copy(dst, b.buf[b.off:])
	b.off += n
	return n, nil
}

// Close ends a Read under way: the HTTP/2 transport closes the body of a
// stream it aborts (the peer refused it, or it broke) and waits for its
// writer.
func (b *streamBody) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return nil
}
