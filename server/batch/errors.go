package batch

import (
	"errors"
	"net/http"
)

// Error is a refusal of a batch request or of a URL, carrying the service's
// HTTP status and error code.
//
// Index is the (0-based) operation the error belongs to, or -1 when the
// request as a whole is malformed. The service reports an operation's error
// inside a 202 Accepted batch response, as the failed operation of the
// change set with "<Index>:" before its message; a whole-request error is an
// ordinary error response.
type Error struct {
	Status  int
	Code    string
	Message string
	Index   int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Error codes this package returns.
const (
	CodeInvalidInput          = "InvalidInput"
	CodeRequestBodyTooLarge   = "RequestBodyTooLarge"
	CodeInvalidURI            = "InvalidUri"
	CodeXMethodIncorrectCount = "XMethodIncorrectCount"
	CodeXMethodIncorrectValue = "XMethodIncorrectValue"
	CodeXMethodNotUsingPost   = "XMethodNotUsingPost"
)

// MsgTooManyOperations is the service's message for a change set of more
// than 100 operations (reported as operation 0's error).
const MsgTooManyOperations = "The batch request operation exceeds the maximum 100 changes per change set."

func invalid(index int, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Message: msg, Index: index}
}

func malformed(msg string) *Error {
	return invalid(-1, "The batch request body is malformed: "+msg)
}

// ErrorCode returns the error code carried by err, or "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
