package sstable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

func TestCacheLRU(t *testing.T) {
	c := NewCache(1000 << 10) // one shard
	if len(c.shards) != 1 {
		t.Fatalf("%d shards for 1000 KiB", len(c.shards))
	}
	block := make([]byte, 100<<10)
	for i := range 9 {
		c.set(1, uint64(i), block)
	}
	if m := c.Metrics(); m.Count != 9 {
		t.Fatalf("metrics %+v", m)
	}
	// Touch block 0 so that adding more evicts 1 first.
	if c.get(1, 0) == nil {
		t.Fatal("block 0 missing")
	}
	c.set(1, 100, block)
	c.set(1, 101, block)
	if c.get(1, 0) == nil {
		t.Fatal("recently used block 0 evicted")
	}
	if c.get(1, 1) != nil {
		t.Fatal("least recently used block 1 kept")
	}
	m := c.Metrics()
	if m.Size > 1000<<10 || m.Hits != 2 || m.Misses != 1 {
		t.Fatalf("metrics %+v", m)
	}
	// A block larger than a shard is not cached.
	c.set(2, 0, make([]byte, 2<<20))
	if c.get(2, 0) != nil {
		t.Fatal("oversized block cached")
	}
}

func TestCacheEvictFile(t *testing.T) {
	c := NewCache(64 << 20)
	for f := range uint64(4) {
		for off := range uint64(100) {
			c.set(f, off*4096, make([]byte, 4096))
		}
	}
	c.EvictFile(2)
	if m := c.Metrics(); m.Count != 300 || m.Size != 300*(4096+cacheEntryOverhead) {
		t.Fatalf("after EvictFile: %+v", m)
	}
	for off := range uint64(100) {
		if c.get(2, off*4096) != nil {
			t.Fatal("evicted file's block still cached")
		}
		if c.get(3, off*4096) == nil {
			t.Fatal("other file's block evicted")
		}
	}
}

func TestCacheZeroCapacity(t *testing.T) {
	c := NewCache(0)
	c.set(1, 0, []byte("x"))
	if c.get(1, 0) != nil || c.Metrics().Count != 0 {
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
				v, kind, found, err := tb.r.Get(e.key.UserKey, e.key.SeqNum())
				if err != nil || !found || kind != e.key.Kind() || !bytes.Equal(v, e.value) {
					errs <- fmt.Errorf("Get(%s) = %q %s %v %v", e.key, v, kind, found, err)
					return
				}
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
// intact after its block is evicted and the cache reuses its space.
func TestGetValueOutlivesEviction(t *testing.T) {
	cache := NewCache(1 << 20)
	r, all := cachedTable(t, cache)
	defer r.Close()
	v, _, found, err := r.Get([]byte("k000000"), 1)
	if err != nil || !found {
		t.Fatal(found, err)
	}
	cache.EvictFile(1)
	for _, e := range all {
		if _, _, _, err := r.Get(e.key.UserKey, 1); err != nil {
			t.Fatal(err)
		}
	}
	if string(v) != "value-000000" {
		t.Fatalf("value changed to %q", v)
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
