package lsm

import (
	"fmt"
	"math"
	"strings"

	"github.com/tabuladb/tabula/memtable"
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

// Options configures a DB. The zero value of every field means its
// default; Open refuses a value out of its field's range (Validate).
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
	// stall until compaction catches up. Default 36.
	L0StopWritesThreshold int
	// L0SlowdownWritesThreshold is the number of L0 tables from which
	// writes are slowed to about 16 MiB/s in all, so that compaction
	// catches up before L0 reaches L0StopWritesThreshold: many short waits
	// instead of one long stall (LevelDB's slowdown trigger, RocksDB's
	// delayed writes). Default 20, and never below L0CompactionThreshold;
	// at or above L0StopWritesThreshold, writes are never slowed.
	//
	// The defaults are RocksDB's. With LevelDB's, 8 and 12, a 20-million-
	// key fill slept in the slowdown for 40-45 s of its 127-132; with
	// these, 16-17 s of 96-106, and it wrote less (an L0 compaction merges
	// more tables into L1 at once) but left more to compact after it
	// (bench -large). L0 then holds up to 20 tables during such a load,
	// each one more filter for a point read to probe.
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
	setDefault(&r.L0StopWritesThreshold, 36)
	setDefault(&r.LBaseMaxBytes, 64<<20)
	setDefault(&r.LevelMultiplier, 10)
	setDefault(&r.TargetFileSize, 4<<20)
	setDefault(&r.L0SlowdownWritesThreshold, 20)
	// Raised, not refused, as documented; negative values are left for
	// validate to refuse.
	if r.L0StopWritesThreshold > 0 {
		r.L0StopWritesThreshold = max(r.L0StopWritesThreshold, r.L0CompactionThreshold)
	}
	if r.L0SlowdownWritesThreshold > 0 {
		r.L0SlowdownWritesThreshold = max(r.L0SlowdownWritesThreshold, r.L0CompactionThreshold)
	}
	if r.MaxOpenFiles > 0 {
		r.MaxOpenFiles = max(r.MaxOpenFiles, 16)
	}
	if r.FS == nil {
		r.FS = vfs.Default()
	}
	return r
}

// MaxMemTableSize is the largest MemTableSize: a memtable's entries are
// addressed by 32-bit offsets into its arena.
const MaxMemTableSize = memtable.MaxArenaSize

// maxBloomBitsPerKey bounds BloomBitsPerKey, as RocksDB bounds its bloom
// filters' bits per key: past it a filter grows with no gain (its false
// positive rate is already below one in a billion), and a filter's size,
// keys times bits, could overflow.
const maxBloomBitsPerKey = 100

// Validate reports whether Open would accept o (nil means defaults): each
// field, once defaulted, within its range, and the levels' target sizes
// within an int64. The error wraps ErrInvalidOptions and names every
// field out of range.
func (o *Options) Validate() error {
	r := o.withDefaults()
	return r.validate()
}

// validate is Validate on options already defaulted.
func (o *Options) validate() error {
	var bad []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	check(o.MemTableSize > 0 && o.MemTableSize <= MaxMemTableSize,
		"MemTableSize %d is outside [1, %d]", o.MemTableSize, int64(MaxMemTableSize))
	check(o.MemTableStopWritesThreshold > 0,
		"MemTableStopWritesThreshold %d is negative", o.MemTableStopWritesThreshold)
	check(o.BloomBitsPerKey <= maxBloomBitsPerKey,
		"BloomBitsPerKey %d is above %d", o.BloomBitsPerKey, maxBloomBitsPerKey)
	check(o.MaxOpenFiles > 0, "MaxOpenFiles %d is negative", o.MaxOpenFiles)
	check(o.BlockSize > 0 && o.BlockSize <= sstable.MaxBlockSize,
		"BlockSize %d is outside [1, %d]", o.BlockSize, sstable.MaxBlockSize)
	check(o.Compression <= ZstdCompression, "Compression %v is unknown", o.Compression)
	check(o.L0CompactionThreshold > 0, "L0CompactionThreshold %d is negative", o.L0CompactionThreshold)
	check(o.L0StopWritesThreshold > 0, "L0StopWritesThreshold %d is negative", o.L0StopWritesThreshold)
	check(o.L0SlowdownWritesThreshold > 0, "L0SlowdownWritesThreshold %d is negative", o.L0SlowdownWritesThreshold)
	check(o.TargetFileSize > 0, "TargetFileSize %d is negative", o.TargetFileSize)
	check(o.LevelMultiplier >= 2, "LevelMultiplier %d is below 2", o.LevelMultiplier)
	if o.LBaseMaxBytes <= 0 {
		bad = append(bad, fmt.Sprintf("LBaseMaxBytes %d is negative", o.LBaseMaxBytes))
	} else if o.LevelMultiplier >= 2 {
		size := o.LBaseMaxBytes
		for l := 2; l < NumLevels-1 && size > 0; l++ {
			if size > math.MaxInt64/int64(o.LevelMultiplier) {
				size = -1
			} else {
				size *= int64(o.LevelMultiplier)
			}
		}
		check(size > 0, "LBaseMaxBytes %d times LevelMultiplier %d to the power %d overflows an int64",
			o.LBaseMaxBytes, o.LevelMultiplier, NumLevels-3)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(bad, "; "))
	}
	return nil
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
