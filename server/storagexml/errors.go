package storagexml

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
)

// Error is a refusal carrying the service's HTTP status and error code.
// Detail says what is wrong in the document (the service's "Reason").
type Error = svcerr.Error

// Error codes this package returns.
const (
	CodeInvalidXMLDocument   = "InvalidXmlDocument"
	CodeRequestBodyTooLarge  = "RequestBodyTooLarge"
	CodeCorsPreflightFailure = "CorsPreflightFailure"
	CodeInvalidHeaderValue   = "InvalidHeaderValue"
)

// MsgInvalidXMLDocument is the service's message for every document it
// refuses, bad syntax and out-of-range values alike (a recorded response to
// a retention of 366 days reads exactly this).
const MsgInvalidXMLDocument = "XML specified is not syntactically valid."

func invalidXML(detail string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidXMLDocument, Message: MsgInvalidXMLDocument, Detail: detail}
}

// ErrorCode returns the error code carried by err, or "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// MaxDocumentBytes bounds the documents this package parses. The largest
// legal one, five CORS rules of at most 2 KiB of values, is far smaller.
const MaxDocumentBytes = 64 << 10

// xmlDeclaration starts every document the service writes.
const xmlDeclaration = `<?xml version="1.0" encoding="utf-8"?>`

// ErrorDocument is the XML error body the Table service sends for its XML
// operations (ACL, service properties, stats):
//
//	<?xml version="1.0" encoding="utf-8"?><m:error xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><m:code>CODE</m:code><m:message xml:lang="en-US">MESSAGE
//	RequestId:ID
//	Time:TIME</m:message></m:error>
func ErrorDocument(code, message, requestID string, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString(xmlDeclaration)
	b.WriteString(`<m:error xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><m:code>`)
	escape(&b, code)
	b.WriteString(`</m:code><m:message xml:lang="en-US">`)
	escape(&b, message+"\nRequestId:"+requestID+"\nTime:"+now.UTC().Format("2006-01-02T15:04:05.0000000Z"))
	b.WriteString(`</m:message></m:error>`)
	return b.Bytes()
}

// escape writes s as XML character data. Newlines are kept as they are
// (xml.EscapeText would turn them into &#xA;).
func escape(b *bytes.Buffer, s string) {
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			xml.EscapeText(b, []byte(s[start:i]))
			b.WriteByte('\n')
			start = i + 1
		}
	}
	xml.EscapeText(b, []byte(s[start:]))
}

// decodeRoot decodes a whole document into v (whose XMLName fixes the root
// element) and refuses anything but whitespace, comments and processing
// instructions after the root element.
func decodeRoot(data []byte, v any) error {
	if len(data) > MaxDocumentBytes {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeRequestBodyTooLarge,
			Message: "The request body is too large and exceeds the maximum permissible limit."}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // the service itself writes a BOM
	d := xml.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(v); err != nil {
		return invalidXML(err.Error())
	}
	for {
		tok, err := d.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return invalidXML(err.Error())
		}
		switch tok := tok.(type) {
		case xml.Comment, xml.ProcInst:
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) != 0 {
				return invalidXML("text after the root element")
			}
		default:
			return invalidXML("content after the root element")
		}
	}
}
