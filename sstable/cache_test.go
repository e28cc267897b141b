package sstable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// put caches an n-byte block at (fileNum, offset), as a Reader does.
func put(c *Cache, fileNum, offset uint64, n int) {
	mem := c.alloc(n)
	c.set(fileNum, offset, mem, mem.Bytes()[:n]).release()
}

// cached reports whether the block at (fileNum, offset) is cached.
func cached(c *Cache, fileNum, offset uint64) bool {
	e := c.get(fileNum, offset)
	if e != nil {
		e.release()
	}
	return e != nil
}

func TestCacheLRU(t *testing.T) {
	c := NewCache(1000 << 10) // one shard
	defer c.Close()
	if len(c.shards) != 1 {
		t.Fatalf("%d shards for 1000 KiB", len(c.shards))
	}
	for i := range 9 {
		put(c, 1, uint64(i), 100<<10)
	}
	if m := c.Metrics(); m.Count != 9 {
		t.Fatalf("metrics %+v", m)
	}
	// Touch block 0 so that adding more evicts 1 first.
	if !cached(c, 1, 0) {
		t.Fatal("block 0 missing")
	}
	put(c, 1, 100, 100<<10)
	put(c, 1, 101, 100<<10)
	if !cached(c, 1, 0) {
		t.Fatal("recently used block 0 evicted")
	}
	if cached(c, 1, 1) {
		t.Fatal("least recently used block 1 kept")
	}
	m := c.Metrics()
	if m.Size > 1000<<10 || m.Hits != 2 || m.Misses != 1 {
		t.Fatalf("metrics %+v", m)
	}
	// The blocks evicted are freed: what is in use is what is cached.
	if inUse := c.slab.Stats().InUse; inUse != m.Size-m.Count*cacheEntryOverhead {
		t.Fatalf("%d bytes in use, %d cached", inUse, m.Size-m.Count*cacheEntryOverhead)
	}
	// A block larger than a shard is not cached.
	put(c, 2, 0, 2<<20)
	if cached(c, 2, 0) {
		t.Fatal("oversized block cached")
	}
	if inUse := c.slab.Stats().InUse; inUse != m.Size-m.Count*cacheEntryOverhead {
		t.Fatalf("an oversized block was not freed after use: %d bytes in use", inUse)
	}
}

func TestCacheEvictFile(t *testing.T) {
	c := NewCache(64 << 20)
	defer c.Close()
	for f := range uint64(4) {
		for off := range uint64(100) {
			put(c, f, off*4096, 4096)
		}
	}
	c.EvictFile(2)
	if m := c.Metrics(); m.Count != 300 || m.Size != 300*(4096+cacheEntryOverhead) {
		t.Fatalf("after EvictFile: %+v", m)
	}
	for off := range uint64(100) {
		if cached(c, 2, off*4096) {
			t.Fatal("evicted file's block still cached")
		}
		if !cached(c, 3, off*4096) {
			t.Fatal("other file's block evicted")
		}
	}
}

func TestCacheZeroCapacity(t *testing.T) {
	c := NewCache(0)
	defer c.Close()
	put(c, 1, 0, 1)
	if cached(c, 1, 0) || c.Metrics().Count != 0 || c.slab.Stats().InUse != 0 {
		t.Fatal("zero-capacity cache cached a block")
	}
}

// TestConcurrentReads runs Gets and scans from many goroutines on readers
// sharing a small cache (so blocks are evicted and reloaded throughout);
// run it with -race.
func TestConcurrentReads(t *testing.T) {
	cache := NewCache(256 << 10)
	rng := rand.New(rand.NewPCG(3, 4))
	type table struct {
		r   *Reader
		all []kv
	}
	var tables []table
	for i, comp := range []Compression{S2Compression, ZstdCompression, NoCompression} {
		all := genEntries(rng, 3000)
		data, _ := buildTable(t, all, WriterOptions{Compression: comp, BlockSize: 1024})
		tables = append(tables, table{openTable(t, data, ReaderOptions{Cache: cache, FileNum: uint64(i)}), all})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for i := range 400 {
				tb := tables[rng.IntN(len(tables))]
				e := tb.all[rng.IntN(len(tb.all))]
				v, found, err := tb.r.Get(e.key.UserKey, e.key.SeqNum())
				if err != nil || !found || v.Kind != e.key.Kind() || !bytes.Equal(v.Bytes, e.value) {
					errs <- fmt.Errorf("Get(%s) = %q %s %v %v", e.key, v.Bytes, v.Kind, found, err)
					return
				}
				v.Release()
				if i%20 == 0 {
					it := tb.r.NewIter(e.key.UserKey, nil)
					n := 0
					for ok := it.First(); ok && n < 100; ok = it.Next() {
						n++
					}
					for ok := it.Prev(); ok && n > 0; ok = it.Prev() {
						n--
					}
					if err := it.Close(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := cache.Metrics(); m.Hits == 0 || m.Misses == 0 || m.Size > 256<<10 {
		t.Fatalf("cache metrics %+v", m)
	}
	for _, tb := range tables {
		tb.r.Close()
	}
}

// cachedTable returns a table of 5000 entries, file 1 of cache, and its
// entries.
func cachedTable(t *testing.T, cache *Cache) (*Reader, []kv) {
	t.Helper()
	var all []kv
	for i := range 5000 {
		all = append(all, kv{base.MakeInternalKey(fmt.Appendf(nil, "k%06d", i), 1, base.KindSet), fmt.Appendf(nil, "value-%06d", i)})
	}
	data, _ := buildTable(t, all, WriterOptions{})
	return openTable(t, data, ReaderOptions{Cache: cache, FileNum: 1}), all
}

// TestGetValueOutlivesEviction checks that a value returned by Get stays
// intact after its block is evicted and the cache reuses the memory of
// others, until it is released, and that its block's memory is then freed.
func TestGetValueOutlivesEviction(t *testing.T) {
	cache := NewCache(1 << 20)
	r, all := cachedTable(t, cache)
	defer r.Close()
	v, found, err := r.Get([]byte("k000000"), 1)
	if err != nil || !found {
		t.Fatal(found, err)
	}
	cache.EvictFile(1)
	inUse := cache.slab.Stats().InUse
	if inUse == 0 {
		t.Fatal("an evicted block still held by a value was freed")
	}
	for _, e := range all {
		w, _, err := r.Get(e.key.UserKey, 1)
		if err != nil {
			t.Fatal(err)
		}
		w.Release()
	}
	if string(v.Bytes) != "value-000000" {
		t.Fatalf("value changed to %q", v.Bytes)
	}
	cache.EvictFile(1)
	before := cache.slab.Stats().InUse
	v.Release()
	if after := cache.slab.Stats().InUse; after >= before {
		t.Fatalf("releasing the last reference to an evicted block freed nothing (%d bytes in use, was %d)", after, before)
	}
}

// TestIteratorHoldsItsBlock checks that an iterator's loaded block stays
// intact through eviction and reuse of the cache's memory, and is freed
// once the iterator moves on; and that Close frees what no one holds.
func TestIteratorHoldsItsBlock(t *testing.T) {
	cache := NewCache(1 << 20)
	r, all := cachedTable(t, cache)
	defer r.Close()
	it := r.NewIter(nil, nil)
	if !it.First() {
		t.Fatal(it.Error())
	}
	value := it.Value()
	cache.EvictFile(1)
	for _, e := range all[len(all)/2:] {
		w, _, err := r.Get(e.key.UserKey, 1)
		if err != nil {
			t.Fatal(err)
		}
		w.Release()
	}
	if string(value) != "value-000000" || string(it.Key().UserKey) != "k000000" {
		t.Fatalf("the loaded block changed: %s = %q", it.Key(), value)
	}
	n := 1
	for it.Next() {
		n++
	}
	if err := it.Close(); err != nil || n != len(all) {
		t.Fatalf("scan: %d entries, err %v", n, err)
	}
	cached := cache.Metrics().Size
	if inUse := cache.slab.Stats().InUse; inUse+int64(cache.Metrics().Count)*cacheEntryOverhead != cached {
		t.Fatalf("%d bytes in use with the iterator closed, want the %d the cache holds", inUse, cached)
	}

	v, _, err := r.Get(all[7].key.UserKey, 1)
	if err != nil {
		t.Fatal(err)
	}
	cache.Close()
	if st := cache.slab.Stats(); st.Mapped == 0 || string(v.Bytes) != "value-000007" {
		t.Fatalf("Close freed a block a value holds (%+v, %q)", st, v.Bytes)
	}
	v.Release()
	if st := cache.slab.Stats(); st.Mapped != 0 || st.InUse != 0 {
		t.Fatalf("after Close and the last release: %+v, want nothing mapped", st)
	}
}

// TestCompactionIterDoesNotFillCache checks that a compaction's read of a
// table yields every entry, takes the blocks it finds cached, and adds none
// of the blocks it reads from the file, while an ordinary iterator adds
// every one.
func TestCompactionIterDoesNotFillCache(t *testing.T) {
	cache := NewCache(8 << 20)
	r, all := cachedTable(t, cache)
	defer r.Close()
	scan := func(it base.InternalIterator) int {
		t.Helper()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			if k := it.Key(); !bytes.Equal(k.UserKey, all[n].key.UserKey) || !bytes.Equal(it.Value(), all[n].value) {
				t.Fatalf("entry %d: %s, want %s", n, k, all[n].key)
			}
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := scan(r.NewCompactionIter()); n != len(all) {
		t.Fatalf("compaction read saw %d entries, want %d", n, len(all))
	}
	if m := cache.Metrics(); m.Count != 0 || m.Misses == 0 {
		t.Fatalf("after a compaction read the cache holds %d blocks (%d misses), want none", m.Count, m.Misses)
	}
	scan(r.NewIter(nil, nil))
	cached := cache.Metrics()
	if cached.Count == 0 {
		t.Fatal("an ordinary read cached no block")
	}
	scan(r.NewCompactionIter())
	if m := cache.Metrics(); m.Count != cached.Count || m.Hits-cached.Hits != cached.Count {
		t.Fatalf("a compaction read over %d cached blocks: %d hits, cache now %d blocks", cached.Count, m.Hits-cached.Hits, m.Count)
	}
}
