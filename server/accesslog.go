package server

import (
	"context"
	"log/slog"
	"time"
)

// AccessLog is the Observer that writes the access log: a record at info
// level for every request ("request"), and one at warn level ("slow
// request") for each that took longer than its threshold, so a log kept
// at warn shows only those. Both hold the same fields (docs/metrics.md):
// never a header other than the request ids, and the query string with
// SAS signatures masked. A logger that drops both levels costs a request
// two Enabled checks.
type AccessLog struct {
	log  *slog.Logger
	slow time.Duration
}

// NewAccessLog returns an access log writing to log. A request that takes
// longer than slow gets a "slow request" record besides its "request"
// one; slow <= 0 means none does.
func NewAccessLog(log *slog.Logger, slow time.Duration) *AccessLog {
	return &AccessLog{log: log, slow: slow}
}

// RequestDone writes the request's records.
func (a *AccessLog) RequestDone(info RequestInfo) {
	ctx := context.Background()
	logAll := a.log.Enabled(ctx, slog.LevelInfo)
	logSlow := a.slow > 0 && info.Duration > a.slow && a.log.Enabled(ctx, slog.LevelWarn)
	if !logAll && !logSlow {
		return
	}
	var buf [16]slog.Attr
	attrs := append(buf[:0],
		slog.String("method", info.Method),
		slog.String("account", info.Account),
		slog.String("table", info.Table),
		slog.String("operation", info.Operation),
		slog.Int("status", info.Status),
		slog.String("error_code", info.ErrorCode),
		slog.Float64("duration_ms", milliseconds(info.Duration)),
		slog.Int64("bytes_in", info.BytesIn),
		slog.Int64("bytes_out", info.BytesOut),
		slog.String("request_id", info.RequestID),
		slog.String("client_request_id", info.ClientRequestID),
		slog.String("path", info.Path),
		slog.String("query", info.Query),
		slog.String("remote", info.RemoteAddr),
	)
	if logAll {
		a.log.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
	}
	if logSlow {
		a.log.LogAttrs(ctx, slog.LevelWarn, "slow request", append(attrs, slog.Float64("threshold_ms", milliseconds(a.slow)))...)
	}
}

// milliseconds is d in milliseconds, to the microsecond: a number any log
// reader can compare, in the text and the JSON format alike.
func milliseconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}
