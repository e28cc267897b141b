package memtable

import (
	"bytes"
	"math"

	"github.com/tabuladb/tabula/internal/base"
)

// seekTrailer is the largest trailer. Trailers sort descending, so
// (userKey, seekTrailer) sorts before every version of userKey, and seeking
// to it finds the first entry whose user key is >= userKey.
const seekTrailer = base.Trailer(math.MaxUint64)

// iterator implements base.InternalIterator over a MemTable.
//
// nd is the current node. When the iterator is not at an entry it is one of
// the sentinels, which records the direction it left in: head after running
// off the front (or before the first positioning call), tail after running
// off the back. Next from head is then First, and Prev from tail is Last, so
// an exhausted iterator can be turned around.
type iterator struct {
	m            *MemTable
	a            *arena
	nd           uint32
	lower, upper []byte
}

var _ base.InternalIterator = (*iterator)(nil)

// SeekGE moves to the first entry whose user key is >= key (and >= lower).
func (it *iterator) SeekGE(key []byte) bool {
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	_, next := it.m.seek(key, seekTrailer)
	return it.setForward(next)
}

// SeekLT moves to the last entry whose user key is < key (and < upper).
func (it *iterator) SeekLT(key []byte) bool {
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	prev, _ := it.m.seek(key, seekTrailer)
	return it.setBackward(prev)
}

// First moves to the first entry within the bounds.
func (it *iterator) First() bool {
	if it.lower != nil {
		return it.SeekGE(it.lower)
	}
	return it.setForward(it.a.next(headOffset, 0).Load())
}

// Last moves to the last entry within the bounds.
func (it *iterator) Last() bool {
	if it.upper != nil {
		return it.SeekLT(it.upper)
	}
	return it.setBackward(it.m.prevOf(tailOffset))
}

// Next moves to the following entry.
func (it *iterator) Next() bool {
	switch it.nd {
	case headOffset:
		return it.First()
	case tailOffset:
		return false
	}
	return it.setForward(it.a.next(it.nd, 0).Load())
}

// Prev moves to the preceding entry, in O(1) unless entries are being
// inserted right there concurrently (see MemTable.prevOf).
func (it *iterator) Prev() bool {
	switch it.nd {
	case tailOffset:
		return it.Last()
	case headOffset:
		return false
	}
	return it.setBackward(it.m.prevOf(it.nd))
}

// Key returns the current entry's key. Its UserKey aliases the arena, which
// never changes, so it actually stays valid as long as the MemTable is
// referenced (more than base.InternalIterator promises).
func (it *iterator) Key() base.InternalKey {
	nd := it.a.node(it.nd)
	return base.InternalKey{UserKey: it.a.key(it.nd, nd), Trailer: nd.trailer}
}

// Value returns the current entry's value, aliasing the arena like Key.
func (it *iterator) Value() []byte {
	return it.a.value(it.nd, it.a.node(it.nd))
}

// Error returns nil: an in-memory iterator cannot fail.
func (it *iterator) Error() error { return nil }

// Close releases nothing (the arena belongs to the MemTable) and returns nil.
func (it *iterator) Close() error {
	it.nd = headOffset
	return nil
}

// setForward makes off, reached moving forward, the current node unless it
// is the tail or at or past the upper bound, in which case the iterator is
// exhausted at the back.
func (it *iterator) setForward(off uint32) bool {
	if off == tailOffset || (it.upper != nil && bytes.Compare(it.a.key(off, it.a.node(off)), it.upper) >= 0) {
		it.nd = tailOffset
		return false
	}
	it.nd = off
	return true
}

// setBackward makes off, reached moving backward, the current node unless it
// is the head or below the lower bound, in which case the iterator is
// exhausted at the front.
func (it *iterator) setBackward(off uint32) bool {
	if off == headOffset || (it.lower != nil && bytes.Compare(it.a.key(off, it.a.node(off)), it.lower) < 0) {
		it.nd = headOffset
		return false
	}
	it.nd = off
	return true
}
