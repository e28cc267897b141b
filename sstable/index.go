package sstable

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/internal/manual"
)

// index is the decoded index block, kept in memory by a Reader for as long
// as the table is open: for every data block, a separator key (>= every key
// of the block and < every key of the next), its trailer and the block's
// handle. An open table's index is most of what it costs in memory, and a
// store has hundreds of tables open, so it is held compactly, in parallel
// arrays in one buffer outside the Go heap (manual): the user keys' common
// prefix (all keys of a table often share one: the account and table of
// the clustered index) once, then only what follows it in each key.
//
// To make the binary search cheap, the 8 bytes that follow the common
// prefix in each key are kept as a big-endian integer in heads, a dense
// array in which most steps of the search are decided by one integer
// comparison instead of a byte comparison in a separate buffer.
type index struct {
	common   []byte   // common prefix of all separator user keys
	suffixes []byte   // each separator user key past common, concatenated
	ends     []uint32 // ends[i]: end of key i's suffix in suffixes
	heads    []uint64 // heads[i]: head(suffix i)
	trailers []uint64 // trailers[i]: separator i's base.Trailer
	offsets  []uint64 // block i's handle: offsets[i], lengths[i]
	lengths  []uint32
	mem      manual.Buf // where all of the above live
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

func (x *index) len() int { return len(x.ends) }

// suffix returns separator i's user key past the common prefix.
func (x *index) suffix(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = x.ends[i-1]
	}
	return x.suffixes[start:x.ends[i]:x.ends[i]]
}

// handle returns data block i's handle.
func (x *index) handle(i int) blockHandle {
	return blockHandle{offset: x.offsets[i], length: uint64(x.lengths[i])}
}

// separator returns separator i, its user key appended to dst.
func (x *index) separator(i int, dst []byte) base.InternalKey {
	uk := append(append(dst, x.common...), x.suffix(i)...)
	return base.InternalKey{UserKey: uk, Trailer: base.Trailer(x.trailers[i])}
}

// compareUserKey compares separator i's user key with k, bytewise.
func (x *index) compareUserKey(i int, k []byte) int {
	n := min(len(k), len(x.common))
	if c := bytes.Compare(x.common, k[:n]); c != 0 {
		return c
	}
	return bytes.Compare(x.suffix(i), k[n:])
}

// free returns the index's memory; the index must not be used afterwards.
func (x *index) free() {
	x.mem.Free()
	*x = index{}
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
		return x.len()
	}
	h := head(uk[len(x.common):])
	lo, hi := 0, x.len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		var c int
		switch hm := x.heads[mid]; {
		case hm < h:
			c = -1
		case hm > h:
			c = 1
		default:
			c = bytes.Compare(x.suffix(mid), uk[len(x.common):])
		}
		if c < 0 || (c == 0 && base.Trailer(x.trailers[mid]) > search.Trailer) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// decodeIndex parses an index block whose data block handles must all end
// at or before dataEnd, and whose separators must strictly increase. It
// reads the block twice: once to check it and size the index, once to
// fill it.
func decodeIndex(data []byte, dataEnd uint64) (index, error) {
	var x index
	var it blockIter
	if err := it.init(data); err != nil {
		return x, err
	}
	var first, prev base.InternalKey
	var n, keyBytes int
	for ok := it.first(); ok; ok = it.next() {
		sep, ok := base.DecodeInternalKey(it.key)
		if !ok {
			return x, fmt.Errorf("index entry %d: key too short: %w", n, base.ErrCorruption)
		}
		h, ok := decodeBlockHandle(it.val)
		if !ok || !handleWithin(h, dataEnd) || h.length > math.MaxUint32 {
			return x, fmt.Errorf("index entry %d: bad block handle: %w", n, base.ErrCorruption)
		}
		if n > 0 && base.InternalCompare(prev, sep) >= 0 {
			return x, fmt.Errorf("index entry %d: separators out of order: %w", n, base.ErrCorruption)
		}
		if keyBytes += len(sep.UserKey); keyBytes < 0 || int64(keyBytes) > math.MaxUint32 { // < 0: past a 32-bit int
			return x, fmt.Errorf("index entry %d: index too large: %w", n, base.ErrCorruption)
		}
		// The iterator reuses its key buffer: keep copies.
		prev = base.InternalKey{UserKey: append(prev.UserKey[:0], sep.UserKey...), Trailer: sep.Trailer}
		if n == 0 {
			first = base.InternalKey{UserKey: slices.Clone(sep.UserKey)}
		}
		n++
	}
	if it.err != nil {
		return x, it.err
	}
	if n == 0 {
		return x, nil
	}
	// Separators are sorted, so the first and last share the prefix
	// common to all.
	c := 0
	for c < len(first.UserKey) && c < len(prev.UserKey) && first.UserKey[c] == prev.UserKey[c] {
		c++
	}
	x.mem = manual.New(8*3*n + 4*2*n + keyBytes - (n-1)*c)
	rest := x.mem.Bytes()
	x.heads, rest = manual.Uint64s(rest, n)
	x.trailers, rest = manual.Uint64s(rest, n)
	x.offsets, rest = manual.Uint64s(rest, n)
	x.ends, rest = manual.Uint32s(rest, n)
	x.lengths, rest = manual.Uint32s(rest, n)
	x.common, x.suffixes = rest[:c:c], rest[c:c]
	copy(x.common, first.UserKey)
	i := 0
	for ok := it.first(); ok; ok = it.next() {
		sep, _ := base.DecodeInternalKey(it.key)
		h, _ := decodeBlockHandle(it.val)
		suffix := sep.UserKey[c:]
		x.suffixes = append(x.suffixes, suffix...)
		x.ends[i] = uint32(len(x.suffixes))
		x.heads[i] = head(suffix)
		x.trailers[i] = uint64(sep.Trailer)
		x.offsets[i], x.lengths[i] = h.offset, uint32(h.length)
		i++
	}
	return x, nil
}
