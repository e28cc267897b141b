package lsm

import (
	"bytes"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
)

// compactionIter filters the merged input of a flush or compaction down to
// the entries some reader can still see.
//
// The sequence numbers of live snapshots (plus the visible sequence number
// when the job started, which stands for every reader that is not on a
// snapshot) cut each key's history into stripes: stripe i holds the
// versions newer than snapshot i-1 and at most snapshot i. A reader at
// snapshot i sees only the newest version in stripes 0..i, so within one
// stripe every version but the newest is invisible to all readers and is
// dropped. A deletion in stripe 0 hides everything older from every reader;
// if no table below the output level can hold the key ("base level"), there
// is nothing older left to hide and the tombstone itself is dropped.
type compactionIter struct {
	iter base.InternalIterator
	// snapshots is ascending; its last element is the visible sequence
	// number when the job started.
	snapshots []base.SeqNum
	// isBaseLevel reports whether no table below the output can hold key.
	isBaseLevel func(userKey []byte) bool
	// drop, if set, removes whole keys (Options.DropKey).
	drop func(userKey []byte) bool

	started    bool
	curKey     []byte
	prevStripe int  // stripe of the last entry kept or dropped for curKey; -1 if none
	dropping   bool // drop says every version of curKey goes
}

func newCompactionIter(iter base.InternalIterator, snapshots []base.SeqNum, isBaseLevel, drop func([]byte) bool) *compactionIter {
	return &compactionIter{iter: iter, snapshots: snapshots, isBaseLevel: isBaseLevel, drop: drop}
}

// stripe returns the index of the first snapshot that can see seq.
func (ci *compactionIter) stripe(seq base.SeqNum) int {
	i, _ := slices.BinarySearch(ci.snapshots, seq)
	return i
}

// next returns the next entry to keep. ok is false at the end or on error
// (see iter.Error()).
func (ci *compactionIter) next() (base.InternalKey, []byte, bool) {
	var valid bool
	if !ci.started {
		ci.started = true
		valid = ci.iter.First()
	} else {
		valid = ci.iter.Next()
	}
	for ; valid; valid = ci.iter.Next() {
		key := ci.iter.Key()
		stripe := ci.stripe(key.SeqNum())
		if ci.curKey == nil || !bytes.Equal(key.UserKey, ci.curKey) {
			ci.curKey = append(ci.curKey[:0], key.UserKey...)
			ci.prevStripe = -1
			ci.dropping = ci.drop != nil && ci.drop(key.UserKey)
		}
		if ci.dropping {
			continue
		}
		if stripe == ci.prevStripe {
			continue // shadowed by a newer version in the same stripe
		}
		ci.prevStripe = stripe
		if key.Kind() == base.KindDelete && stripe == 0 && ci.isBaseLevel(key.UserKey) {
			continue
		}
		return key, ci.iter.Value(), true
	}
	return base.InternalKey{}, nil, false
}

// baseLevelChecker returns a function that reports whether no table of v in
// levels from fromLevel down overlaps a user key.
func baseLevelChecker(v *version, fromLevel int) func([]byte) bool {
	return func(userKey []byte) bool {
		for level := fromLevel; level < NumLevels; level++ {
			files := v.levels[level]
			if level == 0 {
				for _, f := range files {
					if f.overlaps(userKey, userKey) {
						return false
					}
				}
				continue
			}
			i, _ := slices.BinarySearchFunc(files, userKey, func(f *fileMetadata, k []byte) int {
				return bytes.Compare(f.largest.UserKey, k)
			})
			if i < len(files) && bytes.Compare(files[i].smallest.UserKey, userKey) <= 0 {
				return false
			}
		}
		return true
	}
}
