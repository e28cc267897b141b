package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tabuladb/tabula/metrics"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
)

// observeFlags are serve's flags for watching a server: the log's format,
// the slow-request threshold of the access log, and the address of the
// metrics and health checks (docs/metrics.md).
type observeFlags struct {
	metricsAddr string
	logFormat   string
	slow        time.Duration
}

// register adds the flags to fs.
func (f *observeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-addr", "",
		"serve Prometheus metrics (/metrics) and health checks (/healthz, /readyz) on this address, e.g. 127.0.0.1:9464 (off by default)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&f.slow, "slow-request", time.Second,
		"log a warning for each request that takes longer than this (0: never)")
}

// logger returns the process's logger: --log-format's handler on w at
// level. It also checks --slow-request, the other flag of the log.
func (f *observeFlags) logger(w io.Writer, level slog.Level) (*slog.Logger, error) {
	if f.slow < 0 {
		return nil, fmt.Errorf("--slow-request %v: want a duration of 0 or more", f.slow)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

// watch is what start set up: the access log, and with --metrics-addr the
// metrics and their listener, not yet served.
type watch struct {
	log     *slog.Logger
	metrics *metrics.Metrics // nil without --metrics-addr
	ln      net.Listener
	hs      *http.Server
	srv     *server.Server // set by serve, before any scrape
}

// start sets opts.Observer to the access log and, with --metrics-addr,
// the metrics, whose address it binds so a taken port fails the start.
// The store reported is store, or a cluster node's replica (node non-nil).
// The caller runs serve once the server exists, and stop at exit.
func (f *observeFlags) start(log *slog.Logger, opts *server.Options, store *partition.Store, node *clusterSetup) (*watch, error) {
	w := &watch{log: log}
	var obs server.Observers
	ctx := context.Background()
	if log.Enabled(ctx, slog.LevelInfo) || (f.slow > 0 && log.Enabled(ctx, slog.LevelWarn)) {
		obs = append(obs, server.NewAccessLog(log, f.slow))
	}
	if f.metricsAddr != "" {
		replica := func() *partition.Store {
			if node != nil {
				return node.node.Replica() // replaced when a snapshot is installed
			}
			return store
		}
		m, err := metrics.New(metrics.Options{
			Store: replica,
			Conns: func() server.ConnStats { return w.srv.ConnStats() },
			Ready: func() error {
				if !w.srv.Serving() {
					return errors.New("the server is not serving: starting or shutting down")
				}
				return nil
			},
		})
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		if w.ln, err = net.Listen("tcp", f.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		w.metrics = m
		obs = append(obs, m)
	}
	switch len(obs) {
	case 0: // nothing to tell: requests pay nothing
	case 1:
		opts.Observer = obs[0]
	default:
		opts.Observer = obs
	}
	return w, nil
}

// serve starts answering scrapes and health checks for srv, if
// --metrics-addr asked for them.
func (w *watch) serve(srv *server.Server) {
	w.srv = srv
	if w.ln == nil {
		return
	}
	w.hs = &http.Server{Handler: w.metrics.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go w.hs.Serve(w.ln)
	w.log.Info("serving metrics and health checks", "metrics", "http://"+w.ln.Addr().String()+"/metrics",
		"health", "/healthz", "ready", "/readyz")
}

// stop closes the metrics listener and its connections.
func (w *watch) stop() {
	switch {
	case w.hs != nil:
		w.hs.Close()
	case w.ln != nil:
		w.ln.Close()
	}
}
