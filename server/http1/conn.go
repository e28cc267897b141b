package http1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"
)

// Connection states, for Shutdown: an idle connection waits for a request
// with nothing of it read and may be closed; an active one is reading,
// handling or answering one.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

const (
	// readBufSize is a connection's read buffer: a typical SDK request's
	// head and body fit in one read.
	readBufSize = 4 << 10
	// maxKeptBuf caps the buffers a connection keeps between requests;
	// larger ones, grown for an unusual request or response, are dropped.
	maxKeptBuf = 32 << 10
)

var (
	errHeaderTooLarge = &protocolError{status: http.StatusRequestHeaderFieldsTooLarge, reason: "request header too large"}
	errBufferFull     = errors.New("http1: read buffer full")
)

// conn is one client connection: its buffers and its request loop.
type conn struct {
	srv        *Server
	rwc        net.Conn
	remoteAddr string
	state      atomic.Int32

	// buf[r:w] is read and not yet consumed.
	buf  []byte
	r, w int
	// readDeadline, when pending, is applied before the next read from
	// the socket (the zero time: none): deadlines cost a timer update, so
	// a request whose bytes are all in the buffer never sets one.
	readDeadline        time.Time
	readDeadlinePending bool

	out        []byte // response bytes not yet written
	writeStart bool   // the current response has set its write deadline
	werr       error  // a failed write: the connection is done
	// linger is set when the connection ends with request bytes possibly
	// still on their way: see lingerClose.
	linger bool
}

func newConn(srv *Server, rwc net.Conn) *conn {
	c := &conn{srv: srv, rwc: rwc}
	if a := rwc.RemoteAddr(); a != nil {
		c.remoteAddr = a.String()
	}
	return c
}

// serve answers requests on the connection until it closes, a request or
// response says to close it, or the server shuts down.
func (c *conn) serve(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			c.srv.opts.Logger.Error("http1: panic serving "+c.remoteAddr, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
		c.close()
	}()
	for c.serveOne(ctx) {
	}
}

// serveOne reads and answers one request, and reports whether the
// connection may carry another.
func (c *conn) serveOne(ctx context.Context) bool {
	head, perr, ok := c.readHead()
	if !ok {
		return false
	}
	var req *http.Request
	var fr framing
	if perr == nil {
		req, fr, perr = parseHead(ctx, head)
	}
	if perr != nil {
		c.refuse(perr)
		c.linger = true
		return false
	}
	c.setReadDeadline(c.srv.opts.ReadTimeout)
	req.RemoteAddr = c.remoteAddr
	var b *body
	req.Body, b = bodyOf(c, fr)

	w := &response{c: c, req: req, body: b, header: make(http.Header, 12), declared: -1, keepAlive: fr.keepAlive}
	c.srv.opts.Handler.ServeHTTP(w, req)
	if b != nil && !b.finish() {
		w.keepAlive, c.linger = false, true
	}
	w.finish()
	if c.werr != nil || !w.keepAlive || c.srv.shuttingDown() {
		return false
	}
	c.recycle()
	return true
}

// readHead reads up to the end of the next request's head and returns it,
// or a protocol error to answer. ok is false when the connection ended
// (closed, timed out, shut down) with nothing to answer.
func (c *conn) readHead() (head string, perr *protocolError, ok bool) {
	opts := &c.srv.opts
	waiting := c.r == c.w // for a new request: idle until its first byte
	if waiting {
		c.r, c.w = 0, 0
		if !c.setIdle() {
			return "", nil, false
		}
		c.setReadDeadline(opts.IdleTimeout)
	} else {
		c.setReadDeadline(opts.ReadHeaderTimeout)
	}
	for scanned := 0; ; {
		// RFC 9112 2.2: ignore empty lines before a request line.
		for scanned == 0 && c.r < c.w && (c.buf[c.r] == '\r' || c.buf[c.r] == '\n') {
			c.r++
		}
		if n := headEnd(c.buf[c.r:c.w], scanned); n >= 0 {
			if n > opts.MaxHeaderBytes {
				return "", errHeaderTooLarge, true
			}
			head = string(c.buf[c.r : c.r+n])
			c.r += n
			return head, nil, true
		}
		scanned = c.w - c.r
		if scanned >= opts.MaxHeaderBytes {
			return "", errHeaderTooLarge, true
		}
		if err := c.fill(opts.MaxHeaderBytes); err != nil {
			return "", nil, false
		}
		if waiting {
			waiting = false
			if !c.state.CompareAndSwap(stateIdle, stateActive) {
				return "", nil, false // closed by Shutdown
			}
			c.setReadDeadline(opts.ReadHeaderTimeout)
		}
	}
}

// fill reads more from the socket into the buffer, moving the unread part
// to the front, or growing the buffer when it is full of unread bytes. The
// buffer holds at most limit+1 of them; errBufferFull reports that many,
// so a caller looking for the end of something limit long learns it is
// longer.
func (c *conn) fill(limit int) error {
	if c.buf == nil {
		c.buf = make([]byte, readBufSize)
	}
	if c.w == len(c.buf) {
		switch unread := c.w - c.r; {
		case c.r > 0:
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		case unread > limit:
			return errBufferFull
		default:
			grown := make([]byte, min(2*len(c.buf), limit+1))
			c.w = copy(grown, c.buf[c.r:c.w])
			c.r, c.buf = 0, grown
		}
	}
	n, err := c.read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	return err
}

// setReadDeadline makes the deadline of the next socket reads timeout from
// now; zero means none.
func (c *conn) setReadDeadline(timeout time.Duration) {
	c.readDeadline = time.Time{}
	if timeout > 0 {
		c.readDeadline = time.Now().Add(timeout)
	}
	c.readDeadlinePending = true
}

// read reads from the socket, applying a pending read deadline first.
func (c *conn) read(p []byte) (int, error) {
	if c.readDeadlinePending {
		if err := c.rwc.SetReadDeadline(c.readDeadline); err != nil {
			return 0, err
		}
		c.readDeadlinePending = false
	}
	n, err := c.rwc.Read(p)
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	return n, err
}

// readBody reads body bytes into p: what the buffer holds, else straight
// from the socket when p is large, else through the buffer.
func (c *conn) readBody(p []byte) (int, error) {
	if c.r == c.w {
		if len(p) >= readBufSize {
			return c.read(p)
		}
		c.r, c.w = 0, 0
		if err := c.fill(readBufSize); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.buf[c.r:c.w])
	c.r += n
	return n, nil
}

// readLine reads a line (of a chunked body) without its CRLF or LF. The
// line is only valid until the next read.
func (c *conn) readLine(limit int) ([]byte, error) {
	for scanned := 0; ; {
		if i := bytes.IndexByte(c.buf[c.r+scanned:c.w], '\n'); i >= 0 {
			line := c.buf[c.r : c.r+scanned+i]
			c.r += scanned + i + 1
			return bytes.TrimSuffix(line, []byte{'\r'}), nil
		}
		scanned = c.w - c.r
		if scanned > limit {
			return nil, errChunkTooLong
		}
		if err := c.fill(limit + 2); err != nil {
			if err == errBufferFull {
				err = errChunkTooLong
			}
			return nil, err
		}
	}
}

// writeInterim sends an interim (1xx) response at once. The final
// response's write deadline starts when that response does.
func (c *conn) writeInterim(head string) error {
	c.out = append(c.out, head...)
	err := c.flush(nil)
	c.writeStart = false
	return err
}

// flush writes the buffered response bytes and then extra, in one write
// call where possible.
func (c *conn) flush(extra []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if !c.writeStart && c.srv.opts.WriteTimeout > 0 {
		c.writeStart = true
		if err := c.rwc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout)); err != nil {
			c.werr = err
			return err
		}
	}
	var err error
	switch {
	case len(extra) == 0:
		_, err = c.rwc.Write(c.out)
	case len(c.out) == 0:
		_, err = c.rwc.Write(extra)
	default:
		bufs := net.Buffers{c.out, extra}
		_, err = bufs.WriteTo(c.rwc)
	}
	c.out = c.out[:0]
	if err != nil {
		c.werr = err
	}
	return err
}

// refuse answers a request the server cannot take and ends the connection.
func (c *conn) refuse(perr *protocolError) {
	msg := strconv.Itoa(perr.status) + " " + http.StatusText(perr.status) + ": " + perr.reason
	c.out = fmt.Appendf(c.out[:0], "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		perr.status, http.StatusText(perr.status), len(msg), msg)
	c.flush(nil)
}

// recycle readies the connection for its next request.
func (c *conn) recycle() {
	c.writeStart = false
	if cap(c.out) > maxKeptBuf {
		c.out = nil
	}
	if c.r == c.w && len(c.buf) > maxKeptBuf {
		c.buf, c.r, c.w = nil, 0, 0
	}
}

// setIdle marks the connection idle between requests, unless the server
// is shutting down, in which case it reports false.
func (c *conn) setIdle() bool {
	c.state.Store(stateIdle)
	return !c.srv.shuttingDown()
}

// closeIfIdle closes the connection if it is idle; it reports whether it
// did.
func (c *conn) closeIfIdle() bool {
	if !c.state.CompareAndSwap(stateIdle, stateClosed) {
		return false
	}
	c.rwc.Close()
	return true
}

func (c *conn) close() {
	c.state.Store(stateClosed)
	if c.linger && c.werr == nil {
		c.lingerClose()
	}
	c.rwc.Close()
	c.srv.untrack(c)
}

// Lingering bounds: how long and how much a closing connection reads of a
// request it did not want.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 8 << 20
)

// lingerClose ends the connection after a response to a request whose
// body was not (all) read. Closing a socket with unread data makes the
// kernel send a reset, and a client that is still sending then loses the
// response it has not read yet. So the server half-closes, then reads and
// drops what keeps coming until the client closes too, or for a bounded
// time and amount (RFC 9112 9.6).
func (c *conn) lingerClose() {
	cw, ok := c.rwc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.rwc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	io.CopyN(io.Discard, c.rwc, lingerBytes)
}
