// Package svcerr holds the error type of a refusal that reaches a client
// as a storage service error: the HTTP status, the service's error code
// and its message. The server's helper packages (auth, storagexml) return
// it, so the server maps all of them in one place.
package svcerr

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
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
// whether the request was refused with an Error whose Retry is set, and,
// if the front end asks (HoldReport), holds the server's report of the
// answer for the front end to make or drop.
type RetryNote struct {
	set    atomic.Bool
	hold   bool
	report func(start time.Time)
}

// HoldReport asks the server to leave its report of the answer to the
// front end (Report), which makes it for the answer the client gets, and
// drops it for an attempt it repeats. Called before the request is
// served.
func (n *RetryNote) HoldReport() { n.hold = true }

// DeferReport is the server's side of HoldReport: as it reports a request
// done, when ctx's RetryNote holds reports, it keeps report (the report as
// of start, the moment the client's request came) and returns true;
// otherwise it returns false and the server reports as usual.
func DeferReport(ctx context.Context, report func(start time.Time)) bool {
	n, ok := ctx.Value(retryNoteKey{}).(*RetryNote)
	if !ok || !n.hold {
		return false
	}
	n.report = report
	return true
}

// Report makes the report the server left, if any, for a request that
// came at start.
func (n *RetryNote) Report(start time.Time) {
	if n.report != nil {
		n.report(start)
		n.report = nil
	}
}

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
