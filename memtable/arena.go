package memtable

import (
	"sync/atomic"
	"unsafe"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/internal/manual"
)

// maxHeight is the tallest tower a node can have. With a branching
// probability of 1/4 the top level expects one node per 4^19 ≈ 2.7e11
// entries, far more than an arena addressed by 32-bit offsets can hold.
const maxHeight = 20

// An entry is laid out in the arena as
//
//	[pad] tower[height-1] ... tower[1] tower[0] | node header | key | value
//	                                            ^ node offset
//
// The node offset, which links store, points at the header; the tower grows
// downward from it, so the header, the key and the level-0 link are adjacent
// whatever the height, and the key's address follows from the offset alone.
// That matters because a search is a chain of cache misses: as soon as a
// link is loaded the CPU can fetch the next node's header and key in
// parallel, instead of waiting for the header to learn where the key is.
// Only height links are allocated, so a typical node (height 1 with
// probability 3/4) costs 32 bytes (link, padding, header) plus its key and
// value.

// node is the fixed-size header of an entry. prev and the tower links are
// read and written atomically, because readers follow them while the writer
// links new nodes; every other field is written once before the node is
// published and only read afterwards.
type node struct {
	trailer   base.Trailer
	keySize   uint32
	valueSize uint32
	// prev is the level-0 back-link used by reverse iteration (see the
	// package invariants on why it may lag).
	prev atomic.Uint32
	// height is the number of links in the node's tower. Searches do not
	// need it (a node reached at some level has links at that level and
	// below); it fills what would be padding and lets tests check towers.
	height uint32
}

const (
	// nodeHeaderSize is the size of a node header; the key follows it.
	nodeHeaderSize = int(unsafe.Sizeof(node{}))
	// linkSize is the size of one tower link.
	linkSize = int(unsafe.Sizeof(atomic.Uint32{}))
	// nodeAlign is the alignment of every allocation and of every header
	// (which begins with an 8-byte trailer). Each allocation is rounded
	// up to a multiple of it so the next one starts aligned.
	nodeAlign = 8
	// headOffset and tailOffset locate the sentinels, the first
	// allocations of every arena: the head has a full tower; the tail
	// needs none, since no search ever moves past it. Being constants,
	// they cost no loads.
	headOffset = uint32(maxHeight * linkSize)
	tailOffset = headOffset + uint32(nodeHeaderSize)
	// sentinelsSize is the space the sentinels take before the accounted
	// part of the arena.
	sentinelsSize = tailOffset + uint32(nodeHeaderSize)
)

func alignUp(n uint64) uint64 { return (n + nodeAlign - 1) &^ (nodeAlign - 1) }

// towerSize returns the space before the header of a node of the given
// height: its links, plus padding that keeps the header aligned.
func towerSize(height int) uint64 { return alignUp(uint64(height) * uint64(linkSize)) }

// nodeSize returns the arena footprint of an entry of the given height
// holding a key and value of the given lengths. It computes in uint64 so
// that absurd lengths cannot overflow into a small size.
func nodeSize(height int, keyLen, valueLen int) uint64 {
	return towerSize(height) + alignUp(uint64(nodeHeaderSize)+uint64(keyLen)+uint64(valueLen))
}

// arena is a bump allocator over one []byte, on the Go heap or mapped
// (offHeap). Writers allocate concurrently
// by advancing the allocation offset with a compare-and-swap, and Size and
// Available may be read from any goroutine.
type arena struct {
	buf []byte
	// used is the offset of the first free byte.
	used atomic.Uint64
	// limit is len(buf). Space before sentinelsSize holds the sentinels
	// and is not counted by size or available.
	limit uint64
	// mem is buf's memory when it was asked for outside the heap, and
	// populator what faults its pages in when it is a mapping.
	mem       manual.Buf
	populator *populator
}

// newArena allocates room for the sentinels plus size accounted bytes, on
// the Go heap, or outside it if offHeap and the platform can (else, and if
// the mapping fails, on the heap: only memory accounting differs).
func newArena(size int, offHeap bool) *arena {
	n := uint64(sentinelsSize) + uint64(size)
	a := &arena{limit: n}
	if offHeap {
		a.mem = manual.New(int(n))
		a.buf = a.mem.Bytes()
	} else {
		a.buf = make([]byte, n)
	}
	a.used.Store(uint64(sentinelsSize))
	adviseHugePages(a.buf)
	if a.mem.Mapped() {
		a.populator = startPopulating(a.buf, &a.used)
	}
	return a
}

// release gives the arena's memory back. Any later use of buf panics (it
// is nil) rather than reading memory that is gone.
func (a *arena) release() {
	if a.buf == nil {
		return
	}
	a.buf = nil
	if a.populator != nil {
		a.populator.halt()
	}
	a.mem.Free()
}

// alloc reserves n bytes (a multiple of nodeAlign) and returns their offset,
// or reports false, reserving nothing, if they do not fit. Safe for
// concurrent writers: a failed allocation leaves room a smaller one may
// still take, which an atomic add past the limit would not.
func (a *arena) alloc(n uint64) (uint32, bool) {
	for {
		off := a.used.Load()
		if n > a.limit-off {
			return 0, false
		}
		if a.used.CompareAndSwap(off, off+n) {
			if a.populator != nil {
				a.populator.nudge(off + n)
			}
			return uint32(off), true
		}
	}
}

// size returns the accounted bytes allocated so far.
func (a *arena) size() int { return int(a.used.Load() - uint64(sentinelsSize)) }

// available returns the accounted bytes still free.
func (a *arena) available() int { return int(a.limit - a.used.Load()) }

// node returns the header at offset off. The conversion is sound because
// headers are 8-byte aligned, lie wholly inside buf, and buf is never
// reallocated (invariant 1).
func (a *arena) node(off uint32) *node {
	return (*node)(unsafe.Pointer(&a.buf[off]))
}

// next returns the link to the node following off at level, which must be
// below the node's height.
func (a *arena) next(off uint32, level int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.buf[off-uint32((level+1)*linkSize)]))
}

// key returns the user key of the node at off, aliasing the arena. The
// capacity is clipped so that a caller appending to it cannot overwrite the
// arena.
func (a *arena) key(off uint32, nd *node) []byte {
	start := off + uint32(nodeHeaderSize)
	end := start + nd.keySize
	return a.buf[start:end:end]
}

// value returns the value of the node at off, aliasing the arena, capacity
// clipped.
func (a *arena) value(off uint32, nd *node) []byte {
	start := off + uint32(nodeHeaderSize) + nd.keySize
	end := start + nd.valueSize
	return a.buf[start:end:end]
}
