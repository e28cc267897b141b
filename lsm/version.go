package lsm

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/base"
)

// fileMetadata describes one sstable. Everything but refs and compacting is
// immutable once the table is in a version.
type fileMetadata struct {
	fileNum     uint64
	size        uint64
	smallest    base.InternalKey
	largest     base.InternalKey
	smallestSeq base.SeqNum
	largestSeq  base.SeqNum

	// refs counts the versions holding the table. When it drops to zero the
	// table is obsolete and its file is deleted.
	refs atomic.Int32
	// compacting is set (under DB.mu) while a compaction reads the table.
	compacting bool
}

func (m *fileMetadata) String() string {
	return fmt.Sprintf("%06d[%s-%s]", m.fileNum, m.smallest, m.largest)
}

// overlaps reports whether the table's user-key range meets [start, end],
// both inclusive; nil means unbounded.
func (m *fileMetadata) overlaps(start, end []byte) bool {
	if end != nil && bytes.Compare(m.smallest.UserKey, end) > 0 {
		return false
	}
	if start != nil && bytes.Compare(m.largest.UserKey, start) < 0 {
		return false
	}
	return true
}

// version is an immutable set of tables: L0 ordered newest first (by
// largest sequence number), L1 and below ordered by key with no overlaps.
// A version is shared by reference count: the version set holds the
// current one, readStates and compactions hold the ones they read.
type version struct {
	levels [NumLevels][]*fileMetadata
	refs   atomic.Int32
	// onObsolete receives the tables whose last reference this version
	// held when its own last reference goes.
	onObsolete func([]*fileMetadata)
}

func (v *version) ref() { v.refs.Add(1) }

func (v *version) unref() {
	if v.refs.Add(-1) != 0 {
		return
	}
	var obsolete []*fileMetadata
	for _, files := range v.levels {
		for _, f := range files {
			if f.refs.Add(-1) == 0 {
				obsolete = append(obsolete, f)
			}
		}
	}
	if len(obsolete) > 0 && v.onObsolete != nil {
		v.onObsolete(obsolete)
	}
}

// levelBytes is the total size of a level's tables.
func (v *version) levelBytes(level int) int64 {
	var n int64
	for _, f := range v.levels[level] {
		n += int64(f.size)
	}
	return n
}

// holdsOthers reports whether a level from level down holds a table that
// overlaps [start, end] (inclusive, nil = unbounded) and is not in except.
func (v *version) holdsOthers(level int, start, end []byte, except map[uint64]bool) bool {
	for ; level < NumLevels; level++ {
		for _, f := range v.overlapping(level, start, end) {
			if !except[f.fileNum] {
				return true
			}
		}
	}
	return false
}

// overlapping returns the tables of level whose key ranges meet the user-key
// range [start, end] (inclusive, nil = unbounded). For L0, whose tables
// overlap each other, the range is widened until it covers every table that
// overlaps a returned one, so that moving the result out of L0 never leaves
// an older version of a key above a newer one.
func (v *version) overlapping(level int, start, end []byte) []*fileMetadata {
	files := v.levels[level]
	if level > 0 {
		lo, _ := slices.BinarySearchFunc(files, start, func(f *fileMetadata, k []byte) int {
			if k == nil {
				return 1
			}
			return bytes.Compare(f.largest.UserKey, k)
		})
		hi := lo
		for hi < len(files) && files[hi].overlaps(start, end) {
			hi++
		}
		return files[lo:hi]
	}
	var out []*fileMetadata
	for i := 0; i < len(files); i++ {
		f := files[i]
		if !f.overlaps(start, end) || slices.Contains(out, f) {
			continue
		}
		out = append(out, f)
		widened := false
		if start != nil && bytes.Compare(f.smallest.UserKey, start) < 0 {
			start, widened = f.smallest.UserKey, true
		}
		if end != nil && bytes.Compare(f.largest.UserKey, end) > 0 {
			end, widened = f.largest.UserKey, true
		}
		if widened {
			out, i = out[:0], -1
		}
	}
	// Keep the version's newest-first order.
	slices.SortFunc(out, func(a, b *fileMetadata) int { return compareL0Order(a, b) })
	return out
}

// compareL0Order sorts L0 tables newest first.
func compareL0Order(a, b *fileMetadata) int {
	if a.largestSeq != b.largestSeq {
		if a.largestSeq > b.largestSeq {
			return -1
		}
		return 1
	}
	if a.fileNum > b.fileNum {
		return -1
	} else if a.fileNum < b.fileNum {
		return 1
	}
	return 0
}

// keyRange returns the smallest and largest user keys over tables.
func keyRange(tables ...[]*fileMetadata) (smallest, largest []byte) {
	for _, files := range tables {
		for _, f := range files {
			if smallest == nil || bytes.Compare(f.smallest.UserKey, smallest) < 0 {
				smallest = f.smallest.UserKey
			}
			if largest == nil || bytes.Compare(f.largest.UserKey, largest) > 0 {
				largest = f.largest.UserKey
			}
		}
	}
	return smallest, largest
}

// applyEdit returns a new version: v with e's deletions and additions. The
// new version holds a reference to each of its tables; the caller owns one
// reference to the version.
func (v *version) applyEdit(e *versionEdit) (*version, error) {
	nv := &version{onObsolete: v.onObsolete}
	deleted := make(map[uint64]*fileMetadata, len(e.deleted))
	for _, d := range e.deleted {
		i := slices.IndexFunc(v.levels[d.level], func(f *fileMetadata) bool { return f.fileNum == d.fileNum })
		if i < 0 {
			return nil, fmt.Errorf("version edit deletes table %06d, not in L%d: %w", d.fileNum, d.level, ErrCorruption)
		}
		deleted[d.fileNum] = v.levels[d.level][i]
	}
	for level := range v.levels {
		for _, f := range v.levels[level] {
			if deleted[f.fileNum] == nil {
				nv.levels[level] = append(nv.levels[level], f)
			}
		}
	}
	for _, a := range e.added {
		m := a.meta
		// A table deleted from one level and added to another is moved:
		// it stays the same table, with the same reference count, even
		// when the edit was decoded from the manifest into a new object.
		if moved := deleted[m.fileNum]; moved != nil {
			m = moved
		}
		nv.levels[a.level] = append(nv.levels[a.level], m)
	}
	slices.SortFunc(nv.levels[0], compareL0Order)
	for level := 1; level < NumLevels; level++ {
		files := nv.levels[level]
		slices.SortFunc(files, func(a, b *fileMetadata) int { return base.InternalCompare(a.smallest, b.smallest) })
		for i := 1; i < len(files); i++ {
			if bytes.Compare(files[i-1].largest.UserKey, files[i].smallest.UserKey) >= 0 {
				return nil, fmt.Errorf("tables %s and %s of L%d overlap: %w", files[i-1], files[i], level, ErrCorruption)
			}
		}
	}
	for _, files := range nv.levels {
		for _, f := range files {
			f.refs.Add(1)
		}
	}
	nv.refs.Store(1)
	return nv, nil
}

// snapshotEdit returns an edit that rebuilds v from an empty version: the
// first record of a new manifest.
func (v *version) snapshotEdit() *versionEdit {
	e := &versionEdit{formatVersion: manifestFormatVersion}
	for level, files := range v.levels {
		for _, f := range files {
			e.added = append(e.added, newFileEntry{level: level, meta: f})
		}
	}
	return e
}
