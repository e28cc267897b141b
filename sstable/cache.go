package sstable

import (
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/manual"
)

// A cache is split into up to maxCacheShards shards so that concurrent
// readers rarely contend on one lock, but into fewer when that would leave
// a shard less than minCacheShardSize: a shard must hold many blocks for
// its LRU order to mean anything.
const (
	maxCacheShards    = 64
	minCacheShardSize = 512 << 10
)

// cacheEntryOverhead approximates the memory an entry costs beyond its
// block: the entry itself and its share of the map.
const cacheEntryOverhead = 96

// Cache is a block cache: decompressed data blocks keyed by (file number,
// block offset), evicted least recently used first once their total size
// exceeds the capacity. It is split into shards, each an LRU list under its
// own lock, and is safe for concurrent use. One Cache is usually shared by
// every Reader of a DB.
//
// Blocks live outside the Go heap, in a manual.Slab: on the heap, the
// collector would let garbage grow to the cache's size again before each
// collection, doubling what the cache costs in resident memory. So a
// block is freed by hand, when nothing uses it: the cache holds one
// reference to each cached block, and every Get's value and iterator
// position one more (see Value), so that eviction drops only the cache's.
type Cache struct {
	shards []cacheShard
	// shift maps a 64-bit hash to a shard: len(shards) is 1<<(64-shift).
	shift uint
	slab  *manual.Slab
	// raw recycles the buffers blocks are read into before they are
	// decompressed or copied into the slab.
	raw sync.Pool
	// zstd is shared by every Reader using this cache, so that open
	// tables do not each hold a decoder.
	zstd zstdDecoder
}

type cacheKey struct {
	fileNum, offset uint64
}

// cacheEntry is a block in the cache's memory, with its references: the
// cache's own while it is cached, and its users'.
type cacheEntry struct {
	key        cacheKey
	buf        manual.Buf
	data       []byte // the block: buf's bytes without what the read left past it
	refs       atomic.Int32
	slab       *manual.Slab
	prev, next *cacheEntry
}

// release drops a reference, freeing the block with the last.
func (e *cacheEntry) release() {
	if e.refs.Add(-1) == 0 {
		e.slab.Free(e.buf)
	}
}

type cacheShard struct {
	mu       sync.Mutex
	capacity int64
	size     int64
	entries  map[cacheKey]*cacheEntry
	// lru is the sentinel of a circular list: lru.next is the most
	// recently used entry, lru.prev the least.
	lru          cacheEntry
	hits, misses int64
	// Keep shards on separate cache lines.
	_ [64]byte
}

// CacheMetrics is a snapshot of a Cache's counters.
type CacheMetrics struct {
	Hits, Misses int64
	// Size is the bytes charged for the cached blocks, Count their number.
	Size, Count int64
	// Mapped is the memory the blocks are allocated from (cached ones,
	// ones still in use after eviction, and free slots), in use or not.
	Mapped int64
}

// NewCache returns a cache holding up to about capacityBytes of blocks. A
// capacity of zero or less caches nothing.
func NewCache(capacityBytes int64) *Cache {
	capacityBytes = max(capacityBytes, 0)
	n, shift := maxCacheShards, uint(64-6)
	for n > 1 && capacityBytes/int64(n) < minCacheShardSize {
		n, shift = n/2, shift+1
	}
	c := &Cache{shards: make([]cacheShard, n), shift: shift, slab: manual.NewSlab()}
	c.raw.New = func() any { return new([]byte) }
	perShard := capacityBytes / int64(n)
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = perShard
		s.entries = make(map[cacheKey]*cacheEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
	}
	return c
}

func (c *Cache) shard(k cacheKey) *cacheShard {
	h := k.fileNum*0x9e3779b97f4a7c15 ^ k.offset
	h *= 0xbf58476d1ce4e5b9
	return &c.shards[h>>c.shift]
}

// get returns the cached block, or nil, with a reference the caller
// must release.
func (c *Cache) get(fileNum, offset uint64) *cacheEntry {
	k := cacheKey{fileNum, offset}
	s := c.shard(k)
	s.mu.Lock()
	e := s.entries[k]
	if e == nil {
		s.misses++
		s.mu.Unlock()
		return nil
	}
	s.hits++
	if s.lru.next != e {
		s.unlink(e)
		s.pushFront(e)
	}
	e.refs.Add(1)
	s.mu.Unlock()
	return e
}

// alloc returns memory for a block of n bytes, to be filled and passed to
// set.
func (c *Cache) alloc(n int) manual.Buf { return c.slab.Alloc(n) }

// set caches block data, which lies at the start of buf (from alloc),
// evicting the least recently used blocks as needed, and returns the
// cached entry with a reference the caller must release. A block bigger
// than a whole shard is not cached, but returned all the same (freed with
// its last reference). If another reader cached the same block
// meanwhile, buf is freed and that one returned.
func (c *Cache) set(fileNum, offset uint64, buf manual.Buf, data []byte) *cacheEntry {
	k := cacheKey{fileNum, offset}
	s := c.shard(k)
	e := &cacheEntry{key: k, buf: buf, data: data, slab: c.slab}
	charge := int64(cap(buf.Bytes())) + cacheEntryOverhead
	if charge > s.capacity {
		e.refs.Store(1)
		return e
	}
	s.mu.Lock()
	if old := s.entries[k]; old != nil {
		s.unlink(old)
		s.pushFront(old)
		old.refs.Add(1)
		s.mu.Unlock()
		c.slab.Free(buf)
		return old
	}
	e.refs.Store(2)
	s.entries[k] = e
	s.pushFront(e)
	s.size += charge
	for s.size > s.capacity {
		s.remove(s.lru.prev)
	}
	s.mu.Unlock()
	return e
}

func (s *cacheShard) unlink(e *cacheEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (s *cacheShard) pushFront(e *cacheEntry) {
	e.prev = &s.lru
	e.next = s.lru.next
	e.next.prev = e
	s.lru.next = e
}

// remove takes e out of the shard and drops the cache's reference.
func (s *cacheShard) remove(e *cacheEntry) {
	s.unlink(e)
	e.prev, e.next = nil, nil
	delete(s.entries, e.key)
	s.size -= int64(cap(e.buf.Bytes())) + cacheEntryOverhead
	e.release()
}

// EvictFile drops every block of a file, typically one being deleted (a
// block still in use stays until its users release it). It walks every
// entry of the cache, which is fine at the rate files are deleted.
func (c *Cache) EvictFile(fileNum uint64) {
	c.evict(func(k cacheKey) bool { return k.fileNum == fileNum })
}

// Close drops every block; each is freed once its users release it, and
// the memory they came from when the last is. The cache must not be used
// after it.
func (c *Cache) Close() {
	c.evict(func(cacheKey) bool { return true })
	c.slab.Close()
}

func (c *Cache) evict(match func(cacheKey) bool) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; {
			next := e.next
			if match(e.key) {
				s.remove(e)
			}
			e = next
		}
		s.mu.Unlock()
	}
}

// Metrics returns the cache's counters.
func (c *Cache) Metrics() CacheMetrics {
	var m CacheMetrics
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		m.Hits += s.hits
		m.Misses += s.misses
		m.Size += s.size
		m.Count += int64(len(s.entries))
		s.mu.Unlock()
	}
	m.Mapped = c.slab.Stats().Mapped
	return m
}
