package sstable

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/internal/base"
)

// index is the decoded index block, kept in memory by a Reader: for every
// data block, a separator key (>= every key of the block and < every key of
// the next) and the block's handle. Separator user keys are concatenated in
// one buffer so that the whole index is a few allocations.
//
// To make the binary search cheap, the user keys' common prefix is noted
// once (all keys of a table often share one: the account and table of the
// clustered index), and the 8 bytes that follow it in each key are kept as
// a big-endian integer in heads, a dense array in which most steps of the
// search are decided by one integer comparison instead of a byte
// comparison in a separate buffer.
type index struct {
	keys    []byte
	entries []indexEntry
	common  []byte   // common prefix of all separator user keys
	heads   []uint64 // heads[i]: head(userKey(i)[len(common):])
}

// head packs the first 8 bytes of b, zero padded, into an integer whose
// order agrees with bytewise order (ties must be broken by the bytes).
func head(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var buf [8]byte
	copy(buf[:], b)
	return binary.BigEndian.Uint64(buf[:])
}

type indexEntry struct {
	keyStart, keyEnd uint32
	trailer          base.Trailer
	handle           blockHandle
}

func (x *index) len() int { return len(x.entries) }

// userKey returns the user key of block i's separator.
func (x *index) userKey(i int) []byte {
	e := &x.entries[i]
	return x.keys[e.keyStart:e.keyEnd:e.keyEnd]
}

// seek returns the first block whose separator is >= search, or len() if
// every separator is smaller (then no key of the table is >= search).
func (x *index) seek(search base.InternalKey) int {
	uk := search.UserKey
	if !bytes.HasPrefix(uk, x.common) {
		// uk sorts before or after every separator.
		if bytes.Compare(uk, x.common) < 0 {
			return 0
		}
		return len(x.entries)
	}
	h := head(uk[len(x.common):])
	lo, hi := 0, len(x.entries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		var c int
		switch hm := x.heads[mid]; {
		case hm < h:
			c = -1
		case hm > h:
			c = 1
		default:
			e := &x.entries[mid]
			c = bytes.Compare(x.keys[e.keyStart:e.keyEnd], uk)
		}
		if c < 0 || (c == 0 && x.entries[mid].trailer > search.Trailer) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// decodeIndex parses an index block whose data block handles must all end
// at or before dataEnd, and whose separators must strictly increase.
func decodeIndex(data []byte, dataEnd uint64) (index, error) {
	var x index
	var it blockIter
	if err := it.init(data); err != nil {
		return x, err
	}
	var prev base.InternalKey
	for ok := it.first(); ok; ok = it.next() {
		n := len(x.entries)
		sep, ok := base.DecodeInternalKey(it.key)
		if !ok {
			return x, fmt.Errorf("index entry %d: key too short: %w", n, base.ErrCorruption)
		}
		h, ok := decodeBlockHandle(it.val)
		if !ok || !handleWithin(h, dataEnd) {
			return x, fmt.Errorf("index entry %d: bad block handle: %w", n, base.ErrCorruption)
		}
		if n > 0 && base.InternalCompare(prev, sep) >= 0 {
			return x, fmt.Errorf("index entry %d: separators out of order: %w", n, base.ErrCorruption)
		}
		if uint64(len(x.keys))+uint64(len(sep.UserKey)) > 1<<32-1 {
			return x, fmt.Errorf("index entry %d: index too large: %w", n, base.ErrCorruption)
		}
		start := uint32(len(x.keys))
		x.keys = append(x.keys, sep.UserKey...)
		x.entries = append(x.entries, indexEntry{
			keyStart: start, keyEnd: uint32(len(x.keys)), trailer: sep.Trailer, handle: h,
		})
		prev = base.InternalKey{UserKey: x.userKey(n), Trailer: sep.Trailer}
	}
	if it.err != nil {
		return x, it.err
	}
	if n := len(x.entries); n > 0 {
		// Separators are sorted, so the first and last share the
		// prefix common to all.
		first, last := x.userKey(0), x.userKey(n-1)
		c := 0
		for c < len(first) && c < len(last) && first[c] == last[c] {
			c++
		}
		x.common = first[:c:c]
		x.heads = make([]uint64, n)
		for i := range x.heads {
			x.heads[i] = head(x.userKey(i)[c:])
		}
	}
	return x, nil
}
