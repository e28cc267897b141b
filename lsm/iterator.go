package lsm

import (
	"bytes"

	"github.com/tabuladb/tabula/internal/base"
)

// Iterator walks the live keys of a DB or Snapshot in key order, forward or
// backward, as of one sequence number: it hides deleted keys, older versions
// and writes made after it was created. Key and Value are valid until the
// next positioning call. An Iterator is not safe for concurrent use and
// must be closed.
type Iterator struct {
	rs           *readState
	seq          base.SeqNum
	iter         base.InternalIterator // merges memtables and levels
	lower, upper []byte

	key, value []byte
	// keyBuf and valueBuf own the current entry when iterating backward
	// (the internal iterator has already moved past it) or when a
	// direction change needs the key.
	keyBuf, valueBuf []byte
	valid            bool
	reverse          bool
	// innerValid: going backward, whether the internal iterator is still
	// at an entry (the first one before the current key).
	innerValid bool
	err        error
}

// newIter builds an iterator reading rs at seq. It takes over the caller's
// reference to rs.
func (db *DB) newIter(rs *readState, seq base.SeqNum, o *IterOptions) *Iterator {
	it := &Iterator{rs: rs, seq: seq}
	if o != nil {
		it.lower, it.upper = o.LowerBound, o.UpperBound
	}
	prefix := db.boundsPrefix(it.lower, it.upper)
	iters := make([]base.InternalIterator, 0, 2+len(rs.queue)+len(rs.current.levels[0])+NumLevels)
	iters = append(iters, rs.mem.NewIter(it.lower, it.upper))
	for i := len(rs.queue) - 1; i >= 0; i-- {
		iters = append(iters, rs.queue[i].NewIter(it.lower, it.upper))
	}
	for _, f := range rs.current.levels[0] {
		if !f.overlaps(it.lower, nil) || (it.upper != nil && bytes.Compare(f.smallest.UserKey, it.upper) >= 0) {
			continue
		}
		// A level iterator over one table opens it lazily and releases it
		// on Close, like any other level.
		iters = append(iters, newLevelIter(db.tableCache, []*fileMetadata{f}, it.lower, it.upper, prefix))
	}
	for level := 1; level < NumLevels; level++ {
		if files := rs.current.levels[level]; len(files) > 0 {
			iters = append(iters, newLevelIter(db.tableCache, files, it.lower, it.upper, prefix))
		}
	}
	it.iter = newMergingIter(iters)
	return it
}

// boundsPrefix returns the prefix (per Options.Split) shared by every key
// in [lower, upper), or nil.
func (db *DB) boundsPrefix(lower, upper []byte) []byte {
	if db.opts.Split == nil || lower == nil || upper == nil {
		return nil
	}
	n := db.opts.Split(lower)
	if n <= 0 || n > len(lower) {
		return nil
	}
	p := lower[:n]
	succ := prefixSuccessor(p)
	if succ == nil || bytes.Compare(upper, succ) > 0 {
		return nil
	}
	return p
}

// prefixSuccessor returns the smallest key greater than every key starting
// with p, or nil if there is none (p is all 0xff).
func prefixSuccessor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			s := append([]byte(nil), p[:i+1]...)
			s[i]++
			return s
		}
	}
	return nil
}

// First moves to the first key.
func (it *Iterator) First() bool {
	if it.err != nil {
		return false
	}
	it.reverse = false
	if it.lower != nil {
		return it.findNext(it.iter.SeekGE(it.lower), nil)
	}
	return it.findNext(it.iter.First(), nil)
}

// Last moves to the last key.
func (it *Iterator) Last() bool {
	if it.err != nil {
		return false
	}
	it.reverse = true
	if it.upper != nil {
		return it.findPrev(it.iter.SeekLT(it.upper))
	}
	return it.findPrev(it.iter.Last())
}

// SeekGE moves to the first key >= key.
func (it *Iterator) SeekGE(key []byte) bool {
	if it.err != nil {
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	it.reverse = false
	return it.findNext(it.iter.SeekGE(key), nil)
}

// SeekLT moves to the last key < key.
func (it *Iterator) SeekLT(key []byte) bool {
	if it.err != nil {
		return false
	}
	if it.upper != nil && bytes.Compare(key, it.upper) > 0 {
		key = it.upper
	}
	it.reverse = true
	return it.findPrev(it.iter.SeekLT(key))
}

// Next moves to the next key.
func (it *Iterator) Next() bool {
	if !it.valid {
		return false
	}
	// The current key's remaining versions must be skipped; keep the key,
	// since moving the internal iterator invalidates it.
	it.keyBuf = append(it.keyBuf[:0], it.key...)
	if it.reverse {
		// The internal iterator sits before the current key: seek back to it.
		it.reverse = false
		return it.findNext(it.iter.SeekGE(it.keyBuf), it.keyBuf)
	}
	return it.findNext(it.iter.Next(), it.keyBuf)
}

// Prev moves to the previous key.
func (it *Iterator) Prev() bool {
	if !it.valid {
		return false
	}
	if !it.reverse {
		it.reverse = true
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		return it.findPrev(it.iter.SeekLT(it.keyBuf))
	}
	return it.findPrev(it.innerValid)
}

// findNext moves forward from the internal iterator's position (ok says
// whether it has one) to the newest visible version of the next live key,
// skipping user key skip entirely.
func (it *Iterator) findNext(ok bool, skip []byte) bool {
	for ; ok; ok = it.iter.Next() {
		k := it.iter.Key()
		if k.SeqNum() > it.seq {
			continue
		}
		if skip != nil && bytes.Equal(k.UserKey, skip) {
			continue
		}
		if k.Kind() == base.KindDelete {
			// Everything older of this key is hidden too.
			it.keyBuf = append(it.keyBuf[:0], k.UserKey...)
			skip = it.keyBuf
			continue
		}
		it.key, it.value, it.valid = k.UserKey, it.iter.Value(), true
		return true
	}
	return it.settleInvalid()
}

// findPrev moves backward from the internal iterator's position to the
// previous live key. Going backward meets a key's versions oldest first, so
// it remembers the newest visible one until the user key changes.
func (it *Iterator) findPrev(ok bool) bool {
	found := false
	it.valid = false
	for ; ok; ok = it.iter.Prev() {
		k := it.iter.Key()
		if k.SeqNum() > it.seq {
			continue
		}
		if found && !bytes.Equal(k.UserKey, it.keyBuf) {
			break
		}
		if k.Kind() == base.KindDelete {
			found = false
			it.keyBuf = it.keyBuf[:0]
			continue
		}
		found = true
		it.keyBuf = append(it.keyBuf[:0], k.UserKey...)
		it.valueBuf = append(it.valueBuf[:0], it.iter.Value()...)
	}
	it.innerValid = ok
	if found {
		it.key, it.value, it.valid = it.keyBuf, it.valueBuf, true
		return true
	}
	return it.settleInvalid()
}

func (it *Iterator) settleInvalid() bool {
	it.valid = false
	it.key, it.value = nil, nil
	if err := it.iter.Error(); err != nil {
		it.err = err
	}
	return false
}

// Valid reports whether the iterator is at a key.
func (it *Iterator) Valid() bool { return it.valid }

// Key returns the current key.
func (it *Iterator) Key() []byte { return it.key }

// Value returns the current value.
func (it *Iterator) Value() []byte { return it.value }

// Error returns the error that stopped the iterator, if any.
func (it *Iterator) Error() error { return it.err }

// Close releases the iterator and returns Error().
func (it *Iterator) Close() error {
	if it.iter != nil {
		if err := it.iter.Close(); err != nil && it.err == nil {
			it.err = err
		}
		it.iter = nil
	}
	if it.rs != nil {
		it.rs.unref()
		it.rs = nil
	}
	it.valid = false
	return it.err
}
