package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/partition"
)

// engineCollector reports the LSM engine under the store: one
// lsm.DB.Metrics call per scrape, turned into constant metrics. The
// engine's counters start at zero when it opens, so in a cluster a
// snapshot install (a new engine) looks to Prometheus like a restart.
type engineCollector struct {
	store func() *partition.Store

	memtableBytes, memtablesImmutable                          *prometheus.Desc
	levelFiles, levelBytes, levelScore                         *prometheus.Desc
	compactionDebt, compactionsRunning                         *prometheus.Desc
	compactions, trivialMoves, compactionRead, compactionWrite *prometheus.Desc
	compactionSeconds                                          *prometheus.Desc
	flushes, flushBytes, flushSeconds                          *prometheus.Desc
	stalls, stallSeconds                                       *prometheus.Desc
	slowdowns, slowdownSeconds                                 *prometheus.Desc
	paced, pacedSeconds                                        *prometheus.Desc
	blockCacheHits, blockCacheMisses, blockCacheBytes          *prometheus.Desc
	blockCacheMapped                                           *prometheus.Desc
	tableCacheHits, tableCacheMisses, tableCacheOpen           *prometheus.Desc
	walFiles, walBytes, walWritten                             *prometheus.Desc
	walSyncSeconds, walGroupSize                               *prometheus.Desc
	snapshots, visibleSeq                                      *prometheus.Desc
}

func newEngineCollector(store func() *partition.Store) *engineCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_lsm_"+name, help, labels, nil)
	}
	return &engineCollector{
		store:              store,
		memtableBytes:      d("memtable_bytes", "Bytes used in the mutable memtable."),
		memtablesImmutable: d("memtables_immutable", "Full memtables waiting to be flushed."),
		levelFiles:         d("level_files", "Tables in each level.", "level"),
		levelBytes:         d("level_bytes", "Bytes of the tables in each level.", "level"),
		levelScore:         d("level_score", "Each level's need for compaction: 1 or more wants one (L0 by table count, the others by size over target).", "level"),
		compactionDebt:     d("compaction_debt_bytes", "Estimated bytes compactions must read and write to bring every level within its target."),
		compactionsRunning: d("compactions_running", "Compactions in progress."),
		compactions:        d("compactions_total", "Compactions that rewrote tables."),
		trivialMoves:       d("compaction_trivial_moves_total", "Tables moved down a level without rewriting."),
		compactionRead:     d("compaction_read_bytes_total", "Bytes read by compactions."),
		compactionWrite:    d("compaction_written_bytes_total", "Bytes written by compactions."),
		compactionSeconds:  d("compaction_seconds_total", "Time spent compacting."),
		flushes:            d("flushes_total", "Flushes of memtables to L0 tables (one memtable, or several small ones together)."),
		flushBytes:         d("flush_written_bytes_total", "Bytes written by flushes."),
		flushSeconds:       d("flush_seconds_total", "Time spent flushing."),
		stalls:             d("write_stalls_total", "Times writes waited for a flush or a compaction (too many memtables or L0 tables)."),
		stallSeconds:       d("write_stall_seconds_total", "Time writes spent stalled."),
		slowdowns:          d("write_slowdowns_total", "Writes paced while L0 held L0SlowdownWritesThreshold tables or more."),
		slowdownSeconds:    d("write_slowdown_seconds_total", "Time writes spent paced."),
		paced:              d("write_memtable_paced_total", "Writes held back so that the mutable memtable does not fill ahead of the flush before it."),
		pacedSeconds:       d("write_memtable_paced_seconds_total", "Time writes spent held back to the flush's pace."),
		blockCacheHits:     d("block_cache_hits_total", "Block cache hits."),
		blockCacheMisses:   d("block_cache_misses_total", "Block cache misses (blocks read from disk)."),
		blockCacheBytes:    d("block_cache_bytes", "Bytes held in the block cache."),
		blockCacheMapped:   d("block_cache_mapped_bytes", "Memory outside the Go heap that cached blocks come from, cached, in use or free."),
		tableCacheHits:     d("table_cache_hits_total", "Table cache hits (a table already open)."),
		tableCacheMisses:   d("table_cache_misses_total", "Table cache misses (a table opened)."),
		tableCacheOpen:     d("table_cache_open", "Tables open in the table cache."),
		walFiles:           d("wal_files", "Live WAL segments."),
		walBytes:           d("wal_bytes", "Bytes of the live WAL segments."),
		walWritten:         d("wal_written_bytes_total", "Batch bytes appended to the WAL."),
		walSyncSeconds:     d("wal_fsync_duration_seconds", "Duration of each WAL fsync."),
		walGroupSize:       d("wal_group_commit_size", "Synced writes made durable by each WAL fsync that one waited for (group commit)."),
		snapshots:          d("snapshots", "Open snapshots (queries and scans in flight hold one)."),
		visibleSeq:         d("visible_seqnum", "The newest sequence number visible to reads: it grows with every write."),
	}
}

func (c *engineCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.memtableBytes, c.memtablesImmutable, c.levelFiles, c.levelBytes, c.levelScore,
		c.compactionDebt, c.compactionsRunning, c.compactions, c.trivialMoves, c.compactionRead,
		c.compactionWrite, c.compactionSeconds, c.flushes, c.flushBytes, c.flushSeconds,
		c.stalls, c.stallSeconds, c.slowdowns, c.slowdownSeconds, c.paced, c.pacedSeconds, c.blockCacheHits, c.blockCacheMisses, c.blockCacheBytes, c.blockCacheMapped,
		c.tableCacheHits, c.tableCacheMisses, c.tableCacheOpen, c.walFiles, c.walBytes,
		c.walWritten, c.walSyncSeconds, c.walGroupSize, c.snapshots, c.visibleSeq,
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store()
	if s == nil {
		return
	}
	m := s.DB().Metrics()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.memtableBytes, float64(m.MemTable.Size))
	gauge(c.memtablesImmutable, float64(m.MemTable.Immutable))
	for i, l := range m.Levels {
		level := strconv.Itoa(i)
		gauge(c.levelFiles, float64(l.Files), level)
		gauge(c.levelBytes, float64(l.Bytes), level)
		gauge(c.levelScore, l.Score, level)
	}
	gauge(c.compactionDebt, float64(m.Compaction.Debt))
	gauge(c.compactionsRunning, float64(m.Compaction.Running))
	counter(c.compactions, float64(m.Compaction.Count))
	counter(c.trivialMoves, float64(m.Compaction.TrivialMoves))
	counter(c.compactionRead, float64(m.Compaction.BytesRead))
	counter(c.compactionWrite, float64(m.Compaction.BytesWritten))
	counter(c.compactionSeconds, m.Compaction.Duration.Seconds())
	counter(c.flushes, float64(m.Flush.Count))
	counter(c.flushBytes, float64(m.Flush.BytesWritten))
	counter(c.flushSeconds, m.Flush.Duration.Seconds())
	counter(c.stalls, float64(m.Stall.Count))
	counter(c.stallSeconds, m.Stall.Duration.Seconds())
	counter(c.slowdowns, float64(m.Slowdown.Count))
	counter(c.slowdownSeconds, m.Slowdown.Duration.Seconds())
	counter(c.paced, float64(m.Pace.Count))
	counter(c.pacedSeconds, m.Pace.Duration.Seconds())
	counter(c.blockCacheHits, float64(m.BlockCache.Hits))
	counter(c.blockCacheMisses, float64(m.BlockCache.Misses))
	gauge(c.blockCacheBytes, float64(m.BlockCache.Size))
	gauge(c.blockCacheMapped, float64(m.BlockCache.Mapped))
	counter(c.tableCacheHits, float64(m.TableCache.Hits))
	counter(c.tableCacheMisses, float64(m.TableCache.Misses))
	gauge(c.tableCacheOpen, float64(m.TableCache.Open))
	gauge(c.walFiles, float64(m.WAL.Files))
	gauge(c.walBytes, float64(m.WAL.Bytes))
	counter(c.walWritten, float64(m.WAL.BytesWritten))
	ch <- constHistogram(c.walSyncSeconds, m.WAL.SyncLatency)
	ch <- constHistogram(c.walGroupSize, m.WAL.GroupSize)
	gauge(c.snapshots, float64(m.Snapshots))
	gauge(c.visibleSeq, float64(m.VisibleSeqNum))
}

// constHistogram turns the engine's histogram (a count per bucket) into
// Prometheus' (cumulative counts by upper bound, +Inf implied by the
// total).
func constHistogram(d *prometheus.Desc, h lsm.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}
