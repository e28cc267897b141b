package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/batch"
	"github.com/tabuladb/tabula/server/storagexml"
)

// request is one request in flight: what the router learned about it and
// how it has been answered so far.
type request struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	ctx   context.Context
	id    string
	start time.Time
	now   time.Time
	// accounts is the server's set as the request arrived: one request
	// authenticates and routes against one set, whatever SetAccounts does
	// meanwhile.
	accounts *auth.Accounts

	account   string       // as addressed, without "-secondary"
	hostStyle bool         // the Host named the account (production-style URL)
	target    batch.Target // what the path addresses
	query     url.Values
	principal *auth.Principal
	writeKind partition.OpKind // the write a PUT, MERGE or PATCH on an entity performs
	xmlErrors bool             // the operation speaks XML (ACLs, service properties)
	status    int              // 0 until the response header is written

	// What an Observer learns (RequestInfo).
	path     string      // the URL path as sent, percent-encoded
	op       string      // the operation's name, once the router knows it
	errCode  string      // the x-ms-error-code sent, if any
	body     countedBody // the request body; handlers read it through this
	bytesOut int64       // response body bytes written

	// headerValues backs the one-value slices of the response headers
	// the server sets, so setting one costs no allocation (see setHeader).
	headerValues [12]string
	headersSet   int
}

// newRequest starts answering r with the headers every response carries.
// net/http adds Date itself, straight into the response rather than
// through the header map.
func (s *Server) newRequest(w http.ResponseWriter, r *http.Request) *request {
	rq := &request{s: s, w: w, r: r, ctx: r.Context(), id: newRequestID(), start: time.Now(), now: s.opts.Now(),
		accounts: s.accounts.Load()}
	rq.body.r = r.Body
	rq.setHeader("X-Ms-Request-Id", rq.id)
	rq.setHeader("X-Ms-Version", s.responseVersion(r.Header.Get("X-Ms-Version")))
	rq.setHeader("Server", "Tabula")
	if id := rq.clientRequestID(); id != "" {
		rq.setHeader("X-Ms-Client-Request-Id", id)
	}
	return rq
}

// clientRequestID is the client's x-ms-client-request-id, echoed in the
// response and logged; "" when it sent none, or one too long to repeat.
func (rq *request) clientRequestID() string {
	if id := rq.r.Header.Get("X-Ms-Client-Request-Id"); len(id) <= 1024 {
		return id
	}
	return ""
}

// setHeader sets a response header; key must be in canonical form.
// http.Header.Set allocates a slice for each value; these slices share
// the request's array instead (capped at one element, so an Add to the
// key reallocates rather than writing into a neighbour).
func (rq *request) setHeader(key, value string) {
	h := rq.w.Header()
	if rq.headersSet == len(rq.headerValues) {
		h[key] = []string{value}
		return
	}
	i := rq.headersSet
	rq.headerValues[i] = value
	rq.headersSet++
	h[key] = rq.headerValues[i : i+1 : i+1]
}

// writeHeader sends the status line and the headers set so far, adding the
// CORS headers of an actual (non-preflight) cross-origin request.
func (rq *request) writeHeader(status int) {
	if rq.status != 0 {
		return
	}
	rq.status = status
	if rules := rq.s.corsRules(rq.ctx, rq.account); len(rules) > 0 {
		for k, v := range storagexml.ActualHeaders(rules, rq.r.Header.Get("Origin"), rq.r.Method, rq.w.Header()) {
			rq.w.Header()[k] = v
		}
	}
	rq.w.WriteHeader(status)
}

// reply sends a complete response: status, the headers set so far, and body
// (with its content type) unless body is nil.
func (rq *request) reply(status int, contentType string, body []byte) {
	if body != nil {
		rq.setHeader("Content-Type", contentType)
		// A known length spares the client chunked decoding.
		rq.setHeader("Content-Length", strconv.Itoa(len(body)))
	}
	rq.writeHeader(status)
	if body != nil && rq.r.Method != http.MethodHead {
		n, _ := rq.w.Write(body) // a failed write is the client's disconnect
		rq.bytesOut += int64(n)
	}
}

// setErrorCode sends code as the response's x-ms-error-code.
func (rq *request) setErrorCode(code string) {
	rq.errCode = code
	rq.setHeader("X-Ms-Error-Code", code)
}

// countedBody reads a request's body, counting the bytes read for
// RequestInfo.BytesIn. It is a field of the request, so it costs no
// allocation of its own.
type countedBody struct {
	r io.ReadCloser // nil for a request built without a body
	n int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countedBody) Close() error {
	if b.r == nil {
		return nil
	}
	return b.r.Close()
}

// replyCreated answers a successful insert or table creation: Location
// and DataServiceId name the new resource, and the body render makes is
// sent with 201 unless the client prefers no content (204).
func (rq *request) replyCreated(location string, m odata.Metadata, render func() ([]byte, error)) error {
	rq.setHeader("Location", location)
	rq.setHeader(hdrDataServiceID, location)
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	pref := rq.preference()
	if pref != "" {
		rq.setHeader("Preference-Applied", pref)
	}
	if pref == "return-no-content" {
		rq.reply(http.StatusNoContent, "", nil)
		return nil
	}
	body, err := render()
	if err != nil {
		return err
	}
	rq.reply(http.StatusCreated, jsonContentType(m), body)
	return nil
}

// top reads $top: the page size, and whether the query asks for no
// entities at all ($top=0, which the service answers with an empty page).
func (rq *request) top() (n int, none bool, err error) {
	v, ok := rq.query["$top"]
	if !ok {
		return 0, false, nil
	}
	if n, err = odata.ParseTop(v[0]); err != nil {
		return 0, false, err
	}
	return n, n == 0, nil
}

// readBody reads the request body, refusing one over the server's limit
// with 413 RequestBodyTooLarge.
func (rq *request) readBody() ([]byte, error) {
	limit := rq.s.opts.MaxBodyBytes
	if rq.r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	var body []byte
	var err error
	if n := rq.r.ContentLength; n >= 0 {
		// The usual case: the length is declared, so the body is read
		// into one buffer of its size rather than a growing one.
		body = make([]byte, n)
		_, err = io.ReadFull(&rq.body, body)
		if err == io.ErrUnexpectedEOF {
			err = errors.New("the body is shorter than its Content-Length")
		}
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(rq.w, &rq.body, limit))
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, errBodyTooLarge
	case err != nil:
		return nil, &apiError{status: http.StatusBadRequest, code: codeInvalidInput, message: "The request body could not be read: " + err.Error()}
	}
	return body, nil
}

// metadata is the JSON metadata level the client asked for.
func (rq *request) metadata() (odata.Metadata, error) { return metadataOf(rq.r.Header, rq.query) }

// metadataOf reads the JSON metadata level a request (or a batch
// operation) asks for: $format wins over Accept; the SDK default, minimal
// metadata, when neither says.
func metadataOf(h http.Header, query url.Values) (odata.Metadata, error) {
	if f, ok := query["$format"]; ok {
		m, ok := parseJSONMediaType(f[0])
		if !ok {
			return 0, &apiError{status: http.StatusBadRequest, code: codeInvalidQueryParameterValue,
				message: msgInvalidQueryParameterValue + " $format must be application/json;odata=nometadata, minimalmetadata or fullmetadata."}
		}
		return m, nil
	}
	accept := h.Get("Accept")
	if accept == "" {
		return odata.MinimalMetadata, nil
	}
	atom := false
	for part := range strings.SplitSeq(accept, ",") {
		if m, ok := parseJSONMediaType(part); ok {
			return m, nil
		}
		mt := strings.ToLower(strings.TrimSpace(strings.SplitN(part, ";", 2)[0]))
		switch mt {
		case "*/*", "application/*":
			return odata.MinimalMetadata, nil
		case "application/atom+xml", "application/xml":
			atom = true
		}
	}
	if atom {
		return 0, &apiError{status: http.StatusUnsupportedMediaType, code: "AtomFormatNotSupported", message: "Atom format is not supported."}
	}
	return odata.MinimalMetadata, nil
}

// parseJSONMediaType reads "application/json[;odata=level][;...]".
func parseJSONMediaType(s string) (odata.Metadata, bool) {
	mediaType, params, _ := strings.Cut(s, ";")
	if !strings.EqualFold(strings.TrimSpace(mediaType), "application/json") {
		return 0, false
	}
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "odata") {
			return odata.ParseMetadata(strings.TrimSpace(v))
		}
	}
	return odata.MinimalMetadata, true
}

// jsonContentTypes are the Content-Types of JSON responses, by level.
var jsonContentTypes = [...]string{
	odata.NoMetadata:      "application/json;odata=nometadata;streaming=true;charset=utf-8",
	odata.MinimalMetadata: "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
	odata.FullMetadata:    "application/json;odata=fullmetadata;streaming=true;charset=utf-8",
}

// jsonContentType is the Content-Type of a JSON response at level m.
func jsonContentType(m odata.Metadata) string { return jsonContentTypes[m] }

// pathAccount is the account segment the request's URLs start with:
// the account for path-style URLs, "" for production-style ones.
func (rq *request) pathAccount() string {
	if rq.hostStyle {
		return ""
	}
	return rq.account
}

// baseURL is the service root as the client addressed it, for odata.metadata,
// odata.id and Location: scheme, host and the account segment.
func (rq *request) baseURL() string {
	scheme := "http"
	if rq.r.TLS != nil {
		scheme = "https"
	}
	if rq.hostStyle {
		return scheme + "://" + rq.r.Host + "/"
	}
	account := rq.account
	if rq.target.Secondary {
		account += "-secondary"
	}
	return scheme + "://" + rq.r.Host + "/" + account + "/"
}

// encoder returns a JSON encoder for this request's table and metadata level.
func (rq *request) encoder(m odata.Metadata, sel *odata.Selection) *odata.Encoder {
	return odata.NewEncoder(odata.EncodeOptions{
		Metadata: m,
		BaseURL:  rq.baseURL(),
		Account:  rq.account,
		Table:    rq.target.Table,
		Select:   sel,
	})
}

// preference reads the Prefer header.
func (rq *request) preference() string { return preferenceOf(rq.r.Header) }

// preferenceOf reads a Prefer header: "return-content",
// "return-no-content" or "" when the client states none.
func preferenceOf(h http.Header) string {
	for v := range strings.SplitSeq(h.Get("Prefer"), ",") {
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case "return-content", "return-no-content":
			return v
		}
	}
	return ""
}

// knownVersions are the x-ms-version values the service has published
// (versioning-for-the-azure-storage-services), through 2026-06-06. JSON
// needs 2013-08-15 or later.
var knownVersions = []string{
	"2009-04-14", "2009-07-17", "2009-09-19", "2011-08-18", "2012-02-12",
	"2013-08-15", "2014-02-14", "2015-02-21", "2015-04-05", "2015-07-08",
	"2015-12-11", "2016-05-31", "2017-04-17", "2017-07-29", "2017-11-09",
	"2018-03-28", "2018-11-09", "2019-02-02", "2019-07-07", "2019-10-10",
	"2019-12-12", "2020-02-10", "2020-04-08", "2020-06-12", "2020-08-04",
	"2020-10-02", "2020-12-06", "2021-02-12", "2021-04-10", "2021-06-08",
	"2021-08-06", "2021-10-04", "2021-12-02", "2022-11-02", "2023-01-03",
	"2023-08-03", "2023-11-03", "2024-02-04", "2024-05-04", "2024-08-04",
	"2024-11-04", "2025-01-05", "2025-05-05", "2025-07-05", "2025-11-05",
	"2026-02-06", "2026-04-06", "2026-06-06",
}

// isKnownVersion reports whether v is one of knownVersions.
var isKnownVersion = func() map[string]bool {
	m := make(map[string]bool, len(knownVersions))
	for _, v := range knownVersions {
		m[v] = true
	}
	return m
}()

// defaultVersion is the version the server answers with when the client
// names none: the one the current SDKs send.
const defaultVersion = "2019-02-02"

// responseVersion is the x-ms-version of a response: the client's when it
// is one the server accepted, else the default.
func (s *Server) responseVersion(requested string) string {
	if isKnownVersion[requested] || (s.opts.SkipAPIVersionCheck && wellFormedVersion(requested)) {
		return requested
	}
	return defaultVersion
}

// wellFormedVersion reports whether v is a version's form, a date
// YYYY-MM-DD.
func wellFormedVersion(v string) bool {
	_, err := time.Parse(time.DateOnly, v)
	return err == nil && len(v) == len(time.DateOnly)
}

// checkVersion refuses an x-ms-version the service does not know (any
// well-formed one with SkipAPIVersionCheck), and JSON requests under
// versions that predate JSON.
func (rq *request) checkVersion() error {
	v := rq.r.Header.Get("X-Ms-Version")
	if v == "" {
		return nil
	}
	known := isKnownVersion[v] || (rq.s.opts.SkipAPIVersionCheck && wellFormedVersion(v))
	if !known {
		return &apiError{status: http.StatusBadRequest, code: codeInvalidHeaderValue,
			message: msgInvalidHeaderValue + " The x-ms-version " + quoteForMessage(v) + " is not supported."}
	}
	if v < "2013-08-15" && !rq.xmlErrors {
		return &apiError{status: http.StatusUnsupportedMediaType, code: "JsonFormatNotSupported", message: "JSON format is not supported."}
	}
	return nil
}

// quoteForMessage quotes client input for an error message, bounded so a
// huge header cannot make a huge response.
func quoteForMessage(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return "'" + s + "'"
}
