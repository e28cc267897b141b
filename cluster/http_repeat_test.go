package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
)

// TestHeldWriter checks what a client sees of one attempt: an answer
// passed through with its headers, a 503 that may be repeated held back
// (and sent whole once given up), a 503 that may not passed at once, an
// answer a handler left unwritten completed as 200, and an informational
// answer passed on without ending the attempt.
func TestHeldWriter(t *testing.T) {
	attempt := func(handler func(w http.ResponseWriter)) (*httptest.ResponseRecorder, *heldWriter) {
		rec := httptest.NewRecorder()
		_, note := svcerr.WithRetryNote(context.Background())
		hw := &heldWriter{w: rec, header: http.Header{}, note: note}
		handler(hw)
		return rec, hw
	}
	rec, hw := attempt(func(w http.ResponseWriter) {
		w.Header().Set("X-Ms-Request-Id", "a")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "body")
	})
	if hw.held || rec.Code != http.StatusCreated || rec.Header().Get("X-Ms-Request-Id") != "a" || rec.Body.String() != "body" {
		t.Errorf("an answer passed through as %d %v %q (held %v)", rec.Code, rec.Header(), rec.Body, hw.held)
	}

	rec, hw = attempt(func(w http.ResponseWriter) {
		w.Header().Set("X-Ms-Error-Code", "ServerBusy")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "busy")
	})
	if hw.held || rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "busy" {
		t.Errorf("a 503 that may not be repeated: %d %q (held %v)", rec.Code, rec.Body, hw.held)
	}

	rec, hw = attempt(func(w http.ResponseWriter) {
		w.Header().Set(retryHeader, "1") // a peer's answer says so
		w.Header().Set("X-Ms-Error-Code", "ServerBusy")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "moved")
	})
	if !hw.held || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("a 503 that may be repeated reached the client: held %v, %v %q", hw.held, rec.Header(), rec.Body)
	}
	hw.release()
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "moved" || rec.Header().Get("X-Ms-Error-Code") != "ServerBusy" || rec.Header().Get(retryHeader) != "" {
		t.Errorf("a 503 given up on: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}

	ctx, note := svcerr.WithRetryNote(context.Background())
	rec = httptest.NewRecorder()
	hw = &heldWriter{w: rec, header: http.Header{}, note: note}
	svcerr.NoteRetry(ctx, errMoved("the server answers a refusal that may be repeated"))
	hw.WriteHeader(http.StatusServiceUnavailable)
	if !hw.held || rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("a 503 the server noted as moved reached the client (held %v)", hw.held)
	}

	rec, hw = attempt(func(http.ResponseWriter) {})
	hw.finish()
	if rec.Code != http.StatusOK || !hw.passed {
		t.Errorf("an unwritten answer: %d (passed %v)", rec.Code, hw.passed)
	}

	codes := &codeRecorder{ResponseRecorder: httptest.NewRecorder()}
	hw = &heldWriter{w: codes, header: http.Header{}, note: new(svcerr.RetryNote)}
	hw.WriteHeader(http.StatusContinue)
	hw.WriteHeader(http.StatusNoContent)
	if !slices.Equal(codes.codes, []int{http.StatusContinue, http.StatusNoContent}) || !hw.passed {
		t.Errorf("an informational answer: the client got %v (passed %v)", codes.codes, hw.passed)
	}
}

// codeRecorder records every status written, informational ones too.
type codeRecorder struct {
	*httptest.ResponseRecorder
	codes []int
}

func (c *codeRecorder) WriteHeader(code int) { c.codes = append(c.codes, code) }

// TestForwardedRefusalsAreLeftToTheFront: a request a peer forwarded is
// reported (access log, metrics) where it is answered, but for a refusal
// the peer may repeat: the peer reports what its client gets.
func TestForwardedRefusalsAreLeftToTheFront(t *testing.T) {
	c := newTestCluster(t, 1, 1)
	h := NewHTTP(c.leader(10*time.Second).node, http.NotFoundHandler(), nil, nil)
	for _, tc := range []struct {
		what    string
		answer  func(ctx context.Context, w http.ResponseWriter)
		reports int
	}{
		{"an answer", func(_ context.Context, w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, 1},
		{"a refusal that may be repeated", func(ctx context.Context, w http.ResponseWriter) {
			svcerr.NoteRetry(ctx, errMoved("moved"))
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 0},
		{"a 503 that may not", func(_ context.Context, w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }, 1},
	} {
		reports := 0
		rest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tc.answer(r.Context(), w)
			if !svcerr.DeferReport(r.Context(), func(time.Time) { reports++ }) {
				reports++
			}
		})
		rec := httptest.NewRecorder()
		h.serve(rec, httptest.NewRequest(http.MethodGet, "/t()", nil), rest, 1)
		if reports != tc.reports {
			t.Errorf("%s, forwarded: reported %d times, want %d", tc.what, reports, tc.reports)
		}
		if repeat := rec.Header().Get(retryHeader) != ""; repeat != (tc.reports == 0) {
			t.Errorf("%s, forwarded: marked for repeating %v", tc.what, repeat)
		}
	}
}

// TestBufferBody checks that a body within the bound is read whole,
// whether its length is declared or not, and that a larger one is left
// to be read once, nothing of it lost.
func TestBufferBody(t *testing.T) {
	body := strings.Repeat("entity ", 300)
	for _, declared := range []bool{true, false} {
		r := httptest.NewRequest(http.MethodPost, "/t", strings.NewReader(body))
		if !declared {
			r.ContentLength = -1
		}
		got, ok := bufferBody(r, int64(len(body)))
		if !ok || string(got) != body {
			t.Fatalf("declared %v: bufferBody = %d bytes, %v; want the %d bytes, true", declared, len(got), ok, len(body))
		}
		r = httptest.NewRequest(http.MethodPost, "/t", strings.NewReader(body))
		if !declared {
			r.ContentLength = -1
		}
		if got, ok := bufferBody(r, int64(len(body))-1); ok || got != nil {
			t.Fatalf("declared %v: a body over the bound: bufferBody = %d bytes, %v; want nil, false", declared, len(got), ok)
		}
		rest, err := io.ReadAll(r.Body)
		if err != nil || string(rest) != body {
			t.Fatalf("declared %v: the body left to read: %d bytes, %v; want the %d bytes", declared, len(rest), err, len(body))
		}
	}
}
