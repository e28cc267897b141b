// Package svcerr holds the error type of a refusal that reaches a client
// as a storage service error: the HTTP status, the service's error code
// and its message. The server's helper packages (auth, storagexml) return
// it, so the server maps all of them in one place.
package svcerr

import (
	"context"
	"errors"
	"sync/atomic"
)

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
	// Retry marks a refusal that changed nothing and would likely pass
	// moments later, elsewhere: a cluster node that is not, or no longer,
	// the one to answer (a lease moving, a range splitting). A front end
	// that asked (WithRetryNote) may repeat the request before it answers.
	Retry bool
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Code + ": " + e.Message + " (" + e.Detail + ")"
	}
	return e.Code + ": " + e.Message
}

// A RetryNote tells the front end that set it on a request's context
// whether the request was refused with an Error whose Retry is set.
type RetryNote struct{ set atomic.Bool }

type retryNoteKey struct{}

// WithRetryNote returns ctx carrying a new RetryNote, and the note.
func WithRetryNote(ctx context.Context) (context.Context, *RetryNote) {
	n := new(RetryNote)
	return context.WithValue(ctx, retryNoteKey{}, n), n
}

// NoteRetry records on ctx's RetryNote, if it has one, that the request
// was refused with err, when err is an Error whose Retry is set. The
// server calls it as it answers a refusal.
func NoteRetry(ctx context.Context, err error) {
	var se *Error
	if n, ok := ctx.Value(retryNoteKey{}).(*RetryNote); ok && errors.As(err, &se) && se.Retry {
		n.set.Store(true)
	}
}

// MarkRetry records on ctx's RetryNote, if it has one, that the request
// may be repeated: for a refusal that is not an Error.
func MarkRetry(ctx context.Context) {
	if n, ok := ctx.Value(retryNoteKey{}).(*RetryNote); ok {
		n.set.Store(true)
	}
}

// Set says whether a refusal that may be repeated was noted.
func (n *RetryNote) Set() bool { return n.set.Load() }
