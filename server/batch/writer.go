package batch

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// SubResponse is one operation's response inside the batch response. Empty
// fields are left out. Status is the operation's HTTP status (201, 204, 200,
// or the failure's 4xx).
type SubResponse struct {
	Status             int
	ContentID          string
	PreferenceApplied  string // "return-no-content" / "return-content"
	DataServiceVersion string // written as is: the service sends "3.0;" for inserts, "1.0;" for updates and deletes
	ContentType        string // for a body
	Location           string // inserts: the new entity's URL, without query string
	DataServiceID      string // inserts: same as Location
	ETag               string
	Body               []byte // one line of JSON: the JS SDK reads it with a single-line match
}

// ResponseWriter writes a $batch response. Its boundaries are fixed at
// creation so the Content-Type header (written first) and the body agree.
type ResponseWriter struct {
	BatchBoundary     string // batchresponse_<guid>
	ChangesetBoundary string // changesetresponse_<guid>
}

// NewResponseWriter returns a writer with fresh random boundaries.
func NewResponseWriter() *ResponseWriter {
	return &ResponseWriter{BatchBoundary: "batchresponse_" + newGUID(), ChangesetBoundary: "changesetresponse_" + newGUID()}
}

func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ContentType is the value of the 202 response's Content-Type header.
func (w *ResponseWriter) ContentType() string {
	return "multipart/mixed; boundary=" + w.BatchBoundary
}

// WriteChangeset writes the response to a change set: every operation's
// response in order, or — when an operation failed — that one failure alone
// (FailureResponse builds it). The framing is the service's, byte for byte:
//
//	--batchresponse_B CRLF
//	Content-Type: multipart/mixed; boundary=changesetresponse_C CRLF
//	CRLF
//	--changesetresponse_C CRLF            one block per operation
//	Content-Type: application/http CRLF
//	Content-Transfer-Encoding: binary CRLF
//	CRLF
//	HTTP/1.1 204 No Content CRLF
//	<headers> CRLF
//	CRLF                                  end of the sub-response's headers
//	<body> CRLF                           the CRLF belongs to the next delimiter
//	--changesetresponse_C-- CRLF
//	--batchresponse_B-- CRLF
//
// With an empty body, three CRLFs follow the last header; the Go SDK's
// http.ReadResponse needs all of them (Azurite #1378, #2519).
func (w *ResponseWriter) WriteChangeset(dst io.Writer, parts []SubResponse) error {
	bw := bufio.NewWriter(dst)
	bw.WriteString("--" + w.BatchBoundary + "\r\n")
	bw.WriteString("Content-Type: multipart/mixed; boundary=" + w.ChangesetBoundary + "\r\n\r\n")
	for i := range parts {
		bw.WriteString("--" + w.ChangesetBoundary + "\r\n")
		writePart(bw, &parts[i])
		bw.WriteString("\r\n")
	}
	bw.WriteString("--" + w.ChangesetBoundary + "--\r\n")
	bw.WriteString("--" + w.BatchBoundary + "--\r\n")
	return bw.Flush()
}

// WriteQuery writes the response to a lone query: its one sub-response
// directly in the batch, with no change set.
func (w *ResponseWriter) WriteQuery(dst io.Writer, part SubResponse) error {
	bw := bufio.NewWriter(dst)
	bw.WriteString("--" + w.BatchBoundary + "\r\n")
	writePart(bw, &part)
	bw.WriteString("\r\n")
	bw.WriteString("--" + w.BatchBoundary + "--\r\n")
	return bw.Flush()
}

// writePart writes a part's MIME headers and the embedded HTTP response,
// ending after the body (the caller writes the CRLF of the next delimiter).
func writePart(bw *bufio.Writer, p *SubResponse) {
	bw.WriteString("Content-Type: application/http\r\n")
	bw.WriteString("Content-Transfer-Encoding: binary\r\n\r\n")
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(p.Status) + " " + http.StatusText(p.Status) + "\r\n")
	header := func(name, value string) {
		if value != "" {
			bw.WriteString(name + ": " + value + "\r\n")
		}
	}
	header("Content-ID", p.ContentID)
	bw.WriteString("X-Content-Type-Options: nosniff\r\n")
	if p.Status < 400 {
		// The service's failure samples carry no Cache-Control.
		bw.WriteString("Cache-Control: no-cache\r\n")
	}
	header("Preference-Applied", p.PreferenceApplied)
	header("DataServiceVersion", p.DataServiceVersion)
	header("Content-Type", p.ContentType)
	header("Location", p.Location)
	header("DataServiceId", p.DataServiceID)
	header("ETag", p.ETag)
	bw.WriteString("\r\n")
	bw.Write(p.Body)
}

// ErrorContentType is the Content-Type of a failed operation's JSON error.
const ErrorContentType = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"

// FailureResponse builds the sub-response that reports the failure of the
// operation at index (0-based) in a change set: the service's JSON error
// whose message starts with "<index>:", and the operation's Content-ID
// echoed — the one the client sent, else index+1 as the service numbers
// them. requestID and now fill the message's trailer lines.
func FailureResponse(index int, contentID string, status int, code, message, requestID string, now time.Time) SubResponse {
	if contentID == "" {
		contentID = strconv.Itoa(index + 1)
	}
	return SubResponse{
		Status:             status,
		ContentID:          contentID,
		DataServiceVersion: "3.0;",
		ContentType:        ErrorContentType,
		Body:               ErrorBody(index, code, message, requestID, now),
	}
}

// ErrorBody is the service's JSON error document on one line:
//
//	{"odata.error":{"code":"<code>","message":{"lang":"en-US","value":"<index>:<message>\nRequestId:<id>\nTime:<time>"}}}
//
// The "<index>:" prefix is left out when index is negative.
func ErrorBody(index int, code, message, requestID string, now time.Time) []byte {
	value := message
	if index >= 0 {
		value = strconv.Itoa(index) + ":" + message
	}
	value += "\nRequestId:" + requestID + "\nTime:" + now.UTC().Format("2006-01-02T15:04:05.0000000Z")
	type msg struct {
		Lang  string `json:"lang"`
		Value string `json:"value"`
	}
	type odataError struct {
		Code    string `json:"code"`
		Message msg    `json:"message"`
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the service writes < > & as they are
	if err := enc.Encode(map[string]odataError{"odata.error": {Code: code, Message: msg{Lang: "en-US", Value: value}}}); err != nil {
		panic("batch: encoding an error document: " + err.Error()) // strings always encode
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
