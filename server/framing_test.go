package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// The hostile-framing suite sends raw bytes on fresh connections: request
// smuggling shapes, malformed chunked bodies, malformed and oversized
// heads, and clients that send too little. Each case states the answer
// required, whether the connection must be closed after it, and whether
// its entity may be written; a pipelined canary request follows the bytes
// wherever a client could send one, and must never be answered after a
// framing the server refused or distrusted.

// canary is the pipelined request that must not be answered after a
// refused framing.
const canary = "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: canary\r\n\r\n"

// signedHead returns the head of a Shared Key Lite signed request to the
// development account at path (without the account; a query string, if
// any, is not signed, comp apart), ending in the blank line, with extra
// header lines.
func signedHead(t *testing.T, method, path, proto string, extra ...string) string {
	t.Helper()
	date := time.Now().UTC().Format(http.TimeFormat)
	resource, _, _ := strings.Cut(path, "?")
	sig, err := auth.SignString(auth.DevAccountKey, date+"\n/"+auth.DevAccountName+"/"+auth.DevAccountName+resource)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s /%s%s %s\r\nHost: 127.0.0.1\r\nx-ms-date: %s\r\nx-ms-version: 2019-02-02\r\n", method, auth.DevAccountName, path, proto, date)
	fmt.Fprintf(&b, "Authorization: SharedKeyLite %s:%s\r\nContent-Type: application/json\r\nAccept: application/json;odata=nometadata\r\n", auth.DevAccountName, sig)
	for _, line := range extra {
		b.WriteString(line + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// entityBody is the body inserting entity (p, rk).
func entityBody(rk string) string { return `{"PartitionKey":"p","RowKey":"` + rk + `"}` }

// chunk frames s as one chunk of a chunked body.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// exchange writes raw on a new connection to addr (half-closing it when
// halfClose is set) and reads every response until the server closes the
// connection or, when it keeps it open, until wait passes. It returns
// the statuses and whether the server closed the connection.
func exchange(t *testing.T, addr, raw string, halfClose bool, wait time.Duration) (statuses []int, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, !(errors.As(err, &ne) && ne.Timeout())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
}

func TestHostileFraming(t *testing.T) {
	ts := startServer(t, &server.Options{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10})
	if resp, body := send(t, &http.Client{}, rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"framing"}`), true)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %d %s", resp.StatusCode, body)
	}
	insert := func(extra ...string) string { return signedHead(t, "POST", "/framing", "HTTP/1.1", extra...) }
	chunked := insert("Transfer-Encoding: chunked")
	get := signedHead(t, "GET", "/Tables", "HTTP/1.1")

	for _, c := range []struct {
		name      string
		raw       string
		halfClose bool
		want      []int  // every response, in order: one answer means the canary went unanswered
		closed    bool   // the server must close the connection
		entity    string // RowKey the request inserts; "" when it inserts none
		written   bool   // whether that entity may be in the store afterwards
	}{
		{name: "well-formed chunked insert", raw: chunked + chunk(entityBody("ok")) + "0\r\n\r\n" + canary,
			want: []int{201}, closed: true, entity: "ok", written: true},
		{name: "bare LF ending a chunk-size line", raw: chunked + strings.Replace(chunk(entityBody("lf")), "\r\n", "\n", 1) + "0\r\n\r\n" + canary,
			want: []int{400}, closed: true, entity: "lf"},
		{name: "junk after the chunk size", raw: chunked + strings.Replace(chunk(entityBody("junk")), "\r\n", "zz\r\n", 1) + "0\r\n\r\n" + canary,
			want: []int{400}, closed: true, entity: "junk"},
		{name: "CR inside a chunk extension", raw: chunked + strings.Replace(chunk(entityBody("cr")), "\r\n", ";a\rb\r\n", 1) + "0\r\n\r\n" + canary,
			want: []int{400}, closed: true, entity: "cr"},
		// net/http reads past a NUL in an extension; the body is whole, so
		// the insert stands, but nothing after it on the connection is read.
		{name: "NUL inside a chunk extension", raw: chunked + strings.Replace(chunk(entityBody("nul")), "\r\n", ";a=\x00\r\n", 1) + "0\r\n\r\n" + canary,
			want: []int{201}, closed: true, entity: "nul", written: true},
		{name: "a request inside the trailers", raw: chunked + chunk(entityBody("trailer")) + "0\r\nGET /devstoreaccount1/Tables HTTP/1.1\r\nHost: x\r\n\r\n" + canary,
			want: []int{400}, closed: true, entity: "trailer"},
		{name: "chunked body cut at a chunk boundary, then a request", raw: chunked + chunk(entityBody("cut")) + canary,
			want: []int{400}, closed: true, entity: "cut"},
		{name: "chunked body cut at a chunk boundary, then end of stream", raw: chunked + chunk(entityBody("eof")), halfClose: true,
			want: []int{400}, closed: true, entity: "eof"},
		{name: "chunked body cut inside a chunk", raw: chunked + chunk(entityBody("mid"))[:20], halfClose: true,
			want: []int{400}, closed: true, entity: "mid"},
		// Transfer-Encoding wins (RFC 9112 §6.3); the connection is closed
		// after the answer, as §6.1 requires.
		{name: "Content-Length and Transfer-Encoding", raw: insert("Content-Length: 4", "Transfer-Encoding: chunked") + chunk(entityBody("both")) + "0\r\n\r\n" + canary,
			want: []int{201}, closed: true, entity: "both", written: true},
		{name: "an unknown transfer coding", raw: insert("Transfer-Encoding: gzip, chunked") + chunk(entityBody("gzip")) + "0\r\n\r\n" + canary,
			want: []int{501}, closed: true, entity: "gzip"},
		{name: "two unequal Content-Lengths", raw: insert("Content-Length: 34", "Content-Length: 3") + entityBody("dupcl") + canary,
			want: []int{400}, closed: true, entity: "dupcl"},
		{name: "a negative Content-Length", raw: insert("Content-Length: -36") + entityBody("negcl") + canary,
			want: []int{400}, closed: true, entity: "negcl"},
		{name: "a signed Content-Length", raw: insert(fmt.Sprintf("Content-Length: +%d", len(entityBody("pluscl")))) + entityBody("pluscl") + canary,
			want: []int{400}, closed: true, entity: "pluscl"},
		{name: "an overflowing Content-Length", raw: insert("Content-Length: 99999999999999999999999") + entityBody("bigcl") + canary,
			want: []int{400}, closed: true, entity: "bigcl"},
		// HTTP/1.0 has no chunked coding; net/http ignores the header, so
		// the connection cannot be trusted past this request.
		{name: "HTTP/1.0 keep-alive with Transfer-Encoding", raw: signedHead(t, "GET", "/Tables", "HTTP/1.0", "Connection: keep-alive", "Transfer-Encoding: chunked") + canary,
			want: []int{200}, closed: true},
		// Obsolete line folding is replaced by a space (RFC 9112 §5.2): the
		// framing is unambiguous, so the connection, and the canary, go on.
		{name: "obs-fold in a header", raw: signedHead(t, "GET", "/Tables", "HTTP/1.1", "X-Folded: a", " b") + canary,
			want: []int{200, 403}},
		{name: "duplicate Host", raw: strings.Replace(get, "Host: 127.0.0.1\r\n", "Host: 127.0.0.1\r\nHost: evil\r\n", 1) + canary,
			want: []int{400}, closed: true},
		{name: "no Host in HTTP/1.1", raw: strings.Replace(get, "Host: 127.0.0.1\r\n", "", 1) + canary,
			want: []int{400}, closed: true},
		{name: "a space before a header's colon", raw: insert("Content-Length : 36") + entityBody("space") + canary,
			want: []int{400}, closed: true, entity: "space"},
		{name: "a head over MaxHeaderBytes", raw: "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n" + canary,
			want: []int{431}, closed: true},
		{name: "a request line that is not HTTP", raw: "GET / FTP/1.0\r\n\r\n" + canary, want: []int{400}, closed: true},
		{name: "HTTP/2 preface on a plain connection", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + canary, want: []int{400}, closed: true},
		{name: "silence", raw: "", want: nil, closed: true},
		{name: "half a head, then silence", raw: "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: h\r\n", want: nil, closed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Silent clients are cut off at the header timeout (0.5 s), not
			// the idle timeout (a minute): 5 s is a generous bound. Where the
			// connection rightly stays open, a second is enough for answers.
			wait := 5 * time.Second
			if !c.closed {
				wait = time.Second
			}
			statuses, closed := exchange(t, ts.Addr, c.raw, c.halfClose, wait)
			if fmt.Sprint(statuses) != fmt.Sprint(c.want) {
				t.Errorf("answers %v, want %v", statuses, c.want)
			}
			if c.closed && !closed {
				t.Errorf("the server kept the connection open")
			}
			if c.entity != "" {
				_, err := ts.Store.GetEntity(context.Background(), auth.DevAccountName, "framing", "p", c.entity)
				if exists := err == nil; exists != c.written {
					t.Errorf("entity %q in the store: %v (err %v), want %v", c.entity, exists, err, c.written)
				}
				if err != nil && !partition.IsCode(err, partition.CodeResourceNotFound) {
					t.Errorf("reading entity %q: %v", c.entity, err)
				}
			}
		})
	}
}

// TestSlowHeadIsCutOff trickles a request head a byte at a time, each
// byte inside the idle timeout: the header timeout still ends it.
func TestSlowHeadIsCutOff(t *testing.T) {
	ts := startServer(t, &server.Options{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: time.Minute})
	conn, err := net.Dial("tcp", ts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 250 bytes at one per 20 ms: five seconds of head, ten header
	// timeouts.
	head := "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: h\r\nX-Slow: " + strings.Repeat("a", 200)
	for i := 0; i < len(head); i++ {
		if _, err := conn.Write([]byte{head[i]}); err != nil {
			break // cut off, and the client has noticed
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a trickling client's connection open")
	}
}

// TestConnectionCap opens 10,000 idle connections against a cap of 200:
// the server never holds more than the cap, closes the rest as they
// arrive, closes the idle 200 at the header timeout, and then serves a
// client as usual.
func TestConnectionCap(t *testing.T) {
	const maxConns, flood = 200, 10_000
	ts := startServer(t, &server.Options{MaxConns: maxConns, ReadHeaderTimeout: 3 * time.Second, IdleTimeout: time.Minute})
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	peak := int64(0)
	sample := func() server.ConnStats {
		st := ts.Server.ConnStats()
		peak = max(peak, st.Open)
		return st
	}
	for range flood {
		c, err := net.Dial("tcp", ts.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		sample()
	}
	// Every connection is accepted: the cap's worth held, the rest closed.
	deadline := time.Now().Add(30 * time.Second)
	for st := sample(); st.Accepted < flood; st = sample() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the server has accepted %d of %d connections", st.Accepted, flood)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// (Once the header timeout frees the first slots, later connections
	// may take them: the cap bounds what is held, not what is refused.)
	if st := sample(); peak > maxConns || st.Refused == 0 {
		t.Errorf("the server held up to %d connections and refused %d; its cap is %d", peak, st.Refused, maxConns)
	}
	// A connection past the cap is closed at once: the client reads EOF,
	// not a timeout. Connections are accepted in the order they were
	// dialed, and the first few hundred were dialed well inside the first
	// header timeout, so the 300th found every slot taken.
	refused := conns[maxConns+100]
	refused.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := refused.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection past the cap: read %v, want EOF", err)
	}
	// The held ones send nothing: the header timeout closes them.
	for st := sample(); st.Open > 0; st = sample() {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections still open", st.Open)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, body := send(t, &http.Client{}, rawRequest(t, ts, "GET", "/Tables", nil, true)); resp.StatusCode != http.StatusOK {
		t.Fatalf("a client after the flood: %d %s", resp.StatusCode, body)
	}
}
