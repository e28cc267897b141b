package sstable

import (
	"sync"
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
// Cached blocks are immutable and never recycled: eviction only drops the
// cache's reference, so a block (and values sliced from it) stays valid for
// as long as anyone holds it.
type Cache struct {
	shards []cacheShard
	// shift maps a 64-bit hash to a shard: len(shards) is 1<<(64-shift).
	shift uint
	// zstd is shared by every Reader using this cache, so that open
	// tables do not each hold a decoder.
	zstd zstdDecoder
}

type cacheKey struct {
	fileNum, offset uint64
}

type cacheEntry struct {
	key        cacheKey
	data       []byte
	prev, next *cacheEntry
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
}

// NewCache returns a cache holding up to about capacityBytes of blocks. A
// capacity of zero or less caches nothing.
func NewCache(capacityBytes int64) *Cache {
	capacityBytes = max(capacityBytes, 0)
	n, shift := maxCacheShards, uint(64-6)
	for n > 1 && capacityBytes/int64(n) < minCacheShardSize {
		n, shift = n/2, shift+1
	}
	c := &Cache{shards: make([]cacheShard, n), shift: shift}
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

// get returns the cached block, or nil.
func (c *Cache) get(fileNum, offset uint64) []byte {
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
	data := e.data
	s.mu.Unlock()
	return data
}

// set caches a block, evicting the least recently used ones as needed. A
// block bigger than a whole shard is not cached.
func (c *Cache) set(fileNum, offset uint64, data []byte) {
	k := cacheKey{fileNum, offset}
	s := c.shard(k)
	charge := int64(len(data)) + cacheEntryOverhead
	if charge > s.capacity {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k]; e != nil {
		// Another reader loaded the same block concurrently.
		s.unlink(e)
		s.pushFront(e)
		return
	}
	e := &cacheEntry{key: k, data: data}
	s.entries[k] = e
	s.pushFront(e)
	s.size += charge
	for s.size > s.capacity {
		s.remove(s.lru.prev)
	}
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

func (s *cacheShard) remove(e *cacheEntry) {
	s.unlink(e)
	e.prev, e.next = nil, nil
	delete(s.entries, e.key)
	s.size -= int64(len(e.data)) + cacheEntryOverhead
}

// EvictFile drops every block of a file, typically one being deleted. It
// walks every entry of the cache, which is fine at the rate files are
// deleted.
func (c *Cache) EvictFile(fileNum uint64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; {
			next := e.next
			if e.key.fileNum == fileNum {
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
	return m
}
