package sstable

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/internal/base"
)

// errBlockCorrupt reports a block whose checksum matched but whose contents
// do not decode. Callers wrap it with the file number and block offset.
var errBlockCorrupt = fmt.Errorf("malformed block: %w", base.ErrCorruption)

// blockIter walks the entries of one decoded block, forward and backward.
//
// Forward steps decode the next entry into key, a buffer reused for every
// entry, so stepping allocates nothing once the buffer has grown to the
// longest key. Because keys are prefix compressed, an entry cannot be
// decoded backwards; Prev instead decodes the current restart interval once
// from its restart point, remembering every entry (offset, value and full
// key) on a small stack, and then pops one entry per Prev. A reverse scan
// thus decodes each entry about twice instead of once per preceding entry of
// its interval.
//
// Positions: offset is the current entry, nextOffset the entry after it.
// offset == -1 means before the first entry and offset == restarts means
// after the last; from either, next and prev move back into the block.
type blockIter struct {
	data        []byte
	restarts    int // offset of the restart array: entries end here
	numRestarts int
	offset      int
	nextOffset  int
	key         []byte
	val         []byte
	err         error

	// prevStack holds, bottom to top, the entries of the current restart
	// interval that precede the current entry; their keys are
	// concatenated in prevKeys. Forward moves clear it.
	prevStack []prevEntry
	prevKeys  []byte
}

type prevEntry struct {
	offset, keyStart, keyEnd, valStart, valEnd int32
}

// init points the iterator at block data, before its first entry. The
// buffers of a previous block are kept for reuse.
func (it *blockIter) init(data []byte) error {
	it.data, it.err = nil, nil
	it.restarts, it.numRestarts = 0, 0
	it.key, it.val = it.key[:0], nil
	it.offset, it.nextOffset = -1, 0
	it.clearPrev()
	if len(data) < 4 || len(data) > maxBlockLen {
		return errBlockCorrupt
	}
	n := binary.LittleEndian.Uint32(data[len(data)-4:])
	if uint64(n) > uint64(len(data)-4)/4 {
		return errBlockCorrupt
	}
	restarts := len(data) - 4 - 4*int(n)
	if (n == 0 && restarts != 0) || (n > 0 && binary.LittleEndian.Uint32(data[restarts:]) != 0) {
		return errBlockCorrupt
	}
	it.data, it.restarts, it.numRestarts = data, restarts, int(n)
	return nil
}

func (it *blockIter) clearPrev() {
	it.prevStack = it.prevStack[:0]
	it.prevKeys = it.prevKeys[:0]
}

func (it *blockIter) corrupt() bool {
	it.err = errBlockCorrupt
	it.offset, it.nextOffset = it.restarts, it.restarts
	it.val = nil
	it.clearPrev()
	return false
}

// restartOffset returns the offset of restart point i, or -1 when the
// stored offset is not inside the entries.
func (it *blockIter) restartOffset(i int) int {
	off := int(binary.LittleEndian.Uint32(it.data[it.restarts+4*i:]))
	if off >= it.restarts {
		return -1
	}
	return off
}

// decodeEntry decodes the entry header at off within the entries of data
// (data[:restarts]). The entry's key suffix is data[p:v] and its value
// data[v:end].
func decodeEntry(data []byte, off int) (shared, p, v, end int, ok bool) {
	if off >= 0 && off+3 <= len(data) {
		if a, b, c := data[off], data[off+1], data[off+2]; a|b|c < 0x80 {
			// Every length fits in one byte: the common case.
			p = off + 3
			v = p + int(b)
			end = v + int(c)
			return int(a), p, v, end, end <= len(data)
		}
	}
	return decodeEntrySlow(data, off)
}

func decodeEntrySlow(data []byte, off int) (shared, p, v, end int, ok bool) {
	if off < 0 || off >= len(data) {
		return 0, 0, 0, 0, false
	}
	s, n1 := binary.Uvarint(data[off:])
	if n1 <= 0 {
		return 0, 0, 0, 0, false
	}
	u, n2 := binary.Uvarint(data[off+n1:])
	if n2 <= 0 {
		return 0, 0, 0, 0, false
	}
	l, n3 := binary.Uvarint(data[off+n1+n2:])
	if n3 <= 0 {
		return 0, 0, 0, 0, false
	}
	p = off + n1 + n2 + n3
	rest := uint64(len(data) - p)
	if s > maxBlockLen || u > rest || l > rest-u {
		return 0, 0, 0, 0, false
	}
	v = p + int(u)
	return int(s), p, v, v + int(l), true
}

// compareEncoded orders an encoded internal key (at least TrailerLen bytes)
// against k as InternalCompare would.
func compareEncoded(a []byte, k base.InternalKey) int {
	n := len(a) - base.TrailerLen
	if c := bytes.Compare(a[:n], k.UserKey); c != 0 {
		return c
	}
	t := base.Trailer(binary.LittleEndian.Uint64(a[n:]))
	switch {
	case t > k.Trailer:
		return -1
	case t < k.Trailer:
		return 1
	}
	return 0
}

// restartKey returns the key stored whole at restart point i.
func (it *blockIter) restartKey(i int) ([]byte, bool) {
	off := it.restartOffset(i)
	if off < 0 {
		return nil, false
	}
	shared, p, v, _, ok := decodeEntry(it.data[:it.restarts], off)
	if !ok || shared != 0 || v-p < base.TrailerLen {
		return nil, false
	}
	return it.data[p:v], true
}

// searchRestarts returns the first restart point whose key is >= search,
// or numRestarts if there is none; -1 if the block is malformed.
func (it *blockIter) searchRestarts(search base.InternalKey) int {
	lo, hi := 0, it.numRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		k, ok := it.restartKey(mid)
		if !ok {
			return -1
		}
		if compareEncoded(k, search) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// next moves to the entry after the current one.
func (it *blockIter) next() bool {
	if len(it.prevStack) > 0 {
		it.clearPrev()
	}
	off := it.nextOffset
	entries := it.data[:it.restarts]
	if off >= len(entries) {
		it.offset, it.val = it.restarts, nil
		return false
	}
	var shared, p, v, end int
	// decodeEntry's fast path, inlined by hand for the hottest loop.
	if off+3 <= len(entries) && entries[off]|entries[off+1]|entries[off+2] < 0x80 {
		shared = int(entries[off])
		p = off + 3
		v = p + int(entries[off+1])
		end = v + int(entries[off+2])
		if end > len(entries) {
			return it.corrupt()
		}
	} else {
		var ok bool
		if shared, p, v, end, ok = decodeEntrySlow(entries, off); !ok {
			return it.corrupt()
		}
	}
	if shared > len(it.key) {
		return it.corrupt()
	}
	it.key = append(it.key[:shared], entries[p:v]...)
	it.val = entries[v:end:end]
	it.offset, it.nextOffset = off, end
	return true
}

// first moves to the first entry.
func (it *blockIter) first() bool {
	it.key = it.key[:0]
	it.nextOffset = 0
	return it.next()
}

// last moves to the last entry.
func (it *blockIter) last() bool {
	it.clearPrev()
	it.offset = it.restarts
	return it.prev()
}

// seekGE moves to the first entry >= search.
func (it *blockIter) seekGE(search base.InternalKey) bool {
	i := it.searchRestarts(search)
	if i < 0 {
		return it.corrupt()
	}
	start := 0
	if i > 0 {
		start = it.restartOffset(i - 1)
	}
	it.key = it.key[:0]
	it.nextOffset = start
	for it.next() {
		if len(it.key) < base.TrailerLen {
			return it.corrupt()
		}
		if compareEncoded(it.key, search) >= 0 {
			return true
		}
	}
	return false
}

// seekLT moves to the last entry < search.
func (it *blockIter) seekLT(search base.InternalKey) bool {
	i := it.searchRestarts(search)
	if i < 0 {
		return it.corrupt()
	}
	if i == 0 {
		it.clearPrev()
		it.key, it.val = it.key[:0], nil
		it.offset, it.nextOffset = -1, 0
		return false
	}
	// Every entry < search lies in restart interval i-1 or before, and
	// restart point i-1 itself is < search: decode that interval up to
	// the first entry >= search, remembering it for later Prevs.
	limit := it.restarts
	if i < it.numRestarts {
		limit = it.restartOffset(i)
	}
	if !it.fillPrev(it.restartOffset(i-1), limit, &search) {
		return it.corrupt()
	}
	return it.popPrev()
}

// prev moves to the entry before the current one.
func (it *blockIter) prev() bool {
	if len(it.prevStack) > 0 {
		return it.popPrev()
	}
	off := it.offset
	if off <= 0 {
		it.key, it.val = it.key[:0], nil
		it.offset, it.nextOffset = -1, 0
		return false
	}
	// Find the restart interval holding the entry that ends at off: the
	// last restart point before off.
	lo, hi := 0, it.numRestarts
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		r := it.restartOffset(mid)
		if r < 0 {
			return it.corrupt()
		}
		if r < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || !it.fillPrev(it.restartOffset(lo-1), off, nil) || int(it.prevStack[len(it.prevStack)-1].valEnd) != off {
		return it.corrupt()
	}
	return it.popPrev()
}

// fillPrev decodes the entries from start (a restart point) that begin
// before limit and, if search is set, are < *search, and pushes them onto
// the prev stack. It reports false if the block is malformed or no entry
// qualified.
func (it *blockIter) fillPrev(start, limit int, search *base.InternalKey) bool {
	it.clearPrev()
	if start < 0 || limit < 0 {
		return false
	}
	entries := it.data[:it.restarts]
	for off := start; off < limit; {
		shared, p, v, end, ok := decodeEntry(entries, off)
		if !ok {
			return false
		}
		ks := len(it.prevKeys)
		if n := len(it.prevStack); n > 0 {
			last := it.prevStack[n-1]
			if shared > int(last.keyEnd-last.keyStart) {
				return false
			}
			it.prevKeys = append(it.prevKeys, it.prevKeys[last.keyStart:int(last.keyStart)+shared]...)
		} else if shared != 0 {
			return false
		}
		it.prevKeys = append(it.prevKeys, entries[p:v]...)
		if search != nil {
			k := it.prevKeys[ks:]
			if len(k) < base.TrailerLen {
				return false
			}
			if compareEncoded(k, *search) >= 0 {
				it.prevKeys = it.prevKeys[:ks]
				break
			}
		}
		it.prevStack = append(it.prevStack, prevEntry{
			offset: int32(off), keyStart: int32(ks), keyEnd: int32(len(it.prevKeys)),
			valStart: int32(v), valEnd: int32(end),
		})
		off = end
	}
	return len(it.prevStack) > 0
}

// popPrev makes the top of the prev stack the current entry.
func (it *blockIter) popPrev() bool {
	e := it.prevStack[len(it.prevStack)-1]
	it.prevStack = it.prevStack[:len(it.prevStack)-1]
	it.key = append(it.key[:0], it.prevKeys[e.keyStart:e.keyEnd]...)
	it.prevKeys = it.prevKeys[:e.keyStart]
	it.val = it.data[e.valStart:e.valEnd:e.valEnd]
	it.offset, it.nextOffset = int(e.offset), int(e.valEnd)
	return true
}

// getInBlock finds the first entry >= search in block data for a point
// lookup. match reports whether that entry exists and has search's user key;
// then trailer and value are the entry's (value aliases data). It does the
// work of init and seekGE without a blockIter, decoding keys into a stack
// buffer, so that a lookup allocates nothing for keys up to its size.
func getInBlock(data []byte, search base.InternalKey) (value []byte, trailer base.Trailer, match bool, err error) {
	var it blockIter
	if err := it.init(data); err != nil {
		return nil, 0, false, err
	}
	i := it.searchRestarts(search)
	if i < 0 {
		return nil, 0, false, errBlockCorrupt
	}
	off := 0
	if i > 0 {
		off = it.restartOffset(i - 1)
	}
	entries := data[:it.restarts]
	var buf [256]byte
	key := buf[:0]
	for off < len(entries) {
		shared, p, v, end, ok := decodeEntry(entries, off)
		if !ok || shared > len(key) {
			return nil, 0, false, errBlockCorrupt
		}
		key = append(key[:shared], entries[p:v]...)
		n := len(key) - base.TrailerLen
		if n < 0 {
			return nil, 0, false, errBlockCorrupt
		}
		if compareEncoded(key, search) >= 0 {
			if !bytes.Equal(key[:n], search.UserKey) {
				return nil, 0, false, nil
			}
			return entries[v:end:end], base.Trailer(binary.LittleEndian.Uint64(key[n:])), true, nil
		}
		off = end
	}
	return nil, 0, false, nil
}
