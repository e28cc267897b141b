package lsm

import (
	"bytes"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
)

// levelIter iterates the tables of one level (L1 and below: sorted, no
// overlaps) as one sequence, opening each table only when reached.
type levelIter struct {
	tc           *tableCache
	files        []*fileMetadata
	lower, upper []byte
	// prefix, when set, lets the iterator skip tables whose prefix filter
	// rules it out.
	prefix []byte

	index int // of the open table; -1 or len(files) when none
	iter  base.InternalIterator
	entry *tableCacheEntry
	err   error
	// compaction says the level is a compaction's input: read whole,
	// without filling the block cache.
	compaction bool
}

func newLevelIter(tc *tableCache, files []*fileMetadata, lower, upper, prefix []byte) *levelIter {
	return &levelIter{tc: tc, files: files, lower: lower, upper: upper, prefix: prefix, index: -1}
}

// newCompactionLevelIter returns a level iterator over the whole of files,
// a compaction's input, whose reads do not fill the block cache.
func newCompactionLevelIter(tc *tableCache, files []*fileMetadata) *levelIter {
	l := newLevelIter(tc, files, nil, nil, nil)
	l.compaction = true
	return l
}

// open switches to table i; an iterator over nothing when the table lies
// outside the bounds or its filter rules out the prefix.
func (l *levelIter) open(i int) {
	l.closeTable()
	l.index = i
	if i < 0 || i >= len(l.files) {
		return
	}
	f := l.files[i]
	if (l.upper != nil && bytes.Compare(f.smallest.UserKey, l.upper) >= 0) ||
		(l.lower != nil && bytes.Compare(f.largest.UserKey, l.lower) < 0) {
		return
	}
	r, e, err := l.tc.acquire(f)
	if err != nil {
		l.err = err
		return
	}
	if l.prefix != nil && !r.MayContainPrefix(l.prefix) {
		l.tc.release(e)
		return
	}
	l.entry = e
	if l.compaction {
		l.iter = r.NewCompactionIter()
	} else {
		l.iter = r.NewIter(l.lower, l.upper)
	}
}

func (l *levelIter) closeTable() {
	if l.iter != nil {
		if err := l.iter.Close(); err != nil && l.err == nil {
			l.err = err
		}
		l.iter = nil
	}
	if l.entry != nil {
		l.tc.release(l.entry)
		l.entry = nil
	}
}

// settle checks the open table's positioning result and, when it found
// nothing, moves on through the following (or preceding) tables.
func (l *levelIter) settle(ok, forward bool) bool {
	for {
		if ok {
			return true
		}
		if l.err != nil {
			return false
		}
		if l.iter != nil {
			if err := l.iter.Error(); err != nil {
				l.err = err
				return false
			}
		}
		if forward {
			if l.index+1 >= len(l.files) || (l.upper != nil && bytes.Compare(l.files[l.index+1].smallest.UserKey, l.upper) >= 0) {
				l.closeTable()
				l.index = len(l.files)
				return false
			}
			l.open(l.index + 1)
			ok = l.iter != nil && l.iter.First()
		} else {
			if l.index-1 < 0 || (l.lower != nil && bytes.Compare(l.files[l.index-1].largest.UserKey, l.lower) < 0) {
				l.closeTable()
				l.index = -1
				return false
			}
			l.open(l.index - 1)
			ok = l.iter != nil && l.iter.Last()
		}
	}
}

// findGE returns the index of the first table whose largest user key >= key.
func (l *levelIter) findGE(key []byte) int {
	i, _ := slices.BinarySearchFunc(l.files, key, func(f *fileMetadata, k []byte) int {
		return bytes.Compare(f.largest.UserKey, k)
	})
	return i
}

// findLT returns the index of the last table whose smallest user key < key.
func (l *levelIter) findLT(key []byte) int {
	i, _ := slices.BinarySearchFunc(l.files, key, func(f *fileMetadata, k []byte) int {
		return bytes.Compare(f.smallest.UserKey, k)
	})
	return i - 1
}

func (l *levelIter) SeekGE(key []byte) bool {
	if l.lower != nil && bytes.Compare(key, l.lower) < 0 {
		key = l.lower
	}
	l.err = nil
	l.open(l.findGE(key))
	return l.settle(l.iter != nil && l.iter.SeekGE(key), true)
}

func (l *levelIter) SeekLT(key []byte) bool {
	if l.upper != nil && bytes.Compare(key, l.upper) > 0 {
		key = l.upper
	}
	l.err = nil
	l.open(l.findLT(key))
	return l.settle(l.iter != nil && l.iter.SeekLT(key), false)
}

func (l *levelIter) First() bool {
	l.err = nil
	if l.lower != nil {
		l.open(l.findGE(l.lower))
	} else {
		l.open(0)
	}
	return l.settle(l.iter != nil && l.iter.First(), true)
}

func (l *levelIter) Last() bool {
	l.err = nil
	if l.upper != nil {
		l.open(l.findLT(l.upper))
	} else {
		l.open(len(l.files) - 1)
	}
	return l.settle(l.iter != nil && l.iter.Last(), false)
}

func (l *levelIter) Next() bool {
	if l.iter == nil {
		return false
	}
	return l.settle(l.iter.Next(), true)
}

func (l *levelIter) Prev() bool {
	if l.iter == nil {
		return false
	}
	return l.settle(l.iter.Prev(), false)
}

func (l *levelIter) Key() base.InternalKey { return l.iter.Key() }

func (l *levelIter) Value() []byte { return l.iter.Value() }

func (l *levelIter) Error() error { return l.err }

func (l *levelIter) Close() error {
	l.closeTable()
	return l.err
}
