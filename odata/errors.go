package odata

import (
	"errors"
	"fmt"
)

// Error codes of the Azure Table service that this package produces or that
// the layers above reuse. All of them are answered with HTTP 400.
const (
	CodeInvalidInput                 = "InvalidInput"
	CodeInvalidValueType             = "InvalidValueType"
	CodeOutOfRangeInput              = "OutOfRangeInput"
	CodePropertyNameInvalid          = "PropertyNameInvalid"
	CodePropertyNameTooLong          = "PropertyNameTooLong"
	CodePropertyValueTooLarge        = "PropertyValueTooLarge"
	CodeEntityTooLarge               = "EntityTooLarge"
	CodeTooManyProperties            = "TooManyProperties"
	CodeDuplicatePropertiesSpecified = "DuplicatePropertiesSpecified"
	CodePropertiesNeedValue          = "PropertiesNeedValue"
	CodeKeyValueTooLarge             = "KeyValueTooLarge"
)

// The service's user messages for the codes above (table-service-error-codes).
const (
	msgInvalidInput       = "One of the request inputs is not valid."
	msgQueryInvalid       = "The query condition specified in the request is invalid."
	msgInvalidValueType   = "The value specified is invalid."
	msgDuplicateProps     = "A property is specified more than one time."
	msgEntityTooLarge     = "The entity is larger than the maximum size permitted."
	msgNeedValue          = "The values are not specified for all properties in the entity."
	msgNameInvalid        = "The property name is invalid."
	msgNameTooLong        = "The property name exceeds the maximum allowed length."
	msgValueTooLarge      = "The property value is larger than the maximum size permitted."
	msgTooManyProperties  = "The entity contains more properties than allowed."
	msgKeyValueTooLarge   = "The key value is larger than the maximum size permitted."
	msgOutOfRangeTemplate = "The '%s' parameter of value '%s' is out of range."
)

// Error is a failure that reaches a client as an Azure Table service error:
// Code is the service's error code, Message the human-readable text.
// Pos is the byte offset in the $filter text that the error points at, or
// -1 when the error is not about a position in a query.
type Error struct {
	Code    string
	Message string
	Pos     int
}

func (e *Error) Error() string {
	if e.Pos >= 0 {
		return fmt.Sprintf("%s: %s (at offset %d)", e.Code, e.Message, e.Pos)
	}
	return e.Code + ": " + e.Message
}

// ErrorCode returns the service error code carried by err, or "" when err is
// not (and does not wrap) an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsCode reports whether err carries the service error code code.
func IsCode(err error, code string) bool {
	return err != nil && ErrorCode(err) == code
}

func newError(code, msg string) *Error {
	return &Error{Code: code, Message: msg, Pos: -1}
}

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Pos: -1}
}

// invalidInput reports a malformed request body or value; detail says what
// was wrong so that logs are useful, after the service's own sentence.
func invalidInput(detail string) *Error {
	return newError(CodeInvalidInput, msgInvalidInput+" "+detail)
}

// queryError reports a $filter that the service rejects, pointing at the
// offending byte offset and token.
func queryError(pos int, format string, args ...any) *Error {
	return &Error{
		Code:    CodeInvalidInput,
		Message: msgQueryInvalid + " " + fmt.Sprintf(format, args...),
		Pos:     pos,
	}
}
