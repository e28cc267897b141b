package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"time"
)

// Range reports. Every node reports the ranges it holds the leases of
// (Node.eachRange) at rangesPath, one JSON value a line, made and sent
// one at a time; the placement controller reads every member's report
// the same way (HTTP.RangeStats). So neither side holds more than one
// range's status of a report, however many ranges the cluster has. The
// status a node gives an operator (statusPath) holds its report whole:
// a node of an earlier build reports there only, and is read there.

// maxRangeStatus bounds one range's status in a member's report: past
// it, the rest of that report is left out. A status is a range's bytes
// and rates with those of each range partition in it, about 200 bytes
// each.
const maxRangeStatus = 4 << 20

// maxStatusReport bounds a whole status read from a node of an earlier
// build.
const maxStatusReport = 16 << 20

// reportWriteTimeout bounds how long a node writes its report: it walks
// the catalog meanwhile, holding an engine iterator.
const reportWriteTimeout = 10 * time.Second

// reportIdleTimeout is how long a member may send nothing of its report
// before the controller leaves the rest of it out. A node flushes its
// report after a range once reportFlushEvery has passed since the last
// flush: a walk that finds no range it leads for longer sends nothing.
const (
	reportIdleTimeout = time.Second
	reportFlushEvery  = reportIdleTimeout / 10
)

// rangeReport streams the ranges this node reports, one a line.
func (h *HTTP) rangeReport(w http.ResponseWriter, r *http.Request) {
	if !h.verifyOperator(w, r, purposeStatus) {
		return
	}
	rc := http.NewResponseController(w)
	// A writer that cannot take a deadline ends with the asker's request.
	_ = rc.SetWriteDeadline(time.Now().Add(reportWriteTimeout))
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flushed := time.Now()
	for rs := range h.node.eachRange(r.Context()) {
		if enc.Encode(rs) != nil {
			return // the asker is gone
		}
		if time.Since(flushed) >= reportFlushEvery {
			rc.Flush()
			flushed = time.Now()
		}
	}
}

// RangeStats yields the ranges every member reports, each from its
// leaseholder, over the internal address: it fits Config.RangeStats. A
// member that sends nothing for reportIdleTimeout is left out, as is
// what it had not sent by then; yield's own time does not count.
func (h *HTTP) RangeStats(ctx context.Context) iter.Seq[RangeStatus] {
	return func(yield func(RangeStatus) bool) {
		for id := range h.node.members.all() {
			if !h.memberRanges(ctx, id, yield) {
				return
			}
		}
	}
}

// memberRanges yields the ranges one member reports. It returns false
// if yield asked to stop.
func (h *HTTP) memberRanges(ctx context.Context, id uint64, yield func(RangeStatus) bool) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(reportIdleTimeout, cancel)
	defer idle.Stop()
	resp, err := h.ask(ctx, id, purposeStatus, rangesPath)
	if err != nil {
		return true
	}
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		idle.Reset(reportIdleTimeout) // for the whole status
		return h.statusRanges(ctx, id, yield)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return true
	}
	body := &statusLimit{r: resp.Body}
	dec := json.NewDecoder(body)
	for {
		body.left = maxRangeStatus
		var rs RangeStatus
		if dec.Decode(&rs) != nil {
			return true // the report's end, or what cannot be read
		}
		idle.Stop()
		if !yield(rs) {
			return false
		}
		idle.Reset(reportIdleTimeout)
	}
}

// statusRanges yields the ranges in the status of a member of an
// earlier build, which has no rangesPath.
func (h *HTTP) statusRanges(ctx context.Context, id uint64, yield func(RangeStatus) bool) bool {
	resp, err := h.ask(ctx, id, purposeStatus, statusPath)
	if err != nil {
		return true
	}
	defer resp.Body.Close()
	var st Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, maxStatusReport)).Decode(&st) != nil {
		return true
	}
	for _, rs := range st.Ranges {
		if !yield(rs) {
			return false
		}
	}
	return true
}

var errStatusTooLarge = errors.New("cluster: a range's status in a report is too large")

// statusLimit fails a read once left bytes have been read: the reader
// of a report sets left before each status, so that no one status takes
// more than that (a decoder reads ahead into the next one, which only
// makes the bound looser by its buffer).
type statusLimit struct {
	r    io.Reader
	left int64
}

func (l *statusLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errStatusTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
