// Package svcerr holds the error type of a refusal that reaches a client
// as a storage service error: the HTTP status, the service's error code
// and its message. The server's helper packages (auth, storagexml) return
// it, so the server maps all of them in one place.
package svcerr

// Error is a refusal carrying what the service answers. Detail explains
// it further (the service's AuthenticationErrorDetail or Reason); it never
// holds secrets.
type Error struct {
	Status  int
	Code    string
	Message string
	Detail  string
	// Challenge, when set, is the WWW-Authenticate header the refusal
	// carries (a bearer token refused).
	Challenge string
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Code + ": " + e.Message + " (" + e.Detail + ")"
	}
	return e.Code + ": " + e.Message
}
