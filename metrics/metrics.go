// Package metrics exports a Tabula server's metrics in Prometheus' text
// format, and answers its health checks. It is the one package that
// knows Prometheus: the engine (lsm), the table service (partition) and
// the REST server (server) keep plain counters and report them as structs
// (lsm.Metrics, partition.Stats, server.ConnStats); Metrics reads those
// at each scrape and is told of every request as a server.Observer.
//
// Every Metrics has a registry of its own, never the library's global
// one, so two servers in one process (tests, a cluster on one machine)
// never mix their numbers. The names, types and labels of every metric
// are in docs/metrics.md.
package metrics

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
)

// namespace prefixes every metric of Tabula's own.
const namespace = "tabula"

// Options configures Metrics. Every field may be nil: what it would
// report is then left out.
type Options struct {
	// Store returns the store whose engine and table service are reported
	// and whose Ready answers /readyz. A function, because a cluster
	// node's store is replaced when it installs a snapshot
	// (cluster.Node.Replica); a nil result is skipped.
	Store func() *partition.Store
	// Conns returns the server's connection counts (server.Server's
	// ConnStats).
	Conns func() server.ConnStats
	// Ready, when set, is checked by /readyz besides the store: for
	// example that the server is still accepting requests.
	Ready func() error
}

// Metrics is a registry holding the process's, the Go runtime's, the
// requests', the connections', the engine's and the table service's
// metrics. It is a server.Observer: give it to server.Options.Observer so
// it counts requests.
type Metrics struct {
	reg      *prometheus.Registry
	requests *requestMetrics
	opts     Options
}

var _ server.Observer = (*Metrics)(nil)

// New builds the registry and its collectors.
func New(opts Options) (*Metrics, error) {
	m := &Metrics{reg: prometheus.NewRegistry(), requests: newRequestMetrics(), opts: opts}
	cs := []prometheus.Collector{
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		m.requests,
	}
	if opts.Conns != nil {
		cs = append(cs, newConnCollector(opts.Conns))
	}
	if opts.Store != nil {
		cs = append(cs, newEngineCollector(opts.Store), newTableCollector(opts.Store))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register %T: %w", c, err)
		}
	}
	return m, nil
}

// Registry returns the registry, for a caller that adds collectors of
// its own or gathers without HTTP.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// RequestDone counts an answered request (server.Observer).
func (m *Metrics) RequestDone(info server.RequestInfo) { m.requests.observe(&info) }

// Handler serves /metrics (the registry, in the format the scraper asks
// for: Prometheus' text format by default), /healthz and /readyz
// (health.go). It is meant for an address of its own, never the Table
// service's.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// A failing collector leaves its metrics out instead of failing
		// the whole scrape; the error is served as a metric.
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg,
		EnableOpenMetrics: false,
	}))
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", m.readyz)
	return mux
}

// Ready reports whether the server is ready for requests: the store is
// open and takes writes, and Options.Ready, if set, agrees.
func (m *Metrics) Ready() error {
	var errs []error
	if m.opts.Ready != nil {
		errs = append(errs, m.opts.Ready())
	}
	if m.opts.Store != nil {
		if s := m.opts.Store(); s == nil {
			errs = append(errs, errors.New("metrics: no store open"))
		} else {
			errs = append(errs, s.Ready())
		}
	}
	return errors.Join(errs...)
}
