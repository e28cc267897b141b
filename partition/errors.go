package partition

import (
	"fmt"
	"net/http"

	"github.com/tabuladb/tabula/odata"
)

// Error codes of the Azure Table service that this package returns, in
// addition to odata's (InvalidInput, OutOfRangeInput, EntityTooLarge...,
// which entity validation and $filter parsing produce). Every client-visible
// failure is an *odata.Error carrying one of them; see HTTPStatus.
const (
	CodeTableNotFound                           = "TableNotFound"
	CodeTableAlreadyExists                      = "TableAlreadyExists"
	CodeEntityAlreadyExists                     = "EntityAlreadyExists"
	CodeResourceNotFound                        = "ResourceNotFound"
	CodeUpdateConditionNotSatisfied             = "UpdateConditionNotSatisfied"
	CodeInvalidDuplicateRow                     = "InvalidDuplicateRow"
	CodeCommandsInBatchActOnDifferentPartitions = "CommandsInBatchActOnDifferentPartitions"
	CodeInvalidResourceName                     = "InvalidResourceName"
	CodeRequestBodyTooLarge                     = "RequestBodyTooLarge"
	CodeInvalidXMLDocument                      = "InvalidXmlDocument"

	// Re-exported from odata for callers that only import this package.
	CodeInvalidInput    = odata.CodeInvalidInput
	CodeOutOfRangeInput = odata.CodeOutOfRangeInput
)

// The service's messages for the codes above (table-service-error-codes,
// common-rest-api-error-codes).
const (
	msgTableNotFound       = "The table specified does not exist."
	msgTableAlreadyExists  = "The table specified already exists."
	msgEntityAlreadyExists = "The specified entity already exists."
	msgResourceNotFound    = "The specified resource does not exist."
	msgConditionFailed     = "The update condition specified in the request was not satisfied."
	msgDuplicateRow        = "The batch request contains multiple changes with same row key. An entity can appear only once in a batch request."
	msgDifferentPartitions = "All commands in a batch must operate on same entity group."
	msgInvalidName         = "The specifed resource name contains invalid characters."
	msgNameLength          = "The specified resource name length is not within the permissible limits."
	msgTooManyChanges      = "The batch request operation exceeds the maximum 100 changes per change set."
	msgBodyTooLarge        = "The request body is too large and exceeds the maximum permissible limit."
	msgInvalidInput        = "One of the request inputs is not valid."
	msgInvalidXML          = "XML specified is not syntactically valid."
)

func serviceError(code, msg string) *odata.Error {
	return &odata.Error{Code: code, Message: msg, Pos: -1}
}

func serviceErrorf(code, msg, format string, args ...any) *odata.Error {
	return &odata.Error{Code: code, Message: msg + " " + fmt.Sprintf(format, args...), Pos: -1}
}

// ErrorCode returns the service error code carried by err (also through a
// *BatchError or fmt.Errorf wrapping), or "" for errors that are not the
// client's fault: storage failures, corruption, a closed store.
func ErrorCode(err error) string { return odata.ErrorCode(err) }

// IsCode reports whether err carries the service error code code.
func IsCode(err error, code string) bool { return odata.IsCode(err, code) }

// HTTPStatus maps a service error code to the HTTP status the service
// answers it with; unknown codes, and "" (an internal failure), give 500.
func HTTPStatus(code string) int {
	switch code {
	case CodeTableNotFound, CodeResourceNotFound:
		return http.StatusNotFound
	case CodeTableAlreadyExists, CodeEntityAlreadyExists:
		return http.StatusConflict
	case CodeUpdateConditionNotSatisfied:
		return http.StatusPreconditionFailed
	case CodeRequestBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeInvalidDuplicateRow, CodeCommandsInBatchActOnDifferentPartitions, CodeInvalidResourceName,
		CodeInvalidXMLDocument, odata.CodeInvalidInput, odata.CodeInvalidValueType, odata.CodeOutOfRangeInput,
		odata.CodePropertyNameInvalid, odata.CodePropertyNameTooLong, odata.CodePropertyValueTooLarge,
		odata.CodeEntityTooLarge, odata.CodeTooManyProperties, odata.CodeDuplicatePropertiesSpecified,
		odata.CodePropertiesNeedValue, odata.CodeKeyValueTooLarge:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// BatchError is the failure of an entity group transaction: the operation
// at Index failed with Err (which carries the service code), and nothing of
// the batch was applied. Errors about the batch as a whole (too many
// operations, too large) name the first operation past the limit.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("batch operation %d: %v", e.Index, e.Err) }

// Unwrap lets ErrorCode and errors.As see the operation's error.
func (e *BatchError) Unwrap() error { return e.Err }
