package sstable

import (
	"bytes"
	"encoding/binary"

	"github.com/tabuladb/tabula/internal/base"
)

// iterPos is where an iterator stands.
type iterPos uint8

const (
	posInvalid     iterPos = iota // not positioned yet, or failed
	posValid                      // at an entry
	posBeforeStart                // moved back past the first entry in bounds
	posAfterEnd                   // moved forward past the last entry in bounds
)

// iterator is a two-level iterator: a position in the in-memory index
// selects a data block, and a blockIter walks it.
//
// Bounds are enforced with as few comparisons as the index allows: when a
// block's separators prove that every key of the block is inside a bound
// (withinLower, withinUpper), its keys are not compared against that bound,
// and a block that the separators prove to be wholly outside the bounds is
// never read.
type iterator struct {
	r            *Reader
	lower, upper []byte
	block        int   // index of the block loaded in data; -1 if none
	blk          block // the loaded block, held until another is loaded
	// scratch holds the loaded block when it is not cached (a compaction
	// reads through no cache), reused for the next.
	scratch     blockScratch
	data        blockIter
	key         base.InternalKey
	pos         iterPos
	withinLower bool
	withinUpper bool
	// fillCache says blocks read from the file go into the block cache.
	fillCache bool
	// ra prefetches ahead of the blocks read from the file in order.
	ra  readahead
	err error
}

var _ base.InternalIterator = (*iterator)(nil)

func (it *iterator) init(r *Reader, lower, upper []byte, fillCache bool) {
	it.r, it.lower, it.upper, it.fillCache = r, lower, upper, fillCache
	it.ra = readahead{}
	it.block = -1
	it.key = base.InternalKey{}
	it.pos = posInvalid
	it.err = nil
}

// seekKey returns the internal key that sorts before every version of
// userKey.
func seekKey(userKey []byte) base.InternalKey {
	return base.InternalKey{UserKey: userKey, Trailer: ^base.Trailer(0)}
}

// loadBlock makes block i the current block.
func (it *iterator) loadBlock(i int) bool {
	if it.block == i {
		return true
	}
	it.releaseBlock()
	h := it.r.index.handle(i)
	b, err := it.r.dataBlock(h, it.fillCache, &it.scratch, &it.ra)
	if err != nil {
		return it.fail(err)
	}
	it.blk = b
	if err := it.data.init(b.data); err != nil {
		return it.fail(it.r.blockErr(h, err))
	}
	it.block = i
	// Keys of block i are <= its separator and > the previous one.
	it.withinUpper = it.upper == nil || it.r.index.compareUserKey(i, it.upper) < 0
	it.withinLower = it.lower == nil || (i > 0 && it.r.index.compareUserKey(i-1, it.lower) >= 0)
	return true
}

// releaseBlock lets the loaded block go: the values read from it must no
// longer be used.
func (it *iterator) releaseBlock() {
	it.blk.release()
	it.blk = block{}
	it.block = -1
	it.data.data, it.data.val = nil, nil
}

func (it *iterator) fail(err error) bool {
	it.err = err
	it.pos = posInvalid
	it.releaseBlock()
	return false
}

// blockFailed turns a blockIter error into the iterator's error.
func (it *iterator) blockFailed() bool {
	return it.fail(it.r.blockErr(it.r.index.handle(it.block), it.data.err))
}

// decodeKey sets key from the block iterator's current entry.
func (it *iterator) decodeKey() bool {
	k := it.data.key
	n := len(k) - base.TrailerLen
	if n < 0 {
		it.data.err = errBlockCorrupt
		return it.blockFailed()
	}
	it.key = base.InternalKey{UserKey: k[:n:n], Trailer: base.Trailer(binary.LittleEndian.Uint64(k[n:]))}
	return true
}

// foundForward accepts the block iterator's entry after a forward move,
// unless it is at or past the upper bound.
func (it *iterator) foundForward() bool {
	if !it.decodeKey() {
		return false
	}
	if !it.withinUpper && bytes.Compare(it.key.UserKey, it.upper) >= 0 {
		it.pos = posAfterEnd
		return false
	}
	it.pos = posValid
	return true
}

// foundBackward accepts the block iterator's entry after a backward move,
// unless it is below the lower bound.
func (it *iterator) foundBackward() bool {
	if !it.decodeKey() {
		return false
	}
	if !it.withinLower && bytes.Compare(it.key.UserKey, it.lower) < 0 {
		it.pos = posBeforeStart
		return false
	}
	it.pos = posValid
	return true
}

// nextBlock moves to the first entry of the blocks after the current one.
func (it *iterator) nextBlock() bool {
	for {
		i := it.block + 1
		if i >= it.r.index.len() ||
			(it.upper != nil && it.r.index.compareUserKey(i-1, it.upper) >= 0) {
			it.pos = posAfterEnd
			return false
		}
		if !it.loadBlock(i) {
			return false
		}
		if it.data.first() {
			return it.foundForward()
		}
		if it.data.err != nil {
			return it.blockFailed()
		}
	}
}

// prevBlock moves to the last entry of the blocks before the current one.
func (it *iterator) prevBlock() bool {
	for {
		i := it.block - 1
		if i < 0 || (it.lower != nil && it.r.index.compareUserKey(i, it.lower) < 0) {
			it.pos = posBeforeStart
			return false
		}
		if !it.loadBlock(i) {
			return false
		}
		if it.data.last() {
			return it.foundBackward()
		}
		if it.data.err != nil {
			return it.blockFailed()
		}
	}
}

// SeekGE moves to the first entry whose user key is >= key (and >= lower).
func (it *iterator) SeekGE(key []byte) bool {
	if it.err != nil {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	if it.upper != nil && bytes.Compare(key, it.upper) >= 0 {
		it.pos = posAfterEnd
		return false
	}
	search := seekKey(key)
	i := it.r.index.seek(search)
	if i == it.r.index.len() {
		it.pos = posAfterEnd
		return false
	}
	if !it.loadBlock(i) {
		return false
	}
	if it.data.seekGE(search) {
		return it.foundForward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.nextBlock()
}

// SeekLT moves to the last entry whose user key is < key (and < upper).
func (it *iterator) SeekLT(key []byte) bool {
	if it.err != nil {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	if it.lower != nil && bytes.Compare(key, it.lower) <= 0 {
		it.pos = posBeforeStart
		return false
	}
	search := seekKey(key)
	i := it.r.index.seek(search)
	if i == it.r.index.len() {
		// Every key of the table is < search.
		return it.lastOf(i - 1)
	}
	if !it.loadBlock(i) {
		return false
	}
	if it.data.seekLT(search) {
		return it.foundBackward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.prevBlock()
}

// lastOf moves to the last entry of block i or, if it has none in bounds,
// of the blocks before it.
func (it *iterator) lastOf(i int) bool {
	if i < 0 || (it.lower != nil && it.r.index.compareUserKey(i, it.lower) < 0) {
		it.pos = posBeforeStart
		return false
	}
	if !it.loadBlock(i) {
		return false
	}
	if it.data.last() {
		return it.foundBackward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.prevBlock()
}

// First moves to the first entry in bounds.
func (it *iterator) First() bool {
	if it.err != nil {
		return false
	}
	if it.lower != nil {
		return it.SeekGE(it.lower)
	}
	if it.r.index.len() == 0 {
		it.pos = posAfterEnd
		return false
	}
	if !it.loadBlock(0) {
		return false
	}
	if it.data.first() {
		return it.foundForward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.nextBlock()
}

// Last moves to the last entry in bounds.
func (it *iterator) Last() bool {
	if it.err != nil {
		return false
	}
	if it.upper != nil {
		return it.SeekLT(it.upper)
	}
	return it.lastOf(it.r.index.len() - 1)
}

// Next moves to the next entry. From before the start it moves to the
// first entry; past the end it stays there.
func (it *iterator) Next() bool {
	switch it.pos {
	case posValid:
	case posBeforeStart:
		return it.First()
	default:
		return false
	}
	if it.data.next() {
		return it.foundForward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.nextBlock()
}

// Prev moves to the previous entry. Past the end it moves to the last
// entry; before the start it stays there.
func (it *iterator) Prev() bool {
	switch it.pos {
	case posValid:
	case posAfterEnd:
		return it.Last()
	default:
		return false
	}
	if it.data.prev() {
		return it.foundBackward()
	}
	if it.data.err != nil {
		return it.blockFailed()
	}
	return it.prevBlock()
}

// Key returns the current key; its user key aliases a buffer the next
// positioning call overwrites.
func (it *iterator) Key() base.InternalKey { return it.key }

// Value returns the current value. It aliases the loaded block, so it
// stays valid until the iterator loads another block or is closed.
func (it *iterator) Value() []byte { return it.data.val }

// Error returns the first error the iterator met.
func (it *iterator) Error() error { return it.err }

// Close returns the iterator to its Reader's pool.
func (it *iterator) Close() error {
	err := it.err
	r := it.r
	if r == nil {
		return err
	}
	it.r, it.lower, it.upper, it.err = nil, nil, nil, nil
	it.key = base.InternalKey{}
	// Keep the key and prev buffers for reuse, but not the block.
	it.releaseBlock()
	r.iters.Put(it)
	return err
}
