// Package memtable is the engine's in-memory write buffer: a skiplist of
// internal keys, ordered by base.InternalCompare (user key ascending, then
// trailer descending so that the newest version of a user key comes first),
// whose nodes, keys and values all live in one fixed-size arena.
//
// The arena is a single []byte, on the Go heap (New) or, for the engine,
// mapped outside it (NewOffHeap). Nodes refer to each other by 32-bit
// offsets into it rather than by Go pointers, so the garbage collector sees
// at most one pointer-free object however many entries the table holds (on
// Linux the arena is also advised onto transparent huge pages, to cut the
// TLB misses of random searches; see arena_linux.go). Nothing is freed
// individually: the engine releases the whole MemTable once it has been
// flushed to an sstable and nothing reads it. When an entry does not fit, Add fails with
// ErrArenaFull and the engine rotates to a new memtable; EntrySize lets it
// check that a whole batch fits before applying any of it, so a batch is
// never half applied.
//
// # Thread safety
//
// Writers may run concurrently, each inserting through its own Inserter
// (Insert): they claim arena space with a compare-and-swap and link each
// level of a node with a compare-and-swap of its predecessor's link, so the
// engine's commit pipeline orders batches under its lock but inserts them
// outside it, in parallel. Add is Insert through the memtable's own
// Inserter, for a single writer. Reads (Get,
// NewIter and the iterators' methods, Size, Available, Empty) need no lock,
// may run concurrently with each other and with the writers, and never block
// them. A reader sees each entry either not at all or completely; entries added
// while a read is in progress may or may not be seen by it. The engine makes
// such entries irrelevant anyway by reading at a sequence number that it
// publishes only after the batch is fully in the memtable.
//
// Each iterator is used by one goroutine at a time, like every
// base.InternalIterator.
//
// # Invariants
//
//  1. Allocated nodes are never deleted or moved until the MemTable is
//     garbage collected or released, so an offset a reader has loaded
//     stays valid as long as the reader may use the MemTable (Release is
//     for an owner that knows no reader is left).
//  2. Apart from its links, a node (trailer, key, value, height) is immutable
//     once it is linked into the list. Its writer builds it completely, then
//     publishes it with atomic compare-and-swaps of the links that point to it, bottom
//     level first; readers follow links only with atomic loads. The atomic
//     store/load pair orders the node's contents before any reader's use of
//     them, which is also what makes the race detector accept the plain reads
//     of key and value bytes.
//  3. Level 0 holds every node in order; level i+1 holds a subset of level i.
//     A node is reachable at a level only once it is reachable at every
//     level below it.
//  4. A node's back-link (prev) points to a node that precedes it at level 0.
//     It is usually the immediate predecessor, but can briefly lag behind
//     while a writer is between linking a new node and updating its
//     successor's back-link, and can stay behind when two writers' updates
//     of one back-link cross. Reverse iteration therefore checks the
//     predecessor's forward link and walks forward over any node inserted in
//     between, so Prev is exact and O(1) in the absence of concurrent inserts.
//  5. The head and tail sentinels bracket every level: head sorts before and
//     tail after every key, and neither holds an entry. Searches recognize
//     them by offset and never compare keys with them.
package memtable
