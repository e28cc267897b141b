package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/server"
)

// connCollector reports the server's connections.
type connCollector struct {
	stats                   func() server.ConnStats
	open, accepted, refused *prometheus.Desc
}

func newConnCollector(stats func() server.ConnStats) *connCollector {
	return &connCollector{
		stats: stats,
		open: prometheus.NewDesc(namespace+"_connections_open",
			"Client connections open now.", nil, nil),
		accepted: prometheus.NewDesc(namespace+"_connections_accepted_total",
			"Client connections accepted, those refused at the cap included.", nil, nil),
		refused: prometheus.NewDesc(namespace+"_connections_refused_total",
			"Client connections closed on arrival, past --max-conns.", nil, nil),
	}
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.accepted
	ch <- c.refused
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(st.Accepted))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused))
}
