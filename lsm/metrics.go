package lsm

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Metrics is a point-in-time report of a DB's shape and activity.
type Metrics struct {
	Levels [NumLevels]LevelMetrics
	WAL    struct {
		Files        int   // live segments
		Bytes        int64 // size of live segments' files (with zeros ahead and a reused file's older bytes)
		BytesWritten int64 // batch bytes appended since Open
		// Reused counts the segments since Open written over a retired
		// segment's file instead of a new one (logRecycler).
		Reused int64
		// SyncLatency is the duration of each WAL fsync since Open, in
		// seconds.
		SyncLatency Histogram
		// GroupSize is, for each WAL fsync since Open that a synced write
		// waited for, how many synced writes it made durable at once
		// (group commit).
		GroupSize Histogram
	}
	MemTable struct {
		Size      int64 // bytes used in the mutable memtable
		Immutable int   // full memtables waiting for flush
	}
	Flush struct {
		Count        int64 // flushes: each writes one memtable, or several small ones
		BytesWritten int64
		Duration     time.Duration
	}
	Compaction struct {
		Count        int64 // compactions that rewrote data
		TrivialMoves int64
		BytesRead    int64
		BytesWritten int64
		Duration     time.Duration
		// Running is the number of compactions in progress (the DB runs
		// at most one at a time).
		Running int
		// Debt estimates the bytes compactions must still read and write
		// to bring every level within its target (see compactionDebt).
		Debt int64
	}
	BlockCache struct {
		Hits, Misses int64
		Size         int64
		Count        int64
		// Mapped is the memory outside the Go heap the blocks come from:
		// cached, evicted but still in use, or free for the next ones.
		Mapped int64
	}
	TableCache struct {
		Hits, Misses int64
		Open         int
	}
	// Stall counts the times writes waited for flushes or compactions,
	// for how long in total, and the longest single wait.
	Stall struct {
		Count    int64
		Duration time.Duration
		Longest  time.Duration
	}
	// Pace counts the writes held back so that the mutable memtable
	// would not fill ahead of the flush before it (pace.go), the time
	// they waited in total, and the longest single wait.
	Pace struct {
		Count    int64
		Duration time.Duration
		Longest  time.Duration
	}
	// Slowdown counts the writes slowed because L0 reached
	// L0SlowdownWritesThreshold, and the time they waited in total.
	Slowdown struct {
		Count    int64
		Duration time.Duration
	}
	Snapshots int
	// VisibleSeqNum is the newest sequence number visible to reads.
	VisibleSeqNum uint64
}

// LevelMetrics describes one level.
type LevelMetrics struct {
	Files int
	Bytes int64
	// Score is the level's need for compaction (>= 1: wants one).
	Score float64
	// BytesWritten is the total written into the level by flushes (L0) or
	// compactions since Open.
	BytesWritten int64
}

// TotalBytes is the size of all tables.
func (m Metrics) TotalBytes() int64 {
	var n int64
	for _, l := range m.Levels {
		n += l.Bytes
	}
	return n
}

func (m *Metrics) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "level  files       bytes  score     written\n")
	for i, l := range m.Levels {
		fmt.Fprintf(&b, "L%d    %6d %11d %6.2f %11d\n", i, l.Files, l.Bytes, l.Score, l.BytesWritten)
	}
	fmt.Fprintf(&b, "wal: %d files, %d bytes, %d bytes written\n", m.WAL.Files, m.WAL.Bytes, m.WAL.BytesWritten)
	fmt.Fprintf(&b, "memtable: %d bytes, %d immutable\n", m.MemTable.Size, m.MemTable.Immutable)
	fmt.Fprintf(&b, "flush: %d, %d bytes, %s\n", m.Flush.Count, m.Flush.BytesWritten, m.Flush.Duration)
	fmt.Fprintf(&b, "compaction: %d (+%d moves), read %d, wrote %d bytes, %s\n",
		m.Compaction.Count, m.Compaction.TrivialMoves, m.Compaction.BytesRead, m.Compaction.BytesWritten, m.Compaction.Duration)
	fmt.Fprintf(&b, "block cache: %d hits, %d misses, %d bytes\n", m.BlockCache.Hits, m.BlockCache.Misses, m.BlockCache.Size)
	fmt.Fprintf(&b, "table cache: %d hits, %d misses, %d open\n", m.TableCache.Hits, m.TableCache.Misses, m.TableCache.Open)
	fmt.Fprintf(&b, "stalls: %d, %s (longest %s)\n", m.Stall.Count, m.Stall.Duration, m.Stall.Longest)
	fmt.Fprintf(&b, "slowed writes: %d, %s\n", m.Slowdown.Count, m.Slowdown.Duration)
	fmt.Fprintf(&b, "paced writes: %d, %s (longest %s)\n", m.Pace.Count, m.Pace.Duration, m.Pace.Longest)
	return b.String()
}

// dbMetrics are the counters the DB updates as it works.
type dbMetrics struct {
	walBytesWritten   atomic.Int64
	walReused         atomic.Int64
	flushCount        atomic.Int64
	flushBytes        atomic.Int64
	flushNanos        atomic.Int64
	compactionCount   atomic.Int64
	trivialMoves      atomic.Int64
	compactionRead    atomic.Int64
	compactionWritten atomic.Int64
	compactionNanos   atomic.Int64
	levelWritten      [NumLevels]atomic.Int64
	stall, pace       waitStats
	slowdown          waitStats
	walSyncs          *histogram // nanoseconds per WAL fsync
	walGroups         *histogram // synced writes per WAL fsync
}

// waitStats counts the waits of one kind of writers' wait: how many
// began, their time in all once over, and the longest.
type waitStats struct {
	count, nanos, longest atomic.Int64
}

// done records the end of a wait that began at start (and was counted).
func (w *waitStats) done(start time.Time) {
	d := int64(time.Since(start))
	w.nanos.Add(d)
	for {
		longest := w.longest.Load()
		if d <= longest || w.longest.CompareAndSwap(longest, d) {
			return
		}
	}
}

func (m *dbMetrics) init() {
	m.walSyncs = newSyncLatencyHistogram()
	m.walGroups = newGroupSizeHistogram()
}

// recordSync is the WAL writers' OnSync. An fsync nobody waited for (a
// segment's last, when it is closed) is no commit group.
func (m *dbMetrics) recordSync(d time.Duration, waiters int) {
	m.walSyncs.observe(int64(d))
	if waiters > 0 {
		m.walGroups.observe(int64(waiters))
	}
}

func (m *dbMetrics) recordCompaction(c *compaction, outputs []*fileMetadata, d time.Duration) {
	if c.trivialMove {
		m.trivialMoves.Add(1)
		return
	}
	m.compactionCount.Add(1)
	m.compactionRead.Add(sumSizes(c.allInputs()))
	written := sumSizes(outputs)
	m.compactionWritten.Add(written)
	m.levelWritten[c.outputLevel].Add(written)
	m.compactionNanos.Add(int64(d))
}

// Metrics returns the DB's current metrics.
func (db *DB) Metrics() Metrics {
	var m Metrics
	db.mu.Lock()
	v := db.versions.current
	scores := db.levelScores(v)
	for level := range v.levels {
		m.Levels[level] = LevelMetrics{
			Files:        len(v.levels[level]),
			Bytes:        v.levelBytes(level),
			Score:        scores[level],
			BytesWritten: db.metrics.levelWritten[level].Load(),
		}
	}
	m.Compaction.Debt = db.compactionDebt(v)
	if db.compacting {
		m.Compaction.Running = 1
	}
	m.MemTable.Size = int64(db.mem.mutable.Size())
	m.MemTable.Immutable = len(db.mem.queue)
	m.Snapshots = db.snapshots.l.Len()
	logs := map[uint64]bool{db.mem.mutable.logNum: true}
	for _, mt := range db.mem.queue {
		logs[mt.logNum] = true
	}
	db.mu.Unlock()
	for num := range logs {
		if info, err := db.fs.Stat(makeFilename(db.dir, fileTypeLog, num)); err == nil {
			m.WAL.Files++
			m.WAL.Bytes += info.Size()
		}
	}
	m.WAL.BytesWritten = db.metrics.walBytesWritten.Load()
	m.WAL.Reused = db.metrics.walReused.Load()
	m.WAL.SyncLatency = db.metrics.walSyncs.snapshot()
	m.WAL.GroupSize = db.metrics.walGroups.snapshot()
	m.Levels[0].BytesWritten = db.metrics.flushBytes.Load()
	m.Flush.Count = db.metrics.flushCount.Load()
	m.Flush.BytesWritten = db.metrics.flushBytes.Load()
	m.Flush.Duration = time.Duration(db.metrics.flushNanos.Load())
	m.Compaction.Count = db.metrics.compactionCount.Load()
	m.Compaction.TrivialMoves = db.metrics.trivialMoves.Load()
	m.Compaction.BytesRead = db.metrics.compactionRead.Load()
	m.Compaction.BytesWritten = db.metrics.compactionWritten.Load()
	m.Compaction.Duration = time.Duration(db.metrics.compactionNanos.Load())
	if db.blockCache != nil {
		cm := db.blockCache.Metrics()
		m.BlockCache.Hits, m.BlockCache.Misses, m.BlockCache.Size, m.BlockCache.Count = cm.Hits, cm.Misses, cm.Size, cm.Count
		m.BlockCache.Mapped = cm.Mapped
	}
	m.TableCache.Hits = db.tableCache.hits.Load()
	m.TableCache.Misses = db.tableCache.misses.Load()
	m.TableCache.Open = db.tableCache.openCount()
	m.Stall.Count = db.metrics.stall.count.Load()
	m.Stall.Duration = time.Duration(db.metrics.stall.nanos.Load())
	m.Stall.Longest = time.Duration(db.metrics.stall.longest.Load())
	m.Pace.Count = db.metrics.pace.count.Load()
	m.Pace.Duration = time.Duration(db.metrics.pace.nanos.Load())
	m.Pace.Longest = time.Duration(db.metrics.pace.longest.Load())
	m.Slowdown.Count = db.metrics.slowdown.count.Load()
	m.Slowdown.Duration = time.Duration(db.metrics.slowdown.nanos.Load())
	m.VisibleSeqNum = db.visibleSeq.Load()
	return m
}
