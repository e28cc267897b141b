package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echo answers every request with what it saw: method, target, protocol,
// body, and the header fields a test asks for by name in X-Show.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s host=%s len=%d body=%q", r.Method, r.RequestURI, r.Proto, r.Host, r.ContentLength, body)
	for _, k := range strings.Fields(r.Header.Get("X-Show")) {
		fmt.Fprintf(&b, " %s=%q", k, r.Header.Values(k))
	}
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	io.WriteString(w, b.String())
}

// serve runs a Server with h (and opts) on a loopback port for the test.
func serve(t *testing.T, h http.HandlerFunc, opts Options) (addr string, s *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Handler = h
	s = New(opts)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), s
}

// rawConn is a client connection that writes raw bytes and reads
// responses with net/http's own parser.
type rawConn struct {
	t *testing.T
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, Conn: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Fatal(err)
	}
}

// response reads one response to a request with method.
func (c *rawConn) response(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading a response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading a response body: %v", err)
	}
	return resp, string(body)
}

// closed reports whether the server has closed the connection (after all
// it sent was read).
func (c *rawConn) closed() bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.br.ReadByte()
	return err == io.EOF
}

func TestKeepAliveAndPipelining(t *testing.T) {
	addr, _ := serve(t, echo, Options{})
	c := dial(t, addr)
	c.send("GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, body := c.response("GET"); body != `GET /a HTTP/1.1 host=h len=0 body=""` {
		t.Errorf("first: %s", body)
	}
	// Two requests in one write, and a third split mid-head.
	c.send("POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\nHost: h\r\n\r\nGET /d HTTP/1.1\r\nHo")
	if _, body := c.response("POST"); body != `POST /b HTTP/1.1 host=h len=3 body="xyz"` {
		t.Errorf("pipelined POST: %s", body)
	}
	if _, body := c.response("GET"); body != `GET /c HTTP/1.1 host=h len=0 body=""` {
		t.Errorf("pipelined GET: %s", body)
	}
	c.send("st: h\r\nConnection: close\r\n\r\n")
	resp, body := c.response("GET")
	if body != `GET /d HTTP/1.1 host=h len=0 body=""` || !resp.Close {
		t.Errorf("last: %s (close %v)", body, resp.Close)
	}
	if !c.closed() {
		t.Error("connection open after Connection: close")
	}
}

func TestHTTP10(t *testing.T) {
	addr, _ := serve(t, echo, Options{})
	c := dial(t, addr)
	c.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	if resp, _ := c.response("GET"); resp.Close || resp.Header.Get("Connection") != "keep-alive" {
		t.Errorf("1.0 keep-alive: close %v, Connection %q", resp.Close, resp.Header.Get("Connection"))
	}
	c.send("GET /b HTTP/1.0\r\n\r\n")
	if resp, body := c.response("GET"); !resp.Close || !strings.HasPrefix(body, "GET /b HTTP/1.0") {
		t.Errorf("1.0: close %v, body %s", resp.Close, body)
	}
	if !c.closed() {
		t.Error("HTTP/1.0 connection left open")
	}
}

func TestChunkedRequestBody(t *testing.T) {
	addr, _ := serve(t, echo, Options{})
	c := dial(t, addr)
	c.send("POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-Show: Trailer-A\r\n\r\n" +
		"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer-A: x\r\n\r\n" +
		"GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, body := c.response("POST"); body != `POST /a HTTP/1.1 host=h len=-1 body="abc0123456789abcdef" Trailer-A=[]` {
		t.Errorf("chunked: %s", body)
	}
	if _, body := c.response("GET"); !strings.HasPrefix(body, "GET /next") {
		t.Errorf("after a chunked body: %s", body)
	}

	for _, bad := range []string{"3\r\nabcX\r\n0\r\n\r\n", "z\r\nabc\r\n", "3\r\nab", "1;" + strings.Repeat("x", 5000) + "\r\n"} {
		c := dial(t, addr)
		c.send("POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + bad)
		if bad == "3\r\nab" {
			c.Conn.(*net.TCPConn).CloseWrite()
		}
		resp, body := c.response("POST")
		if resp.StatusCode != 400 || !strings.Contains(body, "body:") || !c.closed() {
			t.Errorf("chunked body %q: %d %s", bad, resp.StatusCode, body)
		}
	}
}

func TestExpectContinue(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		echo(w, r)
	}, Options{})
	c := dial(t, addr)
	c.send("PUT /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	if resp, _ := c.response("PUT"); resp.StatusCode != http.StatusContinue {
		t.Fatalf("interim response %d", resp.StatusCode)
	}
	c.send("data")
	if resp, body := c.response("PUT"); resp.StatusCode != 200 || !strings.Contains(body, `body="data"`) {
		t.Errorf("after 100 Continue: %d %s", resp.StatusCode, body)
	}

	// A handler that refuses without reading the body: no 100, and the
	// connection ends since the client may or may not send the body.
	c.send("PUT /refuse HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	if resp, _ := c.response("PUT"); resp.StatusCode != http.StatusForbidden || !resp.Close {
		t.Errorf("refused: %d close %v", resp.StatusCode, resp.Close)
	}
	if !c.closed() {
		t.Error("connection open after an unanswered Expect")
	}
}

func TestResponseFraming(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", maxBuffered/16+1)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small": // no length declared: the server counts it
			io.WriteString(w, "hello")
			io.WriteString(w, " world")
		case "/big": // no length, too large to hold: chunked
			io.WriteString(w, big[:100])
			io.WriteString(w, big[100:])
		case "/declared":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			io.WriteString(w, big)
		case "/nobody":
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(http.StatusNoContent)
			if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
				panic("a 204 took a body")
			}
		case "/short": // promises more than it writes
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/inject":
			w.Header().Set("X-Echo", "a\r\nSet-Cookie: evil")
			w.Header()["Bad Name"] = []string{"x"}
		case "/early": // an interim response, then the final one
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "final")
		case "/empty":
		}
	}, Options{})
	c := dial(t, addr)

	c.send("GET /small HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("GET"); body != "hello world" || resp.ContentLength != 11 {
		t.Errorf("small: %d %q", resp.ContentLength, body)
	}
	c.send("GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("GET"); body != big || len(resp.TransferEncoding) != 1 || resp.Close {
		t.Errorf("big: %v %v %d bytes", resp.TransferEncoding, resp.Close, len(body))
	}
	c.send("GET /declared HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("GET"); body != big || resp.ContentLength != int64(len(big)) {
		t.Errorf("declared: %d, %d bytes", resp.ContentLength, len(body))
	}
	c.send("HEAD /declared HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("HEAD"); body != "" || resp.ContentLength != int64(len(big)) {
		t.Errorf("HEAD: %d %q", resp.ContentLength, body)
	}
	c.send("GET /nobody HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("GET"); resp.StatusCode != 204 || body != "" || resp.Header.Get("Content-Length") != "" {
		t.Errorf("204: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	c.send("GET /inject HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _ := c.response("GET"); resp.Header.Get("X-Echo") != "a  Set-Cookie: evil" || resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Date") == "" {
		t.Errorf("header injection: %v", resp.Header)
	}
	c.send("GET /early HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _ := c.response("GET"); resp.StatusCode != http.StatusEarlyHints {
		t.Errorf("interim response: %d", resp.StatusCode)
	}
	if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "final" {
		t.Errorf("after an interim response: %d %q", resp.StatusCode, body)
	}
	c.send("GET /empty HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, body := c.response("GET"); resp.StatusCode != 200 || resp.ContentLength != 0 || body != "" {
		t.Errorf("empty: %d %d %q", resp.StatusCode, resp.ContentLength, body)
	}
	c.send("GET /short HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); string(body) != "abc" || err != io.ErrUnexpectedEOF {
		t.Errorf("short body: %q %v", body, err)
	}

	// HTTP/1.0 cannot chunk: the body ends with the connection.
	c = dial(t, addr)
	c.send("GET /big HTTP/1.0\r\n\r\n")
	if resp, body := c.response("GET"); body != big || !resp.Close {
		t.Errorf("big over 1.0: close %v, %d bytes", resp.Close, len(body))
	}
}

func TestRefusedRequests(t *testing.T) {
	var handled atomic.Int32
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) { handled.Add(1) }, Options{MaxHeaderBytes: 1024})
	for _, tc := range []struct {
		req    string
		status int
	}{
		{"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("x", 2000) + "\r\n\r\n", 431},
		{"GET /" + strings.Repeat("x", 2000) + " HTTP/1.1\r\nHost: h\r\n\r\n", 431},
		{"GET / HTTP/1.1\r\n\r\n", 400},
		{"BREW / HTCPCP/1.0\r\nHost: h\r\n\r\n", 400},
		{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", 400},
		{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", 501},
		{"GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505},
		{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400}, // a TLS hello
	} {
		c := dial(t, addr)
		c.send(tc.req)
		resp, body := c.response("GET")
		if resp.StatusCode != tc.status || !resp.Close || !strings.HasPrefix(body, strconv.Itoa(tc.status)) || !c.closed() {
			t.Errorf("%.40q: %d close %v %q", tc.req, resp.StatusCode, resp.Close, body)
		}
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("the handler saw %d refused requests", n)
	}
	// Empty lines before a request line are ignored.
	c := dial(t, addr)
	c.send("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("after empty lines: %d", resp.StatusCode)
	}
}

// TestUnreadBody: a handler that answers without reading a large body
// gets its response to the client, which is still sending, intact; the
// connection then ends. A small unread body is skipped and the connection
// kept.
func TestUnreadBody(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "7")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, "too big")
	}, Options{})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789")
	if resp, _ := c.response("POST"); resp.StatusCode != 413 || resp.Close {
		t.Errorf("small unread body: %d close %v", resp.StatusCode, resp.Close)
	}

	const size = 6 << 20
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n")
	sent := make(chan error, 1)
	go func() {
		_, err := c.Conn.Write(make([]byte, size))
		sent <- err
	}()
	resp, body := c.response("POST")
	if resp.StatusCode != 413 || body != "too big" || !resp.Close {
		t.Errorf("large unread body: %d %q close %v", resp.StatusCode, body, resp.Close)
	}
	<-sent // whether the rest went through is up to the server's lingering bounds
}

func TestHandlerPanic(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("handler bug")
		}
		echo(w, r)
	}, Options{})
	c := dial(t, addr)
	c.send("GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")
	if !c.closed() {
		t.Error("connection open after a panic")
	}
	c = dial(t, addr)
	c.send("GET /ok HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("after a panic: %d", resp.StatusCode)
	}
}

func TestTimeouts(t *testing.T) {
	addr, _ := serve(t, echo, Options{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	elapsed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}

	// Idle: a kept-alive connection that sends nothing more is closed.
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	c.response("GET")
	if d := elapsed(func() {
		if !c.closed() {
			t.Error("idle connection not closed")
		}
	}); d > 1500*time.Millisecond {
		t.Errorf("idle connection closed after %v", d)
	}

	// A head trickled a byte at a time is cut off at ReadHeaderTimeout,
	// however steadily it comes.
	c = dial(t, addr)
	head := "GET / HTTP/1.1\r\nHost: h\r\nX-Slow: " + strings.Repeat("s", 100) + "\r\n\r\n"
	d := elapsed(func() {
		for i := 0; i < len(head); i++ {
			if _, err := c.Conn.Write([]byte{head[i]}); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if d > 1500*time.Millisecond || !c.closed() {
		t.Errorf("trickling client held its connection for %v", d)
	}

	// A body that stops coming is cut off at ReadTimeout.
	c = dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
	if d := elapsed(func() {
		resp, body := c.response("POST")
		if resp.StatusCode != 400 || !strings.Contains(body, "timeout") {
			t.Errorf("stalled body: %d %s", resp.StatusCode, body)
		}
	}); d > 1500*time.Millisecond {
		t.Errorf("stalled body answered after %v", d)
	}
}

// TestNoReadTimeout: without a ReadTimeout a body may take longer than the
// header timeout; the head's deadline does not carry over to it.
func TestNoReadTimeout(t *testing.T) {
	addr, _ := serve(t, echo, Options{ReadHeaderTimeout: 100 * time.Millisecond})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\na")
	time.Sleep(300 * time.Millisecond)
	c.send("b")
	if resp, body := c.response("POST"); resp.StatusCode != 200 || !strings.Contains(body, `body="ab"`) {
		t.Errorf("slow body without ReadTimeout: %d %s", resp.StatusCode, body)
	}
}

// TestContinueWriteDeadline: the write deadline of a response starts with
// the response, not with the 100 Continue sent before its body arrived.
func TestContinueWriteDeadline(t *testing.T) {
	addr, _ := serve(t, echo, Options{WriteTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	c.send("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	if resp, _ := c.response("PUT"); resp.StatusCode != http.StatusContinue {
		t.Fatalf("interim response %d", resp.StatusCode)
	}
	time.Sleep(400 * time.Millisecond)
	c.send("ok")
	if resp, body := c.response("PUT"); resp.StatusCode != 200 || !strings.Contains(body, `body="ok"`) {
		t.Errorf("after a slow body: %d %s", resp.StatusCode, body)
	}
}
