package http1

import (
	"errors"
	"io"
	"net/http"
)

// maxDrain is how much of a body its handler left unread the server reads
// and discards to keep the connection; past it, closing is cheaper.
const maxDrain = 256 << 10

// maxChunkLine bounds a chunk-size line with its extensions.
const maxChunkLine = 4096

var (
	errBodyDone     = errors.New("http1: read of a request body after its handler returned")
	errBadChunk     = errors.New("http1: malformed chunked encoding")
	errChunkTooLong = errors.New("http1: chunk-size line too long")
)

// body reads a request's body off its connection: exactly what the
// framing delimits, so the next request starts where it ends.
type body struct {
	c       *conn
	chunked bool
	// left is what remains of the body (Content-Length) or of the current
	// chunk (chunked).
	left int64
	// inChunk is set between a chunk's size line and its data's CRLF.
	inChunk bool
	eof     bool
	err     error // sticky: a malformed or cut-off body
	// continueDue is set while an "Expect: 100-continue" waits for its
	// interim response, sent on the first read.
	continueDue bool
	done        bool // the handler has returned
}

func (b *body) Read(p []byte) (int, error) {
	switch {
	case b.done:
		return 0, errBodyDone
	case b.err != nil:
		return 0, b.err
	case b.eof:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if b.continueDue {
		b.continueDue = false
		if err := b.c.writeInterim("HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			b.err = err
			return 0, err
		}
	}
	if b.chunked && b.left == 0 {
		if err := b.nextChunk(); err != nil {
			b.err = err
			return 0, err
		}
		if b.eof {
			return 0, io.EOF
		}
	}
	n, err := b.c.readBody(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
		return n, err
	}
	if b.left == 0 && !b.chunked {
		b.eof = true
		return n, io.EOF
	}
	return n, nil
}

// nextChunk reads the CRLF that ends the chunk just read, then the next
// chunk's size line; a zero size ends the body after its trailer fields,
// which are read and dropped.
func (b *body) nextChunk() error {
	if b.inChunk {
		line, err := b.c.readLine(maxChunkLine)
		if err != nil {
			return err
		}
		if len(line) != 0 {
			return errBadChunk
		}
	}
	line, err := b.c.readLine(maxChunkLine)
	if err != nil {
		return err
	}
	size, ok := parseChunkSize(line)
	if !ok {
		return errBadChunk
	}
	if size == 0 {
		for trailer := 0; ; trailer += len(line) {
			if trailer > b.c.srv.opts.MaxHeaderBytes {
				return errChunkTooLong
			}
			if line, err = b.c.readLine(maxChunkLine); err != nil {
				return err
			}
			if len(line) == 0 {
				b.eof = true
				return nil
			}
		}
	}
	b.left, b.inChunk = size, true
	return nil
}

// parseChunkSize reads a chunk-size line: hexadecimal digits, then
// optional extensions after a ';', which are ignored.
func parseChunkSize(line []byte) (int64, bool) {
	var n int64
	digits := 0
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		case c == ';' || c == ' ' || c == '\t':
			return n, digits > 0
		default:
			return 0, false
		}
		if digits++; digits > 15 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, digits > 0
}

// finish ends the body when its handler returns, reading and discarding
// a small unread rest. It reports whether the connection can carry
// another request.
func (b *body) finish() bool {
	defer func() { b.done = true }()
	if b.eof {
		return true
	}
	if b.err != nil || b.continueDue {
		// A client still waiting for 100 Continue may or may not send
		// the body: the connection's framing is unknown.
		return false
	}
	if !b.chunked && b.left > maxDrain {
		return false
	}
	n, err := io.CopyN(io.Discard, b, maxDrain+1)
	return n <= maxDrain && err == io.EOF
}

// drainable reports whether finish can likely keep the connection: the
// body is read, or what is left of it is known and small. A response
// header sent before the handler returns says "Connection: close" when it
// is not.
func (b *body) drainable() bool {
	if b == nil || b.eof {
		return true
	}
	return b.err == nil && !b.continueDue && !b.chunked && b.left <= maxDrain
}

// bodyOf returns the Body of a request with this framing.
func bodyOf(c *conn, fr framing) (io.ReadCloser, *body) {
	if !fr.chunked && fr.contentLength == 0 {
		return http.NoBody, nil
	}
	b := &body{c: c, chunked: fr.chunked, left: fr.contentLength, continueDue: fr.expectContinue}
	return io.NopCloser(b), b
}
