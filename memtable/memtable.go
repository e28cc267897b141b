package memtable

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/base"
)

// ErrArenaFull is returned by Add when the entry does not fit in what is left
// of the arena. Nothing has been inserted; the engine rotates the memtable.
var ErrArenaFull = errors.New("memtable: arena full")

// MemTable is an arena-backed skiplist of internal keys. See the package
// documentation for its thread-safety contract and invariants.
type MemTable struct {
	arena *arena
	// height is the height of the tallest tower linked so far (at least
	// 1). Searches start there rather than at maxHeight. Only the writer
	// stores it; it may be raised before or after the tall node is
	// linked, because a level the search starts on that holds no node yet
	// just leads from head straight to tail.
	height atomic.Uint32

	// seeds hands each Inserter the seed of its tower heights: a
	// sequence, so that heights, and so benchmarks, are reproducible for a
	// given order of first inserts.
	seeds atomic.Uint64
	// ins is Add's inserter, which Add's single-writer contract protects.
	ins Inserter
}

// splice holds, for each level, two nodes adjacent at that level.
type splice struct {
	prev, next [maxHeight]uint32
}

// An Inserter is one writer's state across its inserts into one MemTable:
// where its last insert linked its node (see splice), and the random state
// of its tower heights. Concurrent writers each use their own; the zero
// value is ready, and an Inserter must not be used with another MemTable.
type Inserter struct {
	// spl brackets, at every level, a key just after the last one
	// inserted, when valid. Inserts of ascending keys (a sequential load,
	// or the sorted keys of one batch) land inside it and skip the
	// search. Other writers may have linked nodes inside it since, which
	// the compare-and-swap of each link detects.
	spl   splice
	valid bool
	rng   uint64
}

// MaxArenaSize is the largest arena New takes: every offset into it,
// sentinels included, fits in a uint32.
const MaxArenaSize = 1<<32 - 1<<12

// New returns an empty memtable whose arena holds arenaSize bytes of entries
// (plus a few hundred bytes for the sentinel nodes, not counted by Size or
// Available). It panics if arenaSize is negative or 4 GiB or more, since
// nodes are addressed by 32-bit offsets.
func New(arenaSize int) *MemTable {
	return newMemTable(arenaSize, false)
}

// NewOffHeap is New with the arena outside the Go heap: on Linux an
// anonymous mapping, whose pages the kernel supplies zeroed as entries
// first touch them, so a memtable costs memory only as it fills, and none
// of it counts towards the heap size the garbage collector paces itself
// by (a heap of large arenas would let that much garbage pile up before a
// collection). The owner must call Release once nothing reads the
// memtable any more; until then it is never freed, even if unreachable.
func NewOffHeap(arenaSize int) *MemTable {
	return newMemTable(arenaSize, true)
}

func newMemTable(arenaSize int, offHeap bool) *MemTable {
	if arenaSize < 0 || uint64(arenaSize) > MaxArenaSize {
		panic(fmt.Sprintf("memtable: arena size %d out of range [0, %d]", arenaSize, uint64(MaxArenaSize)))
	}
	m := &MemTable{arena: newArena(arenaSize, offHeap)}
	m.init()
	return m
}

// Release frees the arena of a memtable made by NewOffHeap (for one made
// by New it only drops it, for the garbage collector). The caller must
// guarantee that nothing reads the memtable any more, nor will: no
// iterator open, no Get or Insert under way, and no key or value slice
// returned from it still in use, since all of them alias the arena. A use
// after Release panics or faults.
func (m *MemTable) Release() { m.arena.release() }

// Capacity returns the arena bytes the memtable has for entries in all:
// Size plus Available.
func (m *MemTable) Capacity() int { return int(m.arena.limit - uint64(sentinelsSize)) }

// init links the sentinels of an empty list.
func (m *MemTable) init() {
	m.height.Store(1)
	head := m.arena.node(headOffset)
	*head = node{height: maxHeight}
	for i := range maxHeight {
		m.arena.next(headOffset, i).Store(tailOffset)
	}
	tail := m.arena.node(tailOffset)
	*tail = node{}
	tail.prev.Store(headOffset)
}

// EntrySize is an upper bound of the arena bytes Add(key, value) consumes
// for a key whose user key is userKeyLen bytes long, so the engine can check
// that a whole batch fits (the sum of its EntrySizes is at most Available)
// before applying any of it. It assumes the tallest possible tower; the
// average entry uses about 72 bytes less.
func EntrySize(userKeyLen, valueLen int) int {
	return int(nodeSize(maxHeight, userKeyLen, valueLen))
}

// Available returns the arena bytes left for entries.
func (m *MemTable) Available() int { return m.arena.available() }

// Size returns the arena bytes used by entries.
func (m *MemTable) Size() int { return m.arena.size() }

// Empty reports whether the memtable holds no entry.
func (m *MemTable) Empty() bool {
	return m.arena.next(headOffset, 0).Load() == tailOffset
}

// Add inserts key with value, both copied into the arena. It returns
// ErrArenaFull, having inserted nothing, if the entry does not fit. Callers
// never add the same internal key twice (every key has a unique sequence
// number); if one did, both entries would be kept, in unspecified order.
//
// Add must not be called concurrently with itself; it may run concurrently
// with any reader. Concurrent writers use Insert.
func (m *MemTable) Add(key base.InternalKey, value []byte) error {
	_, err := m.Insert(&m.ins, key, value)
	return err
}

// Insert is Add for concurrent writers, each with its own Inserter: any
// number of Inserts, and one Add, may run at once. It returns the arena
// bytes the entry took (at most EntrySize).
func (m *MemTable) Insert(ins *Inserter, key base.InternalKey, value []byte) (int, error) {
	a := m.arena
	if ins.rng == 0 {
		ins.rng = (m.seeds.Add(1) * 0x9e3779b97f4a7c15) | 1
	}
	height := randomHeight(&ins.rng)
	size := nodeSize(height, len(key.UserKey), len(value))
	start, ok := a.alloc(size)
	if !ok {
		return 0, ErrArenaFull
	}

	// Build the node completely while no reader can reach it. The tower
	// is stored below.
	off := start + uint32(towerSize(height))
	nd := a.node(off)
	nd.trailer = key.Trailer
	nd.keySize = uint32(len(key.UserKey))
	nd.valueSize = uint32(len(value))
	nd.height = uint32(height)
	keyStart := off + uint32(nodeHeaderSize)
	copy(a.buf[keyStart:], key.UserKey)
	copy(a.buf[keyStart+nd.keySize:], value)

	spl := &ins.spl
	hinted := ins.valid && m.brackets(spl, key.UserKey, key.Trailer)
	if !hinted {
		m.findSplice(key.UserKey, key.Trailer, spl)
		ins.valid = true
	}
	// Publish, bottom level first (invariant 3): once level 0 is linked
	// the entry is visible to new searches and iterators. Each link is a
	// compare-and-swap of the predecessor's link from the successor the
	// splice names; if another writer linked a node in between, the pair
	// is found again from the same predecessor, which still sorts before
	// the key since nodes never move.
	for i := range height {
		prev, next := spl.prev[i], spl.next[i]
		if hinted && i > 0 && next != tailOffset && m.keyIsAfter(key.UserKey, key.Trailer, next) {
			// brackets checked level 0 only. A hint's upper successor
			// can sort before this key when another writer linked a
			// node at that level, between the last insert and its old
			// successor, before the last insert linked that level (the
			// hint then names that node). The compare-and-swap would
			// not notice: the pair is still adjacent.
			prev, next = m.findSpliceForLevel(key.UserKey, key.Trailer, i, prev, tailOffset)
		}
		for {
			a.next(off, i).Store(next)
			if i == 0 {
				nd.prev.Store(prev)
			}
			if a.next(prev, i).CompareAndSwap(next, off) {
				break
			}
			prev, next = m.findSpliceForLevel(key.UserKey, key.Trailer, i, prev, tailOffset)
		}
		if i == 0 {
			// The successor's back-link lags the forward link until this
			// store, and another writer's store may overtake it; either
			// way it points to a node before the successor, which
			// reverse iteration copes with (invariant 4).
			a.node(next).prev.Store(off)
		}
		// The new node is now the predecessor, at each of its levels, of
		// anything inserted just after it.
		spl.prev[i], spl.next[i] = off, next
	}
	for h := m.height.Load(); uint32(height) > h; h = m.height.Load() {
		if m.height.CompareAndSwap(h, uint32(height)) {
			break
		}
	}
	return int(size), nil
}

// Get returns the newest version of userKey with a sequence number <= seq.
// found reports whether there is one; kind says whether it is a value or a
// deletion (a tombstone: the caller must not look in older data). value
// aliases the arena, which never changes once written, so it stays valid as
// long as the MemTable is referenced; the caller must not modify it.
func (m *MemTable) Get(userKey []byte, seq base.SeqNum) (value []byte, kind base.Kind, found bool) {
	if seq > base.SeqNumMax {
		seq = base.SeqNumMax
	}
	// The search key sorts just before every version visible at seq, so
	// the first entry at or after it is the newest visible version, if it
	// has the right user key.
	_, next := m.seek(userKey, base.MakeTrailer(seq, base.KindMax))
	if next == tailOffset {
		return nil, 0, false
	}
	nd := m.arena.node(next)
	if !bytes.Equal(m.arena.key(next, nd), userKey) {
		return nil, 0, false
	}
	return m.arena.value(next, nd), nd.trailer.Kind(), true
}

// NewIter returns an iterator over the memtable restricted to user keys in
// [lower, upper); a nil bound leaves that side open. The iterator keeps the
// bound slices, which must not change while it is in use. It sees the
// memtable as it is at each step: entries added while it is open may or may
// not appear.
func (m *MemTable) NewIter(lower, upper []byte) base.InternalIterator {
	return &iterator{m: m, a: m.arena, nd: headOffset, lower: lower, upper: upper}
}
