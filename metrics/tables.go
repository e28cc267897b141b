package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/partition"
)

// tableCollector reports the table service: its tables and range
// partitions, their splits and merges, and the waits on partition
// latches (partition.Stats).
type tableCollector struct {
	store func() *partition.Store

	tables, ranges, splits, merges, latchWaits, latchWaitSeconds *prometheus.Desc
}

func newTableCollector(store func() *partition.Store) *tableCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, nil, nil)
	}
	return &tableCollector{
		store:            store,
		tables:           d("tables", "Tables in the store, across accounts."),
		ranges:           d("ranges", "Range partitions across every table."),
		splits:           d("range_splits_total", "Range partitions split (grown past the size or load threshold)."),
		merges:           d("range_merges_total", "Adjacent cold range partitions merged."),
		latchWaits:       d("latch_waits_total", "Writes that waited for another write to the same partition (its latch)."),
		latchWaitSeconds: d("latch_wait_seconds_total", "Time writes spent waiting for partition latches."),
	}
}

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tables, c.ranges, c.splits, c.merges, c.latchWaits, c.latchWaitSeconds} {
		ch <- d
	}
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store()
	if s == nil {
		return
	}
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(c.tables, prometheus.GaugeValue, float64(st.Tables))
	ch <- prometheus.MustNewConstMetric(c.ranges, prometheus.GaugeValue, float64(st.Ranges))
	ch <- prometheus.MustNewConstMetric(c.splits, prometheus.CounterValue, float64(st.Splits))
	ch <- prometheus.MustNewConstMetric(c.merges, prometheus.CounterValue, float64(st.Merges))
	ch <- prometheus.MustNewConstMetric(c.latchWaits, prometheus.CounterValue, float64(st.LatchWaits))
	ch <- prometheus.MustNewConstMetric(c.latchWaitSeconds, prometheus.CounterValue, st.LatchWaitTime.Seconds())
}
