package batch

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// The service's limits on an entity group transaction
// (performing-entity-group-transactions).
const (
	MaxOperations = 100
	MaxBodyBytes  = 4 << 20
)

// Limits bound what Parse accepts; the zero value means the service's limits.
type Limits struct {
	MaxBodyBytes  int64 // whole request body; larger is 413 RequestBodyTooLarge
	MaxOperations int   // operations in the change set
}

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = MaxBodyBytes
	}
	if l.MaxOperations <= 0 {
		l.MaxOperations = MaxOperations
	}
	return l
}

// maxBoundaryLen is generous: RFC 2046 allows 70 characters and the SDKs
// use "batch_" or "changeset_" plus a GUID.
const maxBoundaryLen = 200

// maxHeaders bounds the header lines of one part or sub-request.
const maxHeaders = 100

// Request is a parsed $batch body.
type Request struct {
	Boundary          string // the batch boundary
	ChangesetBoundary string // "" when the batch is a lone query
	Operations        []*Operation
}

// IsQuery reports whether the batch is a single GET outside a change set,
// the only place the service allows a query (one per batch).
func (r *Request) IsQuery() bool { return r.ChangesetBoundary == "" }

// Operation is one sub-request.
type Operation struct {
	Index     int    // 0-based position in the change set
	ContentID string // the part's Content-ID, if the client sent one
	Method    string // as sent: POST, PUT, MERGE, PATCH, DELETE or GET
	RawURL    string // as sent: absolute, or relative to the account
	URL       *url.URL
	Proto     string // HTTP/1.1
	Header    http.Header
	Body      []byte // with surrounding whitespace trimmed; nil when empty
}

// Target parses the operation's URL path (see ParseTarget). A relative URL
// ("mytable(...)") is relative to the account's base URL and so carries no
// account segment.
func (op *Operation) Target(account string) (Target, error) {
	p := rawPath(op.RawURL)
	if !strings.HasPrefix(p, "/") {
		return ParseTarget("/"+strings.TrimPrefix(p, "./"), "")
	}
	return ParseTarget(p, account)
}

// rawPath returns the path of a URL exactly as written: scheme and
// authority dropped, query and fragment cut off, nothing decoded.
func rawPath(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 && !strings.ContainsAny(raw[:i], "/?#(") {
		rest := raw[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			raw = rest[j:]
		} else {
			raw = "/"
		}
	}
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	return raw
}

// Parse reads a $batch request: contentType is the request's Content-Type
// (multipart/mixed; boundary=batch_...), body its body. It accepts what the
// SDKs send — CRLF or bare LF line endings, absolute or relative
// sub-request URLs, unescaped spaces in URLs, quoted boundaries, a missing
// final boundary, no Content-Length in parts — and refuses anything else
// with a *Error: 413 RequestBodyTooLarge past the body limit, 400
// InvalidInput for bad framing, more operations than the limit, or a method
// a batch cannot hold. It reads at most limits.MaxBodyBytes+1 bytes.
func Parse(contentType string, body io.Reader, limits Limits) (*Request, error) {
	limits = limits.withDefaults()
	boundary, err := multipartBoundary(contentType)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(body, limits.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("batch: reading the request body: %w", err)
	}
	if int64(len(data)) > limits.MaxBodyBytes {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeRequestBodyTooLarge, Index: -1,
			Message: fmt.Sprintf("The request body is too large and exceeds the maximum permissible limit of %d bytes.", limits.MaxBodyBytes)}
	}

	// The batch holds exactly one part: a change set, or a lone query.
	parts, err := splitParts(data, boundary, 1, "batch")
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, malformed("the batch holds no change set")
	}
	hdr, content, err := readMIMEHeaders(parts[0])
	if err != nil {
		return nil, malformed("the batch part's headers: " + err.Error())
	}
	req := &Request{Boundary: boundary}
	mt, params, err := mime.ParseMediaType(hdr.Get("Content-Type"))
	switch {
	case err != nil:
		return nil, malformed("the batch part has no valid Content-Type")
	case mt == "application/http":
		op, err := parseOperation(0, hdr, content)
		if err != nil {
			return nil, err
		}
		if op.Method != http.MethodGet {
			return nil, invalid(0, "An operation outside a change set must be a query (GET); "+op.Method+" needs a change set.")
		}
		req.Operations = []*Operation{op}
		return req, nil
	case mt != "multipart/mixed":
		return nil, malformed("the batch part's Content-Type must be multipart/mixed (a change set) or application/http (a query)")
	}
	cs := params["boundary"]
	if err := checkBoundary(cs); err != nil {
		return nil, err
	}
	req.ChangesetBoundary = cs
	ops, err := splitParts(content, cs, limits.MaxOperations, "change set")
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, malformed("the change set holds no operation")
	}
	for i, part := range ops {
		phdr, pcontent, err := readMIMEHeaders(part)
		if err != nil {
			return nil, invalid(i, fmt.Sprintf("Operation %d has malformed part headers: %v.", i, err))
		}
		op, err := parseOperation(i, phdr, pcontent)
		if err != nil {
			return nil, err
		}
		switch op.Method {
		case http.MethodPost, http.MethodPut, "MERGE", http.MethodPatch, http.MethodDelete:
		case http.MethodGet:
			return nil, invalid(i, "A query (GET) must be the only operation of a batch, outside any change set.")
		default:
			return nil, invalid(i, "The method "+strconv.Quote(op.Method)+" is not allowed in a change set.")
		}
		req.Operations = append(req.Operations, op)
	}
	return req, nil
}

// multipartBoundary checks that contentType is multipart/mixed and returns
// its boundary.
func multipartBoundary(contentType string) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/mixed" {
		return "", invalid(-1, "A batch request must have Content-Type multipart/mixed with a boundary.")
	}
	b := params["boundary"]
	if err := checkBoundary(b); err != nil {
		return "", err
	}
	return b, nil
}

func checkBoundary(b string) error {
	if b == "" || len(b) > maxBoundaryLen || strings.ContainsAny(b, "\r\n") {
		return malformed("a multipart boundary is missing or not valid")
	}
	return nil
}

// splitParts returns the body parts of a multipart entity: the bytes after
// each delimiter line, up to the line break before the next delimiter
// (RFC 2046 §5.1.1). A delimiter is "--boundary" at the start of a line,
// then optional "--" (the close delimiter), optional spaces or tabs, and a
// CRLF or LF line end. The preamble and epilogue are ignored. A body that
// ends without the close delimiter is accepted when nothing but whitespace
// follows the last delimiter (documentation samples end that way).
func splitParts(body []byte, boundary string, maxParts int, what string) ([][]byte, error) {
	dash := []byte("--" + boundary)
	pos, closing, next := findDelimiter(body, 0, dash)
	if pos < 0 {
		return nil, malformed("the " + what + " boundary " + strconv.Quote(boundary) + " never occurs")
	}
	var parts [][]byte
	for !closing {
		start := next
		end, isClose, after := findDelimiter(body, start, dash)
		if end < 0 {
			if len(trimSpace(body[start:])) == 0 {
				return parts, nil
			}
			return nil, malformed("the " + what + " does not end with its closing boundary")
		}
		content := body[start:end]
		// The line break before a delimiter belongs to the delimiter.
		content = bytes.TrimSuffix(content, []byte("\n"))
		content = bytes.TrimSuffix(content, []byte("\r"))
		parts = append(parts, content)
		if len(parts) > maxParts {
			if what == "change set" {
				return nil, invalid(0, MsgTooManyOperations)
			}
			return nil, invalid(-1, "A batch holds exactly one change set, or one query.")
		}
		closing, next = isClose, after
	}
	return parts, nil
}

// findDelimiter finds the first delimiter line at or after from. It returns
// the delimiter's offset (-1 if none), whether it is the close delimiter,
// and the offset just past its line.
func findDelimiter(body []byte, from int, dash []byte) (at int, closing bool, next int) {
	for from <= len(body) {
		i := bytes.Index(body[from:], dash)
		if i < 0 {
			return -1, false, 0
		}
		at = from + i
		from = at + 1
		if at > 0 && body[at-1] != '\n' {
			continue // not at the start of a line
		}
		j := at + len(dash)
		closing = bytes.HasPrefix(body[j:], []byte("--"))
		if closing {
			j += 2
		}
		for j < len(body) && (body[j] == ' ' || body[j] == '\t') {
			j++
		}
		switch {
		case j == len(body):
			return at, closing, j
		case body[j] == '\n':
			return at, closing, j + 1
		case body[j] == '\r' && j+1 < len(body) && body[j+1] == '\n':
			return at, closing, j + 2
		case closing:
			// Text after a close delimiter is epilogue; accept it.
			return at, true, j
		}
		// "--boundaryX...": a longer token that merely starts with the boundary.
	}
	return -1, false, 0
}

// nextLine splits off the first line of b (without its CRLF or LF); ok is
// false when b holds no line break.
func nextLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil, false
	}
	line, rest = b[:i], b[i+1:]
	return bytes.TrimSuffix(line, []byte("\r")), rest, true
}

// readHeaderLines reads "Name: value" lines up to an empty line, folding
// continuation lines. With atEOF, running out of input ends the block too.
func readHeaderLines(b []byte, atEOF bool) (http.Header, []byte, error) {
	h := make(http.Header)
	var last string
	n := 0
	for {
		if len(b) == 0 {
			if atEOF {
				return h, nil, nil
			}
			return nil, nil, fmt.Errorf("the headers do not end with an empty line")
		}
		line, rest, ok := nextLine(b)
		if !ok && !atEOF {
			return nil, nil, fmt.Errorf("the headers do not end with an empty line")
		}
		b = rest
		if len(line) == 0 {
			return h, b, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last == "" {
				return nil, nil, fmt.Errorf("a continuation line comes before any header")
			}
			vs := h[last]
			vs[len(vs)-1] += " " + strings.TrimSpace(string(line))
			continue
		}
		name, value, found := strings.Cut(string(line), ":")
		name = strings.TrimRight(name, " \t")
		if !found || !validHeaderName(name) {
			return nil, nil, fmt.Errorf("%q is not a header line", truncate(string(line), 60))
		}
		if n++; n > maxHeaders {
			return nil, nil, fmt.Errorf("more than %d headers", maxHeaders)
		}
		last = textproto.CanonicalMIMEHeaderKey(name)
		h[last] = append(h[last], strings.TrimSpace(value))
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// readMIMEHeaders reads a body part's MIME headers; the part must go on
// past them.
func readMIMEHeaders(part []byte) (http.Header, []byte, error) {
	// Some writers leave a blank line before the headers; skip it.
	part = trimLeadingNewlines(part)
	return readHeaderLines(part, false)
}

func trimLeadingNewlines(b []byte) []byte {
	for len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// parseOperation reads one application/http part: its MIME headers hdr are
// already read, content is the embedded HTTP request.
func parseOperation(index int, hdr http.Header, content []byte) (*Operation, error) {
	if ct := hdr.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/http" {
			return nil, invalid(index, fmt.Sprintf("Operation %d: a change set part must have Content-Type application/http.", index))
		}
	}
	if te := strings.ToLower(hdr.Get("Content-Transfer-Encoding")); te != "" && te != "binary" && te != "8bit" && te != "7bit" {
		return nil, invalid(index, fmt.Sprintf("Operation %d: Content-Transfer-Encoding must be binary.", index))
	}
	content = trimLeadingNewlines(content)
	line, rest, _ := nextLine(content)
	method, rawURL, proto, ok := parseRequestLine(string(line))
	if !ok {
		return nil, invalid(index, fmt.Sprintf("Operation %d: %q is not an HTTP request line.", index, truncate(string(line), 80)))
	}
	u, err := parseSubURL(rawURL)
	if err != nil {
		return nil, invalid(index, fmt.Sprintf("Operation %d: the URL %q is not valid.", index, truncate(rawURL, 80)))
	}
	h, body, err := readHeaderLines(rest, true)
	if err != nil {
		return nil, invalid(index, fmt.Sprintf("Operation %d: %v.", index, err))
	}
	op := &Operation{Index: index, Method: method, RawURL: rawURL, URL: u, Proto: proto, Header: h}
	if body = trimSpace(body); len(body) > 0 {
		op.Body = body
	}
	// OData puts Content-ID among the part's MIME headers; some clients put
	// it among the sub-request's headers instead.
	op.ContentID = hdr.Get("Content-ID")
	if op.ContentID == "" {
		op.ContentID = h.Get("Content-ID")
	}
	return op, nil
}

// parseRequestLine splits "METHOD URL HTTP/1.1". The URL may hold spaces
// (documentation samples write "(PartitionKey='a', RowKey='b')"), so it is
// everything between the first and the last space-separated field.
func parseRequestLine(line string) (method, rawURL, proto string, ok bool) {
	line = strings.TrimSpace(line)
	i := strings.IndexAny(line, " \t")
	j := strings.LastIndexAny(line, " \t")
	if i < 0 || j <= i {
		return "", "", "", false
	}
	method, rawURL, proto = line[:i], strings.TrimSpace(line[i:j]), line[j+1:]
	if rawURL == "" || (proto != "HTTP/1.1" && proto != "HTTP/1.0") {
		return "", "", "", false
	}
	for k := 0; k < len(method); k++ {
		if c := method[k]; c < 'A' || c > 'Z' {
			return "", "", "", false
		}
	}
	return method, rawURL, proto, true
}

// parseSubURL parses a sub-request URL leniently: spaces are escaped first,
// and a relative URL whose first segment holds a colon (a key value such as
// 'a:b') is read as a path rather than a scheme.
func parseSubURL(raw string) (*url.URL, error) {
	s := strings.ReplaceAll(raw, " ", "%20")
	u, err := url.Parse(s)
	if err != nil && !strings.Contains(s, "://") && !strings.HasPrefix(s, "/") {
		u, err = url.Parse("./" + s)
	}
	return u, err
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// EffectiveMethod applies X-HTTP-Method tunnelling: a POST carrying
// X-HTTP-Method: MERGE (or PUT, DELETE, PATCH) means that method. It refuses
// the misuses the table error codes name: the header on a verb other than
// POST (XMethodNotUsingPost), more than one (XMethodIncorrectCount), an
// unknown value (XMethodIncorrectValue).
func EffectiveMethod(method string, h http.Header) (string, error) {
	vs := h.Values("X-Http-Method") // X-HTTP-Method, canonical: no allocation per request
	if len(vs) == 0 {
		return method, nil
	}
	bad := func(code, msg string) error {
		return &Error{Status: http.StatusBadRequest, Code: code, Message: msg, Index: -1}
	}
	if method != http.MethodPost {
		return "", bad(CodeXMethodNotUsingPost, "The request uses X-HTTP-Method with an HTTP verb other than POST.")
	}
	if len(vs) > 1 || strings.Contains(vs[0], ",") {
		return "", bad(CodeXMethodIncorrectCount, "More than one X-HTTP-Method is specified.")
	}
	switch v := strings.ToUpper(strings.TrimSpace(vs[0])); v {
	case "MERGE", http.MethodPut, http.MethodDelete, http.MethodPatch:
		return v, nil
	}
	return "", bad(CodeXMethodIncorrectValue, "The specified X-HTTP-Method is invalid.")
}
