package cluster

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/tabuladb/tabula/internal/svcerr"
)

// The service's answers for a cluster that cannot serve a request
// (common REST API error codes).
const (
	msgServerBusy        = "The server is currently unable to receive requests. Please retry your request."
	msgOperationTimedOut = "Operation could not be completed within the specified time."
)

// errNotLeader refuses a request at a node that is not the ready leader:
// 503 ServerBusy, which every SDK retries.
func errNotLeader(leader uint64) error {
	detail := "this node is not the group's leader, and no leader is known"
	if leader != 0 {
		detail = fmt.Sprintf("this node is not the group's leader; node %d is", leader)
	}
	return errMoved(detail)
}

// errBusy refuses a request with 503 ServerBusy.
func errBusy(detail string) error {
	return &svcerr.Error{Status: http.StatusServiceUnavailable, Code: "ServerBusy", Message: msgServerBusy, Detail: detail}
}

// errMoved is errBusy for a request that changed nothing and that
// another node, or this one a moment later, is to answer: the front end
// repeats it for a while before the client sees the refusal (HTTP.serve).
func errMoved(detail string) error {
	return &svcerr.Error{Status: http.StatusServiceUnavailable, Code: "ServerBusy", Message: msgServerBusy, Detail: detail, Retry: true}
}

// errStoppedUnwritten refuses a request the node stopped before it did
// anything of: ServerBusy, for the client may ask again (another node, or
// this one restarted), and ErrStopped for the node's own callers.
var errStoppedUnwritten = fmt.Errorf("%w: %w", ErrStopped,
	errBusy("this node stopped before it took the request; nothing of it was done"))

// errAmbiguous is a write whose outcome is unknown: proposed, but this
// node lost track of it. It may have been applied, as the service says of
// this code.
var errAmbiguous = &svcerr.Error{Status: http.StatusInternalServerError, Code: "OperationTimedOut", Message: msgOperationTimedOut,
	Detail: "the write was proposed, but its outcome is unknown: it may have been applied"}

// raftLogger routes raft's log lines to slog: its debug and info chatter
// at debug, warnings and errors as such.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                  { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)  { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) { r.l.Error(fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...any)                 { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
func (r raftLogger) Panic(v ...any)                 { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any) { panic(fmt.Sprintf(format, v...)) }
