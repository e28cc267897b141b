package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/batch"
	"github.com/tabuladb/tabula/server/storagexml"
)

// Error codes and messages of the service's common REST API that the
// router itself answers (common-rest-api-error-codes).
const (
	codeInvalidInput                = odata.CodeInvalidInput
	codeInvalidHeaderValue          = "InvalidHeaderValue"
	codeInvalidQueryParameterValue  = "InvalidQueryParameterValue"
	codeUnsupportedHTTPVerb         = "UnsupportedHttpVerb"
	codeMethodNotAllowed            = "MethodNotAllowed"
	codeRequestBodyTooLarge         = "RequestBodyTooLarge"
	codeInternalError               = "InternalError"
	codeOperationTimedOut           = "OperationTimedOut"
	codeResourceNotFound            = partition.CodeResourceNotFound
	codeServerBusy                  = "ServerBusy"
	msgInvalidHeaderValue           = "The value for one of the HTTP headers is not in the correct format."
	msgInvalidQueryParameterValue   = "Value for one of the query parameters specified in the request URI is invalid."
	msgInvalidInput                 = "One of the request inputs is not valid."
	msgUnsupportedHTTPVerb          = "The resource doesn't support specified Http Verb."
	msgRequestBodyTooLarge          = "The request body is too large and exceeds the maximum permissible limit."
	msgInternalError                = "Server encountered an internal error. Please try again after some time."
	msgOperationTimedOut            = "Operation could not be completed within the specified time."
	msgResourceNotFound             = "The specified resource does not exist."
	msgServerBusy                   = "The server is currently unable to receive requests. Please retry your request."
	msgInvalidEtag                  = "The etag value %s specified in one of the request headers is not valid. Please make sure only one etag value is specified and is valid."
	msgIfNoneMatchNotSupported      = "If-None-Match is not supported for this operation."
	msgPropertiesNeedValueForInsert = "The values are not specified for all properties in the entity."
)

// apiError is a refusal decided by the server layer itself.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

var (
	errInternal     = &apiError{status: http.StatusInternalServerError, code: codeInternalError, message: msgInternalError}
	errBodyTooLarge = &apiError{status: http.StatusRequestEntityTooLarge, code: codeRequestBodyTooLarge, message: msgRequestBodyTooLarge}
	errShuttingDown = &apiError{status: http.StatusServiceUnavailable, code: codeServerBusy, message: msgServerBusy}
	// A delete must name the version it deletes, or "*".
	errMissingIfMatch = &apiError{status: http.StatusBadRequest, code: "MissingRequiredHeader",
		message: "An HTTP header that's mandatory for this request is not specified. (If-Match)"}
)

func unsupportedVerb() error {
	return &apiError{status: http.StatusMethodNotAllowed, code: codeUnsupportedHTTPVerb, message: msgUnsupportedHTTPVerb}
}

func invalidInput(message string) error {
	return &apiError{status: http.StatusBadRequest, code: codeInvalidInput, message: message}
}

func invalidQueryParameter(detail string) error {
	return &apiError{status: http.StatusBadRequest, code: codeInvalidQueryParameterValue, message: msgInvalidQueryParameterValue + " " + detail}
}

// describe maps any error to the status, code and message the client gets.
// Errors that carry no service code are internal: the client learns only
// that, and ok is false so the caller logs the cause.
func describe(err error) (status int, code, message string, ok bool) {
	var (
		ae *apiError
		oe *odata.Error
		se *svcerr.Error // auth and storagexml refusals
		be *batch.Error
		me *http.MaxBytesError
	)
	switch {
	case errors.As(err, &me):
		return errBodyTooLarge.status, errBodyTooLarge.code, errBodyTooLarge.message, true
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.message, true
	case errors.As(err, &se):
		return se.Status, se.Code, se.Message, true
	case errors.As(err, &be):
		return be.Status, be.Code, be.Message, true
	case errors.As(err, &oe):
		return partition.HTTPStatus(oe.Code), oe.Code, oe.Message, true
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusInternalServerError, codeOperationTimedOut, msgOperationTimedOut, true
	}
	return http.StatusInternalServerError, codeInternalError, msgInternalError, false
}

// fail answers the request with err: the service's status, the
// x-ms-error-code header and an error body, JSON for OData operations and
// XML for the others. Once a response has started nothing more is sent.
func (rq *request) fail(err error) {
	if rq.status != 0 {
		return
	}
	if errors.Is(err, errInjectedReset) {
		rq.resetConnection()
		return
	}
	status, code, message, ok := describe(err)
	if !ok && rq.ctx.Err() == nil { // a cancelled request is logged by ServeHTTP
		rq.s.log.Error("internal error", "request_id", rq.id, "method", rq.r.Method, "path", rq.r.URL.Path, "err", err)
	}
	svcerr.NoteRetry(rq.ctx, err)
	var se *svcerr.Error
	if errors.As(err, &se) {
		if se.Detail != "" {
			rq.s.log.Debug("request refused", "request_id", rq.id, "code", se.Code, "detail", se.Detail)
		}
		if se.Challenge != "" {
			rq.setHeader("Www-Authenticate", se.Challenge)
		}
	}
	rq.setErrorCode(code)
	if rq.xmlErrors {
		rq.reply(status, "application/xml", storagexml.ErrorDocument(code, message, rq.id, rq.now))
		return
	}
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(status, batch.ErrorContentType, batch.ErrorBody(-1, code, message, rq.id, rq.now))
}
