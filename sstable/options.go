package sstable

import (
	"bufio"
	"fmt"
)

// Compression selects how a Writer compresses blocks. The zero value is
// DefaultCompression, which means S2: fast enough that it rarely costs more
// than it saves in I/O.
type Compression uint8

// The compressions a Writer can use. The values are not stored on disk: the
// block trailer records the codec actually used for each block (see
// blockType), and the properties record the configured one.
const (
	DefaultCompression Compression = iota
	NoCompression
	S2Compression
	ZstdCompression
)

func (c Compression) String() string {
	switch c {
	case DefaultCompression:
		return "default"
	case NoCompression:
		return "none"
	case S2Compression:
		return "s2"
	case ZstdCompression:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// blockType returns the trailer byte for blocks compressed with c.
func (c Compression) blockType() byte {
	switch c {
	case DefaultCompression, S2Compression:
		return blockTypeS2
	case ZstdCompression:
		return blockTypeZstd
	}
	return blockTypeNone
}

// Defaults for the zero values of WriterOptions.
const (
	defaultBlockSize       = 4096
	defaultRestartInterval = 16
	defaultBloomBitsPerKey = 10
)

// WriterOptions configures a Writer. The zero value of every field means
// its default.
type WriterOptions struct {
	// BlockSize is the uncompressed size at which a data block is cut.
	// Default 4096. A block holds at least one entry, so a block with one
	// large value may be bigger.
	BlockSize int
	// RestartInterval is the number of entries between restart points of
	// a data block. Default 16. Smaller intervals make seeks faster and
	// blocks bigger.
	RestartInterval int
	// Compression is the block compression. Default S2.
	Compression Compression
	// BloomBitsPerKey sizes the bloom filter. Default 10 (about 1% false
	// positives); negative means no filter block.
	BloomBitsPerKey int
	// Split, if set, returns the length of the prefix of a user key that
	// scans commonly bound themselves to (the partition key); every
	// distinct prefix is added to the filter so that MayContainPrefix can
	// rule a table out of such a scan. Values outside [0, len(userKey)] are
	// clamped.
	Split func(userKey []byte) int
	// Scratch, when set, lends the Writer memory that Writers before it
	// grew (Scratch); nil means the Writer allocates its own.
	Scratch *Scratch
}

// Scratch is memory a Writer reuses from the Writers before it: its output
// buffer (256 KiB), its filter's key hashes (8 bytes a key), its index
// block, and its data block and compression buffers. A caller that writes
// tables one after another, as a DB's flushes and compactions do, keeps
// one Scratch per table being written and passes it in WriterOptions;
// otherwise every table allocates all of them afresh, and grows the
// hashes and the index by doubling: most of a DB's garbage under writes.
// A Writer uses its Scratch until Close returns (or until it is
// abandoned), so a Scratch serves one Writer at a time. The zero value is
// ready to use.
type Scratch struct {
	out                      *bufio.Writer
	hashes                   []uint64
	block, index, compressed []byte
	indexRestarts            []uint32
}

func (o WriterOptions) withDefaults() WriterOptions {
	if o.BlockSize <= 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.RestartInterval <= 0 {
		o.RestartInterval = defaultRestartInterval
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = defaultBloomBitsPerKey
	}
	if o.Compression > ZstdCompression {
		o.Compression = DefaultCompression
	}
	return o
}

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// Cache is the block cache, usually shared by every Reader of a DB;
	// nil means data blocks are read from the file every time.
	Cache *Cache
	// FileNum identifies the table: it namespaces its blocks in the cache
	// and names the table in errors ("sstable 000123: ...").
	FileNum uint64
}
