package http1

import (
	"bytes"
	"context"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// protocolError is a request the server refuses before any handler sees
// it: the status to answer with and why, and the connection is closed.
type protocolError struct {
	status int
	reason string
}

func (e *protocolError) Error() string { return "http1: " + e.reason }

func badRequest(reason string) *protocolError {
	return &protocolError{status: http.StatusBadRequest, reason: reason}
}

// framing is what a request's header says about its body and its
// connection, beyond what http.Request holds.
type framing struct {
	chunked        bool
	contentLength  int64 // when not chunked
	expectContinue bool
	// keepAlive is whether the connection may carry another request
	// after this one, as far as the request is concerned.
	keepAlive bool
}

// headEnd returns the length of the request head at the start of b, up to
// and including the empty line that ends it, or -1 when b does not yet
// hold a whole head. Lines may end in CRLF or a bare LF (RFC 9112 2.2).
// The search starts at from, where an earlier call on a prefix of b left
// off (so a client sending its head a byte at a time costs linear time).
func headEnd(b []byte, from int) int {
	for i := max(from-2, 0); i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		nl := i + j
		switch {
		case nl+1 < len(b) && b[nl+1] == '\n':
			return nl + 2
		case nl+2 < len(b) && b[nl+1] == '\r' && b[nl+2] == '\n':
			return nl + 3
		}
		i = nl + 1
	}
	return -1
}

// parseHead reads a request head (the request line, the header fields and
// the empty line) into a request with context ctx and without a body, and
// the framing of the body and connection that follow it. The request is
// built on the stack and copied out by WithContext, the one allocation
// a request must make for its context.
func parseHead(ctx context.Context, head string) (*http.Request, framing, *protocolError) {
	var fr framing
	line, rest := cutLine(head)
	method, rest1, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest1, " ")
	if !ok1 || !ok2 || method == "" || target == "" {
		return nil, fr, badRequest("malformed request line")
	}
	if !isToken(method) {
		return nil, fr, badRequest("invalid method")
	}
	major, minor, perr := parseVersion(proto)
	if perr != nil {
		return nil, fr, perr
	}
	req := http.Request{
		Method:     method,
		Proto:      proto,
		ProtoMajor: major,
		ProtoMinor: minor,
		RequestURI: target,
	}
	if target == "*" {
		req.URL = &url.URL{Path: "*"}
	} else {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return nil, fr, badRequest("malformed request target")
		}
		req.URL = u
	}
	h, perr := parseFields(rest)
	if perr != nil {
		return nil, fr, perr
	}
	req.Header = h

	if perr := readHost(&req); perr != nil {
		return nil, fr, perr
	}
	if perr := readFraming(&req, &fr); perr != nil {
		return nil, fr, perr
	}
	return req.WithContext(ctx), fr, nil
}

// cutLine splits s after its first line, dropping the line's CRLF or LF.
func cutLine(s string) (line, rest string) {
	line, rest, _ = strings.Cut(s, "\n")
	return strings.TrimSuffix(line, "\r"), rest
}

// parseVersion reads "HTTP/1.1" or "HTTP/1.0"; a well-formed other version
// is 505, anything else 400.
func parseVersion(proto string) (major, minor int, perr *protocolError) {
	switch proto {
	case "HTTP/1.1":
		return 1, 1, nil
	case "HTTP/1.0":
		return 1, 0, nil
	}
	if len(proto) == 8 && strings.HasPrefix(proto, "HTTP/") && isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]) {
		return 0, 0, &protocolError{status: http.StatusHTTPVersionNotSupported, reason: "unsupported protocol version " + proto}
	}
	return 0, 0, badRequest("malformed protocol version")
}

// parseFields reads header field lines up to the empty line. Values are
// substrings of fields, so a request's header costs the map, one slice
// for all values, and canonical keys only where the client's spelling is
// neither canonical nor a common lower-case one.
func parseFields(fields string) (http.Header, *protocolError) {
	n := strings.Count(fields, "\n") // an upper bound on the number of fields
	h := make(http.Header, n)
	values := make([]string, 0, n)
	for {
		line, rest := cutLine(fields)
		fields = rest
		if line == "" {
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, badRequest("obsolete line folding in the header")
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !isToken(name) {
			return nil, badRequest("malformed header field")
		}
		value = strings.Trim(value, " \t")
		if !validFieldValue(value) {
			return nil, badRequest("invalid character in header field " + strconv.Quote(name))
		}
		key := canonicalKey(name)
		if vv, dup := h[key]; dup {
			h[key] = append(vv, value)
			continue
		}
		values = append(values, value)
		h[key] = values[len(values)-1 : len(values) : len(values)]
	}
}

// readHost sets req.Host: from an absolute-form target, else from the one
// Host header, which HTTP/1.1 requires.
func readHost(req *http.Request) *protocolError {
	hosts := req.Header["Host"]
	if len(hosts) > 1 {
		return badRequest("too many Host headers")
	}
	if len(hosts) == 0 && req.ProtoMinor == 1 && req.URL.Host == "" {
		return badRequest("missing required Host header")
	}
	if len(hosts) == 1 {
		req.Host = hosts[0]
	}
	if req.URL.Host != "" {
		req.Host = req.URL.Host
	}
	if !validHost(req.Host) {
		return badRequest("malformed Host header")
	}
	delete(req.Header, "Host")
	return nil
}

// readFraming decides how the body is delimited and whether the
// connection stays open.
func readFraming(req *http.Request, fr *framing) *protocolError {
	h := req.Header
	te, hasTE := h["Transfer-Encoding"]
	cl, hasCL := h["Content-Length"]
	switch {
	case hasTE && req.ProtoMinor == 0:
		return badRequest("Transfer-Encoding in an HTTP/1.0 request")
	case hasTE && hasCL:
		// Two framings are the stuff of request smuggling: refuse.
		return badRequest("both Transfer-Encoding and Content-Length")
	case hasTE:
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return &protocolError{status: http.StatusNotImplemented, reason: "unsupported Transfer-Encoding"}
		}
		fr.chunked = true
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
		delete(h, "Transfer-Encoding")
	case hasCL:
		n, ok := parseContentLength(cl)
		if !ok {
			return badRequest("invalid Content-Length")
		}
		fr.contentLength = n
		req.ContentLength = n
	}
	if req.ProtoMinor == 1 {
		fr.keepAlive = !hasToken(h["Connection"], "close")
	} else {
		fr.keepAlive = hasToken(h["Connection"], "keep-alive")
	}
	req.Close = !fr.keepAlive
	if expect, ok := h["Expect"]; ok && req.ProtoMinor == 1 {
		if len(expect) != 1 || !strings.EqualFold(expect[0], "100-continue") {
			return &protocolError{status: http.StatusExpectationFailed, reason: "unsupported Expect"}
		}
		fr.expectContinue = true
	}
	return nil
}

// parseContentLength reads Content-Length values: each a list of equal
// decimal lengths (RFC 9110 8.6 lets a recipient take "42, 42" as 42).
func parseContentLength(values []string) (int64, bool) {
	n := int64(-1)
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.Trim(part, " \t")
			if part == "" || len(part) > 18 {
				return 0, false
			}
			var m int64
			for i := 0; i < len(part); i++ {
				if !isDigit(part[i]) {
					return 0, false
				}
				m = m*10 + int64(part[i]-'0')
			}
			if n >= 0 && m != n {
				return 0, false
			}
			n = m
		}
	}
	return n, n >= 0
}

// hasToken reports whether a comma-separated header holds token,
// case-insensitively.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(part, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// commonKeys maps the spellings clients commonly send (canonical, and the
// lower case the JS SDK and curl users send) to canonical header keys, so
// that the usual request canonicalizes without allocating.
var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Authorization", "Connection",
		"Content-Length", "Content-Md5", "Content-Type", "Date", "Dataserviceversion",
		"Expect", "Host", "If-Match", "If-None-Match", "Maxdataserviceversion", "Origin",
		"Prefer", "Traceparent", "Transfer-Encoding", "User-Agent", "X-Http-Method",
		"X-Ms-Client-Request-Id", "X-Ms-Date", "X-Ms-Return-Client-Request-Id", "X-Ms-Version",
		"Access-Control-Request-Method", "Access-Control-Request-Headers",
	} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	return m
}()

func canonicalKey(name string) string {
	if k, ok := commonKeys[name]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// tokenChars are the bytes of an RFC 9110 token (method, field name).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

// validFieldValue refuses control characters other than tab: a CR or NUL
// inside a value is a smuggling attempt, not data.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validHost accepts the bytes of a URI host and port (RFC 3986: reg-name,
// IP literals in brackets, percent-encoding).
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || strings.IndexByte("-._~:[]%!$&'()*+,;=@", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
