package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
)

// refusingStore refuses its first reads with a refusal that may be
// repeated, as a cluster node whose range moved does.
type refusingStore struct {
	server.Store
	refusals atomic.Int32
}

func (s *refusingStore) GetEntity(ctx context.Context, account, table, pk, rk string) (partition.StoredEntity, error) {
	if s.refusals.Add(-1) >= 0 {
		return partition.StoredEntity{}, &svcerr.Error{Status: http.StatusServiceUnavailable, Code: "ServerBusy", Message: "moved", Retry: true}
	}
	return s.Store.GetEntity(ctx, account, table, pk, rk)
}

// reports records what the server reports.
type reports struct {
	mu    sync.Mutex
	infos []server.RequestInfo
}

func (r *reports) RequestDone(info server.RequestInfo) {
	r.mu.Lock()
	r.infos = append(r.infos, info)
	r.mu.Unlock()
}

func (r *reports) take() []server.RequestInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.infos
	r.infos = nil
	return out
}

const repeatWait = 20 * time.Millisecond

// repeatingFront repeats a request refused in passing up to three times,
// holding the server's reports as a cluster's front end does.
func repeatingFront(rest http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		for attempt := 1; ; attempt++ {
			ctx, note := svcerr.WithRetryNote(r.Context())
			note.HoldReport()
			rec := httptest.NewRecorder()
			rest.ServeHTTP(rec, r.WithContext(ctx))
			if note.Set() && attempt < 3 {
				time.Sleep(repeatWait) // then repeated: the client never sees this answer
				continue
			}
			note.Report(start)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
	})
}

// TestRepeatedRefusalsAreReportedOnce: a front end that repeats a request
// refused in passing has the server report (access log, metrics) only
// the answer the client gets, timed from when the request came, not each
// attempt.
func TestRepeatedRefusalsAreReportedOnce(t *testing.T) {
	store := openStore(t, nil)
	backend := &refusingStore{Store: store}
	seen := &reports{}
	ts := serveStoreAs(t, store, backend, &server.Options{Observer: seen, Front: repeatingFront})
	client := &http.Client{}
	send(t, client, rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"held"}`), true))
	send(t, client, rawRequest(t, ts, "POST", "/held", []byte(`{"PartitionKey":"p","RowKey":"r"}`), true))
	seen.take()

	for _, c := range []struct {
		refusals int32
		status   int
	}{{2, http.StatusOK}, {5, http.StatusServiceUnavailable}} {
		backend.refusals.Store(c.refusals)
		began := time.Now()
		resp, body := send(t, client, rawRequest(t, ts, "GET", "/held(PartitionKey='p',RowKey='r')", nil, true))
		if resp.StatusCode != c.status {
			t.Fatalf("%d refusals: the client got %d %s, want %d", c.refusals, resp.StatusCode, bytes.TrimSpace(body), c.status)
		}
		got := seen.take()
		if len(got) != 1 || got[0].Status != c.status {
			t.Fatalf("%d refusals: the server reported %+v, want one answer %d", c.refusals, got, c.status)
		}
		// Timed from the first attempt: the two waits before the third.
		if got[0].Start.Before(began) || got[0].Duration < 2*repeatWait {
			t.Fatalf("%d refusals: the answer reported as begun %v after the request, lasting %v", c.refusals, got[0].Start.Sub(began), got[0].Duration)
		}
	}
}
