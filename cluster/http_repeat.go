package cluster

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
)

// A request refused because it reached a node that is not, or no longer,
// the one to answer it (a lease being handed over, a range splitting, a
// leader being elected) changed nothing, and would pass moments later.
// The node the client reached repeats such a request for a while, routed
// afresh each time, before it lets the client see the 503: the SDKs would
// retry it too, but only after a backoff of their own, and the moves the
// placement controller makes by itself should not show. Only refusals
// that say so are repeated (svcerr.Error.Retry: the cluster's errMoved);
// a 503 of the emulated limits, or a write whose outcome is unknown, is
// answered as it is.

// repeatFor bounds how long a refused request is repeated: about an
// election's time, far below the service's timeouts.
const repeatFor = 2 * time.Second

// maxRepeatBody bounds the body of a request that is repeated: the
// server's default bound on a body (a batch's 4 MiB). A larger one is
// served once.
const maxRepeatBody = 4 << 20

// retryHeader marks, on the answer to a forwarded request, a refusal the
// node that forwarded it may repeat. It never reaches a client.
const retryHeader = "X-Tabula-Retry"

// serveRepeating answers a client's request as serve does, repeating it
// while it is refused with a refusal that may be repeated, within
// repeatFor and the request's own deadline.
func (h *HTTP) serveRepeating(w http.ResponseWriter, r *http.Request, rest http.Handler) {
	body, ok := bufferBody(r, maxRepeatBody)
	if !ok {
		h.serveOnce(w, r, rest, 0)
		return
	}
	start := time.Now()
	deadline := start.Add(repeatFor)
	if d, ok := r.Context().Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		// The server leaves the report (access log, metrics) of an
		// attempt refused in passing to this loop: one that is repeated
		// is not reported, the client never saw it; the one the client
		// gets is, for the whole time since the request came.
		ctx, note := svcerr.WithRetryNote(r.Context())
		note.HoldReport()
		attempt := r.WithContext(ctx)
		if body != nil {
			attempt.Body = io.NopCloser(bytes.NewReader(body))
		}
		hw := &heldWriter{w: w, header: http.Header{}, note: note}
		h.serveOnce(hw, attempt, rest, 0)
		if !hw.held {
			note.Report(start)
			hw.finish()
			return
		}
		if time.Now().Add(wait).After(deadline) {
			note.Report(start)
			hw.release()
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			note.Report(start)
			hw.release()
			return
		}
	}
}

// bufferBody reads r's body, to send it again, when it is at most limit
// bytes; ok is false for a larger one, which is then served once (what was
// read put back). A request without a body needs no buffer.
func bufferBody(r *http.Request, limit int64) (body []byte, ok bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > limit {
		return nil, false
	}
	// Sized by the length the request declares (and one byte to see the
	// end), so that the common body is read into one allocation.
	b := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := b.ReadFrom(io.LimitReader(r.Body, limit+1))
	buf := b.Bytes()
	if err != nil || int64(len(buf)) > limit {
		// Too large, or the client's stream broke: served once, as it is.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return nil, false
	}
	r.Body.Close()
	return buf, true
}

// heldWriter passes an answer through to w, unless it is a 503 that may
// be repeated (its request's RetryNote is set, or a peer's answer carries
// retryHeader): that one it holds, to send only if its caller gives up.
type heldWriter struct {
	w      http.ResponseWriter
	header http.Header
	note   *svcerr.RetryNote
	status int
	held   bool
	passed bool
	body   bytes.Buffer
}

func (hw *heldWriter) Header() http.Header { return hw.header }

func (hw *heldWriter) WriteHeader(code int) {
	if hw.passed || hw.held {
		return
	}
	if code >= 100 && code < 200 { // informational: the answer is still to come
		copyHeader(hw.w.Header(), hw.header)
		hw.w.WriteHeader(code)
		return
	}
	if code == http.StatusServiceUnavailable && (hw.note.Set() || hw.header.Get(retryHeader) != "") {
		hw.held, hw.status = true, code
		return
	}
	hw.pass(code)
}

func (hw *heldWriter) Write(p []byte) (int, error) {
	if !hw.passed && !hw.held {
		hw.WriteHeader(http.StatusOK)
	}
	if hw.held {
		return hw.body.Write(p)
	}
	return hw.w.Write(p)
}

// Flush passes an answer streamed through on at once (a forwarded one).
func (hw *heldWriter) Flush() {
	if f, ok := hw.w.(http.Flusher); ok && hw.passed {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (the server
// resets one to emulate a fault).
func (hw *heldWriter) Unwrap() http.ResponseWriter { return hw.w }

func (hw *heldWriter) pass(code int) {
	hw.header.Del(retryHeader)
	copyHeader(hw.w.Header(), hw.header)
	hw.w.WriteHeader(code)
	hw.passed = true
}

// finish completes an answer whose handler wrote nothing: 200, as
// net/http answers for a handler that returns without writing.
func (hw *heldWriter) finish() {
	if !hw.passed && !hw.held {
		hw.pass(http.StatusOK)
	}
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// release sends the refusal held: its caller gave up repeating it.
func (hw *heldWriter) release() {
	hw.held = false
	hw.pass(hw.status)
	hw.w.Write(hw.body.Bytes())
}

// retryMarker answers a forwarded request, marking a refusal that may be
// repeated with retryHeader for the node that forwarded it.
type retryMarker struct {
	http.ResponseWriter
	note *svcerr.RetryNote
}

func (m *retryMarker) WriteHeader(code int) {
	if code == http.StatusServiceUnavailable && m.note.Set() {
		m.Header().Set(retryHeader, "1")
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *retryMarker) Write(p []byte) (int, error) { return m.ResponseWriter.Write(p) }

func (m *retryMarker) Flush() {
	if f, ok := m.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (m *retryMarker) Unwrap() http.ResponseWriter { return m.ResponseWriter }
