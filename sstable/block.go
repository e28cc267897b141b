package sstable

import (
	"encoding/binary"
)

// A block is a sequence of entries followed by a restart array:
//
//	entry*  restart[0] ... restart[n-1]  n
//
// where each entry is
//
//	shared uvarint | unshared uvarint | valueLen uvarint | key[shared:] | value
//
// shared is how many leading bytes the entry's key has in common with the
// previous entry's key. Every RestartInterval entries the prefix compression
// restarts (shared = 0) and the entry's offset is recorded as a little-endian
// uint32 in the restart array, so a reader can binary search the restart
// points and decode forward from one. n, the number of restarts, is a
// little-endian uint32 too.
//
// Data and index blocks hold encoded internal keys in InternalCompare order;
// the properties block holds property names in bytewise order.

// blockBuilder accumulates the entries of one block. It is reused for every
// block a Writer builds, so its buffers stop growing after the first few.
type blockBuilder struct {
	restartInterval int
	buf             []byte
	restarts        []uint32
	lastKey         []byte
	counter         int // entries since the last restart
	entries         int
}

func (b *blockBuilder) reset() {
	b.buf = b.buf[:0]
	b.restarts = b.restarts[:0]
	b.lastKey = b.lastKey[:0]
	b.counter = 0
	b.entries = 0
}

func (b *blockBuilder) empty() bool { return b.entries == 0 }

// add appends an entry; key must sort after the previous key.
func (b *blockBuilder) add(key, value []byte) {
	shared := 0
	if b.counter < b.restartInterval && b.entries > 0 {
		n := min(len(key), len(b.lastKey))
		for shared < n && key[shared] == b.lastKey[shared] {
			shared++
		}
	} else {
		b.restarts = append(b.restarts, uint32(len(b.buf)))
		b.counter = 0
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)-shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(value)))
	b.buf = append(b.buf, key[shared:]...)
	b.buf = append(b.buf, value...)
	b.lastKey = append(b.lastKey[:0], key...)
	b.counter++
	b.entries++
}

// estimatedSize is the size finish would return now.
func (b *blockBuilder) estimatedSize() int {
	return len(b.buf) + 4*len(b.restarts) + 4
}

// entrySize bounds the bytes add(key, value) appends.
func entrySize(keyLen, valueLen int) int {
	return 3*binary.MaxVarintLen32 + keyLen + valueLen
}

// finish appends the restart array and returns the block's bytes, which
// stay valid until the next reset.
func (b *blockBuilder) finish() []byte {
	for _, r := range b.restarts {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.restarts)))
	return b.buf
}
