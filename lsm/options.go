package lsm

import (
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
)

// NumLevels is the number of levels of the tree: L0 (overlapping tables
// flushed from memtables) and L1 to L6 (each a sorted run of tables).
const NumLevels = 7

// Compression selects how sstable blocks are compressed.
type Compression = sstable.Compression

// The compressions a DB can use for its sstable blocks.
const (
	DefaultCompression = sstable.DefaultCompression // S2
	NoCompression      = sstable.NoCompression
	S2Compression      = sstable.S2Compression
	ZstdCompression    = sstable.ZstdCompression
)

// Options configures a DB. The zero value of every field means its default.
type Options struct {
	// MemTableSize is the size of a memtable's arena: once full, the
	// memtable is rotated and flushed to L0. Default 64 MiB. A DB's first
	// memtable gets InitialMemTableSize, and each next one twice its
	// predecessor's, up to MemTableSize. The arenas
	// take at most MemTableStopWritesThreshold+1 times this (the mutable
	// one and those waiting for flush), plus flushed memtables' while
	// readers still hold them; they are outside the Go heap, and cost
	// memory as they fill.
	MemTableSize int64
	// InitialMemTableSize is the arena size of the first memtable a DB
	// opens with (capped at MemTableSize). Default 256 KiB, as in Pebble:
	// a DB that writes little holds little memory, and small memtables are
	// quicker to insert into (fewer cache misses per search). As in Pebble
	// too, they are not flushed one by one: a flush waits until the queued
	// ones add up to half of MemTableSize (at most 4 MiB) and writes them
	// to one table. Negative starts at MemTableSize, which keeps a small
	// data set in the memtable rather than in tables, where scans of it
	// are slower (decoding blocks, merging levels).
	InitialMemTableSize int64
	// MemTableStopWritesThreshold is how many full memtables' worth of
	// memtables (MemTableSize bytes each) may wait for their flush before
	// writes stall: several small memtables of a young DB count as the
	// full one they add up to. Default 1: the mutable memtable and one
	// flushing, the two arenas Pebble's default of 2 allows (its count
	// takes in the mutable one). Writes that would fill the mutable
	// memtable before the flush ahead of it is done are paced to the
	// flush rather than stalled at the end (pace.go).
	MemTableStopWritesThreshold int
	// CacheSize is the capacity of the block cache shared by all sstables.
	// Default 32 MiB; negative disables it.
	CacheSize int64
	// BloomBitsPerKey sizes the sstable bloom filters. Default 10;
	// negative means no filters.
	BloomBitsPerKey int
	// MaxOpenFiles bounds the table cache of open sstables. Default 1000.
	MaxOpenFiles int
	// BlockSize is the uncompressed size of sstable data blocks. Default 4096.
	BlockSize int
	// Compression is applied to sstable blocks. Default S2.
	Compression Compression
	// L0CompactionThreshold is the number of L0 tables that triggers an L0
	// compaction. Default 4.
	L0CompactionThreshold int
	// L0StopWritesThreshold is the number of L0 tables at which writes
	// stall until compaction catches up. Default 12.
	L0StopWritesThreshold int
	// L0SlowdownWritesThreshold is the number of L0 tables from which
	// writes are slowed to about 16 MiB/s in all, so that compaction
	// catches up before L0 reaches L0StopWritesThreshold: many short waits
	// instead of one long stall (LevelDB's slowdown trigger, RocksDB's
	// delayed writes). Default 8, and never below L0CompactionThreshold;
	// at or above L0StopWritesThreshold, writes are never slowed.
	L0SlowdownWritesThreshold int
	// LBaseMaxBytes is the target size of L1; each deeper level is
	// LevelMultiplier times larger. Default 64 MiB.
	LBaseMaxBytes int64
	// LevelMultiplier is the fan-out between levels. Default 10.
	LevelMultiplier int
	// TargetFileSize is the size at which compaction cuts its output
	// tables. Default 4 MiB.
	TargetFileSize int64
	// Split, if set, returns the length of a key's prefix (for Tabula, the
	// clustered-index key up to and including the PartitionKey). Sstables
	// then also filter on prefixes, and an iterator whose bounds lie within
	// one prefix skips tables that cannot hold it. Split(p) must return
	// len(p) for every prefix p it produces.
	Split func(key []byte) int
	// DropKey, if set, is asked by flushes and compactions about every user
	// key they write; keys for which it returns true are dropped with all
	// their versions. It lets a layer above delete a whole key range
	// (Tabula: a deleted table) in O(1) and reclaim the space later. It
	// must be stable (once true for a key, always true) and only say true
	// for keys no reader needs, including readers on snapshots. It is
	// called from background goroutines.
	DropKey func(key []byte) bool
	// RecycledWALSegments is how many retired WAL segments' files the DB
	// keeps for new segments to write over (logRecycler), and a segment
	// with no such file keeps zeros written ahead of its end to write
	// over (walZeroAhead). Default 2; negative keeps none and writes no
	// zeros: every segment is a new file, appended to, so that Verify
	// can tell damage to a segment's last record from a torn write.
	RecycledWALSegments int
	// FS is the filesystem the DB writes through. Default: the OS.
	FS vfs.FS
	// DisableBackgroundCompactions stops automatic compactions (flushes
	// still run). Compact still works. Writes then never stall on
	// L0StopWritesThreshold, as nothing automatic would end the stall. For
	// tests that need a fixed shape.
	DisableBackgroundCompactions bool
}

// withDefaults returns a copy of o (which may be nil) with every zero field
// set to its default.
func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	setDefault(&r.MemTableSize, 64<<20)
	setDefault(&r.InitialMemTableSize, 256<<10)
	if r.InitialMemTableSize < 0 || r.InitialMemTableSize > r.MemTableSize {
		r.InitialMemTableSize = r.MemTableSize
	}
	setDefault(&r.MemTableStopWritesThreshold, 1)
	setDefault(&r.RecycledWALSegments, 2)
	setDefault(&r.CacheSize, 32<<20)
	setDefault(&r.BloomBitsPerKey, 10)
	setDefault(&r.MaxOpenFiles, 1000)
	setDefault(&r.BlockSize, 4096)
	setDefault(&r.L0CompactionThreshold, 4)
	setDefault(&r.L0StopWritesThreshold, 12)
	setDefault(&r.LBaseMaxBytes, 64<<20)
	setDefault(&r.LevelMultiplier, 10)
	setDefault(&r.TargetFileSize, 4<<20)
	if r.L0StopWritesThreshold < r.L0CompactionThreshold {
		r.L0StopWritesThreshold = r.L0CompactionThreshold
	}
	setDefault(&r.L0SlowdownWritesThreshold, 8)
	r.L0SlowdownWritesThreshold = max(r.L0SlowdownWritesThreshold, r.L0CompactionThreshold)
	if r.MaxOpenFiles < 16 {
		r.MaxOpenFiles = 16
	}
	if r.FS == nil {
		r.FS = vfs.Default()
	}
	return r
}

func setDefault[T int | int64](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

func (o *Options) writerOptions() sstable.WriterOptions {
	return sstable.WriterOptions{
		BlockSize:       o.BlockSize,
		Compression:     o.Compression,
		BloomBitsPerKey: o.BloomBitsPerKey,
		Split:           o.Split,
	}
}

// levelMaxBytes is the size above which a level (1 to NumLevels-2) wants
// compaction into the next.
func (o *Options) levelMaxBytes(level int) int64 {
	n := o.LBaseMaxBytes
	for l := 1; l < level; l++ {
		n *= int64(o.LevelMultiplier)
	}
	return n
}

// WriteOptions control a single write.
type WriteOptions struct {
	// Sync makes the write durable (fsynced to the WAL) before it is
	// acknowledged. A nil *WriteOptions means Sync: true. An unsynced
	// write reaches the kernel within about a millisecond (at once when
	// its WAL block fills, or a synced write follows it): a crash of the
	// process may lose the unsynced writes of that last millisecond, a
	// crash of the machine every unsynced write since the last sync.
	Sync bool
}

// IterOptions bound an iterator. A nil *IterOptions means the whole key space.
type IterOptions struct {
	// LowerBound is the inclusive lower bound; nil means none.
	LowerBound []byte
	// UpperBound is the exclusive upper bound; nil means none.
	UpperBound []byte
}
