package server

import (
	"net/url"
	"strings"
	"time"
)

// Observer is told about every request the server answers, once it is
// answered: the access log (AccessLog) is one, the metrics collector of
// package metrics another. RequestDone runs on the request's goroutine
// after the response is written and before the handler returns, so it
// should be quick; it may be called concurrently for different requests.
type Observer interface {
	RequestDone(info RequestInfo)
}

// RequestInfo describes one answered request. It carries no secret: of
// the request's headers only the two request ids, and the query string
// with SAS signatures masked (MaskSignature).
type RequestInfo struct {
	Method string
	// Path is the URL path as sent (percent-encoded); Query the query
	// string, its sig= values masked.
	Path, Query string
	// Account is the account addressed; Table the table named in the URL
	// ("" for service operations, a table's creation and $batch).
	Account, Table string
	// Operation is the operation the request asked for, by the names of
	// auth.Operation ("InsertEntity", "QueryEntities", "Batch"...), or
	// "Preflight" for a CORS preflight; "" when the request was refused
	// before its operation was known (a malformed URL, a shutting-down
	// server).
	Operation string
	// Status is the response's status; 0 when nothing was answered (an
	// injected connection reset, docs/faults.md).
	Status int
	// ErrorCode is the x-ms-error-code of a refusal, also sent with the
	// 202 of a failed entity group transaction; "" otherwise.
	ErrorCode string
	// Start is when the server began answering, Duration how long it took
	// to the last byte handed to the connection.
	Start    time.Time
	Duration time.Duration
	// BytesIn counts the request body's bytes the server read; BytesOut
	// the response body's bytes it wrote.
	BytesIn, BytesOut int64
	// RequestID is the x-ms-request-id the server answered with;
	// ClientRequestID the client's x-ms-client-request-id, if any.
	RequestID, ClientRequestID string
	RemoteAddr                 string
}

// Observers is an Observer that tells each of its elements in turn.
type Observers []Observer

// RequestDone tells every observer.
func (o Observers) RequestDone(info RequestInfo) {
	for _, x := range o {
		x.RequestDone(info)
	}
}

// masked replaces a signature in logs and metrics.
const masked = "REDACTED"

// MaskSignature returns the raw query string q with the value of every
// sig parameter (a SAS token's signature, the part that grants access)
// replaced by REDACTED, the parameter's name matched as the server's SAS
// parsing matches it: percent-decoded, and in any case. A query without
// one is returned as it is, without allocating.
func MaskSignature(q string) string {
	if !holdsSignature(q) {
		return q
	}
	var b strings.Builder
	for i, part := range strings.Split(q, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && isSignatureName(name) {
			b.WriteString(name)
			b.WriteString("=" + masked)
			continue
		}
		b.WriteString(part)
	}
	return b.String()
}

// holdsSignature reports whether a parameter of q is named sig; it
// allocates only to decode a name that is percent-encoded.
func holdsSignature(q string) bool {
	for q != "" {
		var part string
		part, q, _ = strings.Cut(q, "&")
		if name, _, hasValue := strings.Cut(part, "="); hasValue && isSignatureName(name) {
			return true
		}
	}
	return false
}

// isSignatureName reports whether a raw parameter name decodes to sig.
func isSignatureName(name string) bool {
	if strings.ContainsAny(name, "%+") {
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
	}
	return strings.EqualFold(name, "sig")
}
