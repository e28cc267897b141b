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

	// The fields below belong to the writer.

	// splice is where the previous Add linked its node: at every level,
	// the adjacent pair of nodes that bracket a key just after it. Adds of
	// ascending keys (a sequential load, or the sorted keys of one batch)
	// land inside it and skip the search. It always describes the current
	// list, since only Add changes the list and Add keeps it up to date.
	splice splice
	// rng is the xorshift64* state that draws tower heights.
	rng uint64
}

// splice holds, for each level, two nodes adjacent at that level.
type splice struct {
	prev, next [maxHeight]uint32
}

// New returns an empty memtable whose arena holds arenaSize bytes of entries
// (plus a few hundred bytes for the sentinel nodes, not counted by Size or
// Available). It panics if arenaSize is negative or 4 GiB or more, since
// nodes are addressed by 32-bit offsets.
func New(arenaSize int) *MemTable {
	if arenaSize < 0 || uint64(arenaSize) > maxArenaSize {
		panic(fmt.Sprintf("memtable: arena size %d out of range [0, %d]", arenaSize, uint64(maxArenaSize)))
	}
	m := &MemTable{arena: newArena(arenaSize)}
	m.init()
	return m
}

// Reset empties the memtable and keeps its arena for new entries, without
// clearing it: Add writes every field of a node it links, and nothing reads
// the bytes between nodes. Allocating and zeroing a fresh arena of tens of
// MiB takes milliseconds; reusing one takes nothing.
//
// The caller must guarantee that nothing reads the memtable any more: no
// iterator open, no Get under way, and no value or key slice returned from
// it still in use, since all of them alias the arena that Add now rewrites.
func (m *MemTable) Reset() {
	m.arena.used.Store(uint64(sentinelsSize))
	m.init()
}

// Capacity returns the arena bytes the memtable has for entries in all:
// Size plus Available.
func (m *MemTable) Capacity() int { return int(m.arena.limit - uint64(sentinelsSize)) }

// init links the sentinels of an empty list and resets the writer's state.
func (m *MemTable) init() {
	// Any nonzero seed will do; a fixed one makes tower heights, and so
	// benchmarks, reproducible.
	m.rng = 0x9e3779b97f4a7c15
	m.height.Store(1)
	head := m.arena.node(headOffset)
	*head = node{height: maxHeight}
	for i := range maxHeight {
		m.arena.next(headOffset, i).Store(tailOffset)
		m.splice.prev[i] = headOffset
		m.splice.next[i] = tailOffset
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
// with any reader.
func (m *MemTable) Add(key base.InternalKey, value []byte) error {
	a := m.arena
	height := m.randomHeight()
	start, ok := a.alloc(nodeSize(height, len(key.UserKey), len(value)))
	if !ok {
		return ErrArenaFull
	}

	// Build the node completely while no reader can reach it: every field,
	// since the arena may hold an earlier life's bytes (Reset). The tower
	// is stored below.
	off := start + uint32(towerSize(height))
	nd := a.node(off)
	nd.trailer = key.Trailer
	nd.keySize = uint32(len(key.UserKey))
	nd.valueSize = uint32(len(value))
	nd.height = uint32(height)
	// prev is stored once the splice is known, below.
	keyStart := off + uint32(nodeHeaderSize)
	copy(a.buf[keyStart:], key.UserKey)
	copy(a.buf[keyStart+nd.keySize:], value)

	spl := &m.splice
	if !m.brackets(spl, key.UserKey, key.Trailer) {
		m.findSplice(key.UserKey, key.Trailer, spl)
	}
	for i := range height {
		a.next(off, i).Store(spl.next[i])
	}
	nd.prev.Store(spl.prev[0])

	// Publish, bottom level first (invariant 3). Once the level-0 store
	// is done the entry is visible to new searches and iterators.
	for i := range height {
		a.next(spl.prev[i], i).Store(off)
	}
	// The successor's back-link lags the forward link until this store;
	// reverse iteration copes with that (invariant 4).
	a.node(spl.next[0]).prev.Store(off)

	if uint32(height) > m.height.Load() {
		m.height.Store(uint32(height))
	}
	// The new node is now the predecessor, at each of its levels, of
	// anything that will be added just after it.
	for i := range height {
		spl.prev[i] = off
	}
	return nil
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
