package metrics

import (
	"io"
	"net/http"
)

// healthz answers /healthz: the process is up and serving HTTP. It
// checks nothing else, so an orchestrator restarts the process only when
// it has stopped answering at all.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, "ok\n")
}

// readyz answers /readyz: 200 "ready" while the store is open and takes
// writes (and Options.Ready agrees), else 503 with the reason, so a load
// balancer sends requests elsewhere while the store is closed, its disk
// has failed, or the server is shutting down.
func (m *Metrics) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := m.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "not ready: "+err.Error()+"\n")
		return
	}
	io.WriteString(w, "ready\n")
}
