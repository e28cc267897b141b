package lsm

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
)

const tableCacheShards = 16

// tableCache keeps up to MaxOpenFiles sstable readers open, evicting the
// least recently used. A reader in use is pinned by a reference and closed
// only when its last user releases it, even if it was evicted meanwhile.
type tableCache struct {
	dir        string
	fs         vfs.FS
	blockCache *sstable.Cache
	shards     [tableCacheShards]tableCacheShard

	hits, misses atomic.Int64
}

type tableCacheShard struct {
	mu       sync.Mutex
	entries  map[uint64]*tableCacheEntry
	lru      tableCacheEntry // sentinel: lru.next is the most recently used
	capacity int
}

type tableCacheEntry struct {
	fileNum uint64
	// refs counts the cache's own reference (while in the map) plus every
	// caller's. The reader is closed when it reaches zero.
	refs       atomic.Int32
	loaded     chan struct{}
	reader     *sstable.Reader
	err        error
	prev, next *tableCacheEntry
}

func newTableCache(dir string, fs vfs.FS, blockCache *sstable.Cache, maxOpenFiles int) *tableCache {
	c := &tableCache{dir: dir, fs: fs, blockCache: blockCache}
	perShard := max(1, maxOpenFiles/tableCacheShards)
	for i := range c.shards {
		s := &c.shards[i]
		s.entries = make(map[uint64]*tableCacheEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.capacity = perShard
	}
	return c
}

// acquire returns the reader of table m, opening it if needed. The caller
// must call release(entry) when done with the reader.
func (c *tableCache) acquire(m *fileMetadata) (*sstable.Reader, *tableCacheEntry, error) {
	s := &c.shards[m.fileNum%tableCacheShards]
	s.mu.Lock()
	e, ok := s.entries[m.fileNum]
	if ok {
		e.refs.Add(1)
		s.unlink(e)
		s.pushFront(e)
		s.mu.Unlock()
		c.hits.Add(1)
		<-e.loaded
	} else {
		e = &tableCacheEntry{fileNum: m.fileNum, loaded: make(chan struct{})}
		e.refs.Store(2)
		s.entries[m.fileNum] = e
		s.pushFront(e)
		evicted := s.evictOverCapacity()
		s.mu.Unlock()
		c.misses.Add(1)
		for _, old := range evicted {
			c.release(old)
		}
		e.reader, e.err = c.open(m)
		close(e.loaded)
	}
	if e.err != nil {
		// Forget the failure so that a later attempt retries the open.
		s.mu.Lock()
		if s.entries[m.fileNum] == e {
			s.remove(e)
			defer c.release(e)
		}
		s.mu.Unlock()
		err := e.err
		c.release(e)
		return nil, nil, err
	}
	return e.reader, e, nil
}

func (c *tableCache) open(m *fileMetadata) (*sstable.Reader, error) {
	name := makeFilename(c.dir, fileTypeTable, m.fileNum)
	f, err := c.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open table: %w", err)
	}
	// Point reads read one block; iterators that read in order prefetch
	// (sstable's readahead).
	f = vfs.AdviseRandomReads(f)
	r, err := sstable.NewReader(f, int64(m.size), sstable.ReaderOptions{Cache: c.blockCache, FileNum: m.fileNum})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return r, nil
}

// release drops one reference to e, closing its reader with the last.
func (c *tableCache) release(e *tableCacheEntry) {
	if e.refs.Add(-1) == 0 && e.reader != nil {
		e.reader.Close()
	}
}

// evict forgets table fileNum (its file is being deleted) and its blocks.
func (c *tableCache) evict(fileNum uint64) {
	s := &c.shards[fileNum%tableCacheShards]
	s.mu.Lock()
	e, ok := s.entries[fileNum]
	if ok {
		s.remove(e)
	}
	s.mu.Unlock()
	if ok {
		<-e.loaded
		c.release(e)
	}
	if c.blockCache != nil {
		c.blockCache.EvictFile(fileNum)
	}
}

// close releases every cached reader.
func (c *tableCache) close() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		var all []*tableCacheEntry
		for _, e := range s.entries {
			all = append(all, e)
			s.remove(e)
		}
		s.mu.Unlock()
		for _, e := range all {
			<-e.loaded
			c.release(e)
		}
	}
}

func (c *tableCache) openCount() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

func (s *tableCacheShard) pushFront(e *tableCacheEntry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *tableCacheShard) unlink(e *tableCacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *tableCacheShard) remove(e *tableCacheEntry) {
	delete(s.entries, e.fileNum)
	s.unlink(e)
}

// evictOverCapacity removes least recently used entries beyond capacity and
// returns them; the caller releases them outside the lock.
func (s *tableCacheShard) evictOverCapacity() []*tableCacheEntry {
	var out []*tableCacheEntry
	for len(s.entries) > s.capacity {
		e := s.lru.prev
		s.remove(e)
		out = append(out, e)
	}
	return out
}
