package memtable

import (
	"bytes"
	"math/bits"

	"github.com/tabuladb/tabula/internal/base"
)

// This file holds the skiplist searches shared by the writers and the
// readers. They run concurrently with inserts, so they follow links only
// through atomic loads and rely on the package invariants: a node reached
// through a link is complete and immutable, and every level is sorted at
// every instant.

// randomHeight draws a tower height with P(height > h) = 4^-h, capped at
// maxHeight. A search expects (1/p)/ln(1/p) * ln(n) comparisons, 2.885*ln(n)
// for both p = 1/2 and p = 1/4, but p = 1/4 needs 1.33 links per node on
// average instead of 2. rng is the writer's xorshift64* state (nonzero).
func randomHeight(rng *uint64) int {
	// xorshift64*: cheap, and its high bits are good enough that their
	// leading zeros, read two at a time, are fair coin flips of 1/4.
	x := *rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*rng = x
	r := x * 0x2545f4914f6cdd1d
	// The forced bit caps the count of leading zero pairs at maxHeight-1.
	return 1 + bits.LeadingZeros64(r|1<<(63-2*(maxHeight-1)))/2
}

// keyIsAfter reports whether the internal key (key, trailer) sorts after the
// key of the node at off, which must not be a sentinel. It is
// base.InternalCompare without building an InternalKey: user keys ascending,
// then trailers descending.
func (m *MemTable) keyIsAfter(key []byte, trailer base.Trailer, off uint32) bool {
	nd := m.arena.node(off)
	if c := bytes.Compare(key, m.arena.key(off, nd)); c != 0 {
		return c > 0
	}
	return trailer < nd.trailer
}

// findSpliceForLevel walks level from prev, which sorts before (key,
// trailer), and returns the adjacent pair at that level that brackets it.
// stop is a node already known to sort after the key (found on the level
// above, or the tail); reaching it ends the walk without a comparison. That
// saves a cache miss, not just a comparison, whenever the walk ends where
// the one on the level above did, which is often: the top levels' nodes are
// few and stay cached, the bottom levels' are many and usually are not.
func (m *MemTable) findSpliceForLevel(key []byte, trailer base.Trailer, level int, prev, stop uint32) (uint32, uint32) {
	for {
		next := m.arena.next(prev, level).Load()
		if next == stop || next == tailOffset || !m.keyIsAfter(key, trailer, next) {
			return prev, next
		}
		prev = next
	}
}

// seek returns the pair of nodes adjacent at level 0 between which (key,
// trailer) belongs: prev is the last node before it (or head) and next the
// first node at or after it (or tail). Safe for concurrent readers.
func (m *MemTable) seek(key []byte, trailer base.Trailer) (prev, next uint32) {
	prev, next = headOffset, tailOffset
	for level := int(m.height.Load()) - 1; level >= 0; level-- {
		prev, next = m.findSpliceForLevel(key, trailer, level, prev, next)
	}
	return prev, next
}

// findSplice fills spl with the bracketing pair of (key, trailer) at every
// level. Levels above the height it loads are taken to hold only head and
// tail; a node another writer links there meanwhile makes the insert's
// compare-and-swap fail and the level be searched again.
func (m *MemTable) findSplice(key []byte, trailer base.Trailer, spl *splice) {
	height := int(m.height.Load())
	for level := maxHeight - 1; level >= height; level-- {
		spl.prev[level], spl.next[level] = headOffset, tailOffset
	}
	prev, next := headOffset, tailOffset
	for level := height - 1; level >= 0; level-- {
		prev, next = m.findSpliceForLevel(key, trailer, level, prev, next)
		spl.prev[level], spl.next[level] = prev, next
	}
}

// brackets reports whether the cached splice can take (key, trailer) at
// level 0. Each upper prev is at or before prev[0], so it sorts before the
// key too. With a single writer each upper next is at or after next[0], and
// the key lies between every pair; with concurrent writers an upper next
// can sort before next[0], which Insert checks level by level. Pairs need
// not be adjacent any more, since other writers may have linked nodes
// between them; the insert's compare-and-swap finds out.
func (m *MemTable) brackets(spl *splice, key []byte, trailer base.Trailer) bool {
	if p := spl.prev[0]; p != headOffset && !m.keyIsAfter(key, trailer, p) {
		return false
	}
	if n := spl.next[0]; n != tailOffset && m.keyIsAfter(key, trailer, n) {
		return false
	}
	return true
}

// prevOf returns the node before off at level 0 (head if there is none).
// The back-link may lag by the node the writer is linking right now, or by
// several if this reader was descheduled in between (invariant 4), so the
// answer is checked against the candidate's forward link, and the walk moves
// forward over anything inserted since. The back-link always points before
// off and level 0 is complete, so the walk reaches off. Safe for concurrent
// readers.
func (m *MemTable) prevOf(off uint32) uint32 {
	prev := m.arena.node(off).prev.Load()
	for {
		next := m.arena.next(prev, 0).Load()
		if next == off {
			return prev
		}
		prev = next
	}
}
