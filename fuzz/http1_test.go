package fuzz

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/server/http1"
)

// memConn is a connection whose client sent data and then closed its
// side; what the server writes is kept.
type memConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *memConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *memConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10002} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 5000} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// seenRequest is what a handler learned of one request.
type seenRequest struct {
	method, target, host string
	body                 string
	bodyErr              bool
}

// FuzzHTTP1Conn feeds arbitrary bytes to server/http1 as one client
// connection. The server must finish without panicking, and answer with
// well-formed responses: one per request its handler saw, plus at most
// one refusal at the end. Where net/http's own request parser reads the
// same bytes as the same sequence of requests, both must agree on each
// request's method, target, host and body: a disagreement on where a
// body ends is how requests get smuggled past a proxy.
func FuzzHTTP1Conn(f *testing.F) {
	for _, s := range []string{
		"GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: 127.0.0.1:10002\r\nx-ms-version: 2019-02-02\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"PUT /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\nx",
		"GET http://x/y HTTP/1.1\r\nHost: h\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n\r\n\r\nHEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var seen []seenRequest
		srv := http1.New(http1.Options{MaxHeaderBytes: 4096, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			seen = append(seen, seenRequest{method: r.Method, target: r.RequestURI, host: r.Host, body: string(body), bodyErr: err != nil})
			reply := fmt.Sprintf("%s %d", r.Method, len(body))
			w.Header().Set("Content-Length", fmt.Sprint(len(reply)))
			io.WriteString(w, reply)
		})})
		conn := &memConn{in: bytes.NewReader(data)}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeConn(conn)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not return after its input ended")
		}

		// The responses: final ones for the requests seen, a refusal last.
		br := bufio.NewReader(&conn.out)
		finals, refused := 0, false
		for br.Buffered() > 0 || conn.out.Len() > 0 {
			if refused {
				t.Fatalf("a response after the refusal")
			}
			method := "GET"
			if finals < len(seen) {
				method = seen[finals].method
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("response %d is malformed: %v\n%q", finals, err, conn.out.String())
			}
			if _, err := io.ReadAll(resp.Body); err != nil && resp.StatusCode >= 200 && finals < len(seen) {
				t.Fatalf("response %d body: %v", finals, err)
			}
			switch {
			case resp.StatusCode < 200:
			case finals < len(seen):
				finals++
			case resp.StatusCode >= 400 && resp.Close:
				refused = true
			default:
				t.Fatalf("response %d (%d) answers no request", finals, resp.StatusCode)
			}
		}
		if finals != len(seen) {
			t.Fatalf("%d requests, %d responses", len(seen), finals)
		}

		// net/http's reading of the same bytes, as far as it goes.
		nr := bufio.NewReader(bytes.NewReader(data))
		for i, ours := range seen {
			if ours.bodyErr {
				return
			}
			req, err := http.ReadRequest(nr)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			theirs := seenRequest{method: req.Method, target: req.RequestURI, host: req.Host, body: string(body)}
			if theirs != ours && !strings.EqualFold(req.Header.Get("Transfer-Encoding"), "identity") {
				t.Fatalf("request %d: http1 read %+v, net/http %+v", i, ours, theirs)
			}
		}
	})
}
