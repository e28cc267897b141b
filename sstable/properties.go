package sstable

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/internal/base"
)

// Properties describe a table. They are written in the properties block
// and read back whole by NewReader.
type Properties struct {
	// NumEntries counts every entry, NumDeletions those of KindDelete.
	NumEntries   uint64
	NumDeletions uint64
	// RawKeySize and RawValueSize sum the encoded internal keys and the
	// values before prefix compression and block compression.
	RawKeySize   uint64
	RawValueSize uint64
	// DataSize, IndexSize and FilterSize are the bytes the data blocks,
	// the index block and the filter block take in the file, trailers
	// included.
	DataSize      uint64
	IndexSize     uint64
	FilterSize    uint64
	NumDataBlocks uint64
	// MaxBlockSize is the largest uncompressed size of a data or index
	// block: readers refuse to decompress anything larger.
	MaxBlockSize uint64
	// Smallest and Largest are the first and last internal keys; zero
	// for an empty table.
	Smallest, Largest       base.InternalKey
	SmallestSeq, LargestSeq base.SeqNum
	// Compression is the compression the writer was configured with;
	// blocks it did not shrink by at least 1/8 are stored uncompressed.
	Compression Compression
	// BloomBitsPerKey is the filter density; 0 when there is no filter.
	BloomBitsPerKey int
	// FilterKeys counts the hashes in the filter: distinct user keys plus
	// distinct prefixes.
	FilterKeys uint64
	// PrefixFilter says the filter also holds the Split prefix of every
	// key, so MayContainPrefix can answer.
	PrefixFilter bool
}

// Property names as stored, in the bytewise order the block needs.
const (
	propBlockMaxSize    = "tabula.block.max-size"
	propBloomBitsPerKey = "tabula.bloom.bits-per-key"
	propCompression     = "tabula.compression"
	propDataBlocks      = "tabula.data.blocks"
	propDataSize        = "tabula.data.size"
	propDeletions       = "tabula.deletions"
	propEntries         = "tabula.entries"
	propFilterKeys      = "tabula.filter.keys"
	propFilterSize      = "tabula.filter.size"
	propIndexSize       = "tabula.index.size"
	propKeyLargest      = "tabula.key.largest"
	propKeySmallest     = "tabula.key.smallest"
	propPrefixFilter    = "tabula.prefix-filter"
	propRawKeySize      = "tabula.raw.key.size"
	propRawValueSize    = "tabula.raw.value.size"
	propSeqLargest      = "tabula.seq.largest"
	propSeqSmallest     = "tabula.seq.smallest"
)

// encode returns the properties block: one entry per property, the name as
// key, numbers as uvarints, keys as encoded internal keys, booleans as one
// byte 0 or 1.
func (p *Properties) encode() []byte {
	b := blockBuilder{restartInterval: defaultRestartInterval}
	u := func(name string, v uint64) { b.add([]byte(name), binary.AppendUvarint(nil, v)) }
	u(propBlockMaxSize, p.MaxBlockSize)
	u(propBloomBitsPerKey, uint64(p.BloomBitsPerKey))
	u(propCompression, uint64(p.Compression))
	u(propDataBlocks, p.NumDataBlocks)
	u(propDataSize, p.DataSize)
	u(propDeletions, p.NumDeletions)
	u(propEntries, p.NumEntries)
	u(propFilterKeys, p.FilterKeys)
	u(propFilterSize, p.FilterSize)
	u(propIndexSize, p.IndexSize)
	var largest, smallest []byte // empty for an empty table
	if p.NumEntries > 0 {
		largest, smallest = p.Largest.AppendEncoded(nil), p.Smallest.AppendEncoded(nil)
	}
	b.add([]byte(propKeyLargest), largest)
	b.add([]byte(propKeySmallest), smallest)
	prefix := uint64(0)
	if p.PrefixFilter {
		prefix = 1
	}
	u(propPrefixFilter, prefix)
	u(propRawKeySize, p.RawKeySize)
	u(propRawValueSize, p.RawValueSize)
	u(propSeqLargest, uint64(p.LargestSeq))
	u(propSeqSmallest, uint64(p.SmallestSeq))
	return b.finish()
}

// decodeProperties parses a properties block. Unknown names are skipped so
// that a later writer may add properties without a new format version.
func decodeProperties(data []byte) (Properties, error) {
	var p Properties
	var it blockIter
	if err := it.init(data); err != nil {
		return p, err
	}
	bad := func(name string) error {
		return fmt.Errorf("property %s: bad value: %w", name, base.ErrCorruption)
	}
	for ok := it.first(); ok; ok = it.next() {
		name, val := string(it.key), it.val
		var num uint64
		switch name {
		case propKeyLargest, propKeySmallest:
		default:
			var n int
			num, n = binary.Uvarint(val)
			if n <= 0 || n != len(val) {
				return p, bad(name)
			}
		}
		switch name {
		case propBlockMaxSize:
			if num > maxBlockLen {
				return p, bad(name)
			}
			p.MaxBlockSize = num
		case propBloomBitsPerKey:
			if num > 1<<16 {
				return p, bad(name)
			}
			p.BloomBitsPerKey = int(num)
		case propCompression:
			if num > uint64(ZstdCompression) {
				return p, bad(name)
			}
			p.Compression = Compression(num)
		case propDataBlocks:
			p.NumDataBlocks = num
		case propDataSize:
			p.DataSize = num
		case propDeletions:
			p.NumDeletions = num
		case propEntries:
			p.NumEntries = num
		case propFilterKeys:
			p.FilterKeys = num
		case propFilterSize:
			p.FilterSize = num
		case propIndexSize:
			p.IndexSize = num
		case propKeyLargest, propKeySmallest:
			var k base.InternalKey
			if len(val) > 0 {
				dk, ok := base.DecodeInternalKey(val)
				if !ok {
					return p, bad(name)
				}
				k = dk.Clone()
			}
			if name == propKeyLargest {
				p.Largest = k
			} else {
				p.Smallest = k
			}
		case propPrefixFilter:
			if num > 1 {
				return p, bad(name)
			}
			p.PrefixFilter = num == 1
		case propRawKeySize:
			p.RawKeySize = num
		case propRawValueSize:
			p.RawValueSize = num
		case propSeqLargest:
			p.LargestSeq = base.SeqNum(num)
		case propSeqSmallest:
			p.SmallestSeq = base.SeqNum(num)
		}
	}
	if it.err != nil {
		return p, fmt.Errorf("properties block: %w", it.err)
	}
	return p, nil
}
