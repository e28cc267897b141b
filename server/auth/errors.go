package auth

import (
	"errors"
	"net/http"

	"github.com/tabuladb/tabula/internal/svcerr"
)

// Error is a refusal, carrying what the service answers: the HTTP status,
// the storage error code and its message. Detail explains the refusal (the
// service's AuthenticationErrorDetail); it never holds key material.
type Error = svcerr.Error

// The error codes this package returns.
const (
	CodeAuthenticationFailed              = "AuthenticationFailed"
	CodeAuthorizationFailure              = "AuthorizationFailure"
	CodeAuthorizationPermissionMismatch   = "AuthorizationPermissionMismatch"
	CodeAuthorizationResourceTypeMismatch = "AuthorizationResourceTypeMismatch"
	CodeAuthorizationServiceMismatch      = "AuthorizationServiceMismatch"
	CodeAuthorizationProtocolMismatch     = "AuthorizationProtocolMismatch"
	CodeAuthorizationSourceIPMismatch     = "AuthorizationSourceIPMismatch"
	CodeInvalidOperation                  = "InvalidOperation"
	CodeInvalidAuthenticationInfo         = "InvalidAuthenticationInfo"
)

// The service's messages for those codes (sas-error-codes and
// authorize-with-shared-key pages; the account message is Azurite's).
const (
	msgAuthenticationFailed = "Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature."
	msgAuthorizationFailure = "This request is not authorized to perform this operation."
	msgPermissionMismatch   = "This request is not authorized to perform this operation using this permission."
	msgResourceTypeMismatch = "This request is not authorized to perform this operation using this resource type."
	msgServiceMismatch      = "This request is not authorized to perform this operation using this service."
	msgProtocolMismatch     = "This request is not authorized to perform this operation using this protocol."
	msgSourceIPMismatch     = "This request is not authorized to perform this operation using this source IP "
	msgInvalidAccount       = "Invalid storage account."
)

func authFailed(detail string) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeAuthenticationFailed, Message: msgAuthenticationFailed, Detail: detail}
}

func forbidden(code, msg, detail string) *Error {
	return &Error{Status: http.StatusForbidden, Code: code, Message: msg, Detail: detail}
}

// ErrorCode returns the storage error code carried by err, or "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
