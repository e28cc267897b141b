package http1

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBuffered is how much of a body without a declared length the
// response holds back to give it one; past it, the body is chunked.
const maxBuffered = 64 << 10

// maxCopied is the largest body write copied behind the header into the
// output buffer; a larger one is handed to the kernel in place, beside the
// buffer (writev), instead of copied first.
const maxCopied = 8 << 10

var errResponseDone = errors.New("http1: write to a response after its handler returned")

// response is the http.ResponseWriter of one request. The status line
// and header are formatted into the connection's output buffer when the
// first body byte (or the end of the handler) comes, and small bodies
// join them there, so a typical response is one write call.
type response struct {
	c      *conn
	req    *http.Request
	body   *body // nil when the request has none
	header http.Header

	status   int   // 0 until WriteHeader
	headDone bool  // the status line and header are in c.out (or sent)
	declared int64 // the handler's Content-Length, or -1
	written  int64 // body bytes the handler wrote
	chunked  bool
	// held is a body without a declared length, held back while small.
	held []byte
	// keepAlive says whether the connection outlives this response.
	keepAlive bool
	finished  bool
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(status int) {
	if w.status != 0 || w.finished {
		return
	}
	if status < 100 || status > 999 {
		panic(fmt.Sprintf("http1: invalid WriteHeader code %d", status))
	}
	if status < 200 {
		// An interim response goes out now, and the final one follows.
		if status != http.StatusSwitchingProtocols {
			w.c.writeInterim(string(w.appendHead(nil, status)))
		}
		return
	}
	w.status = status
	if cl := w.header.Get("Content-Length"); cl != "" && bodyAllowed(status) {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.declared = n
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.finished {
		return 0, errResponseDone
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	switch {
	case w.headDone:
	case w.declared >= 0:
		w.startBody()
	case len(w.held)+len(p) <= maxBuffered:
		w.held = append(w.held, p...)
		return len(p), nil
	default:
		// Too large to hold: chunk it (HTTP/1.1) or end it by closing.
		w.chunked = w.req.ProtoMinor == 1
		w.keepAlive = w.keepAlive && w.chunked
		w.startBody()
		if err := w.send(w.held); err != nil {
			return 0, err
		}
		w.held = nil
	}
	if err := w.send(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// startBody formats the status line and header into the output buffer.
func (w *response) startBody() {
	w.headDone = true
	w.c.out = w.appendHead(w.c.out, w.status)
}

// send adds body bytes to the output, chunk-framed if the body is chunked,
// and writes the output once it is large.
func (w *response) send(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	c := w.c
	if w.chunked {
		c.out = strconv.AppendInt(c.out, int64(len(p)), 16)
		c.out = append(c.out, "\r\n"...)
		defer func() { c.out = append(c.out, "\r\n"...) }()
	}
	if len(p) <= maxCopied && len(c.out)+len(p) <= maxKeptBuf {
		c.out = append(c.out, p...)
		return nil
	}
	return c.flush(p)
}

// finish completes the response when the handler returns.
func (w *response) finish() {
	if w.finished {
		return
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	c := w.c
	hasBody := bodyAllowed(w.status) && w.req.Method != http.MethodHead
	if w.declared >= 0 && w.written < w.declared && hasBody {
		// The handler promised more than it wrote: the client can only
		// learn the body ended short when the connection closes.
		w.keepAlive = false
	}
	if !w.headDone {
		if w.declared < 0 && bodyAllowed(w.status) && (hasBody || w.written > 0) {
			w.header.Set("Content-Length", strconv.FormatInt(w.written, 10))
		}
		w.startBody()
		if hasBody {
			c.out = append(c.out, w.held...)
		}
	}
	if w.chunked {
		c.out = append(c.out, "0\r\n\r\n"...)
	}
	w.finished = true
	if len(c.out) > 0 {
		c.flush(nil)
	}
}

// appendHead formats the status line and the header fields. The
// connection's framing headers are the server's: it sets Content-Length
// (kept from the handler when it declared one), Transfer-Encoding and
// Connection itself.
func (w *response) appendHead(b []byte, status int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	if text := http.StatusText(status); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	b = append(b, "\r\n"...)
	if status < 200 {
		return append(b, "\r\n"...)
	}
	h := w.header
	if hasToken(h["Connection"], "close") || !w.body.drainable() || w.c.srv.shuttingDown() {
		w.keepAlive = false
	}
	hasDate := false
	for key, values := range h {
		switch key {
		case "Connection", "Transfer-Encoding":
			continue
		case "Content-Length":
			if !bodyAllowed(status) && status != http.StatusNotModified {
				continue
			}
		case "Date":
			hasDate = true
		}
		if !isToken(key) {
			continue // a name that could not be sent without breaking the header
		}
		for _, v := range values {
			b = append(b, key...)
			b = append(b, ": "...)
			b = appendFieldValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	if !hasDate {
		b = append(b, "Date: "...)
		b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
		b = append(b, "\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	switch {
	case !w.keepAlive:
		b = append(b, "Connection: close\r\n"...)
	case w.req.ProtoMinor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendFieldValue appends a header value with any CR or LF made a space:
// a handler echoing client input must not be able to split the header.
func appendFieldValue(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\r\n") {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			b = append(b, ' ')
		} else {
			b = append(b, c)
		}
	}
	return b
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
