package sstable

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

const benchKeys = 100_000

func benchKey(i int) []byte { return fmt.Appendf(nil, "user%012d", i*7) }

// benchTable is a table of benchKeys 16-byte keys with 100-byte values, the
// shape of the engine benchmarks.
func benchTable(b *testing.B, comp Compression) []byte {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{Compression: comp})
	value := make([]byte, 100)
	for i := range benchKeys {
		for j := range value {
			value[j] = byte('a' + rng.IntN(4))
		}
		if err := w.Add(base.MakeInternalKey(benchKey(i), base.SeqNum(i+1), base.KindSet), value); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func benchReader(b *testing.B, comp Compression, cache *Cache) *Reader {
	data := benchTable(b, comp)
	r, err := NewReader(newMemFile(data), int64(len(data)), ReaderOptions{Cache: cache, FileNum: 1})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkGet reads present keys with every block in the cache.
func BenchmarkGet(b *testing.B) {
	for _, comp := range []Compression{S2Compression, ZstdCompression} {
		b.Run(comp.String(), func(b *testing.B) {
			r := benchReader(b, comp, NewCache(64<<20))
			defer r.Close()
			keys := make([][]byte, 4096)
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range keys {
				keys[i] = benchKey(rng.IntN(benchKeys))
			}
			for i := range benchKeys { // warm the cache
				v, _, _ := r.Get(benchKey(i), base.SeqNumMax)
				v.Release()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				v, found, err := r.Get(keys[i&4095], base.SeqNumMax)
				if !found || err != nil {
					b.Fatal(found, err)
				}
				v.Release()
			}
		})
	}
}

// BenchmarkGetUncached reads present keys without a cache: every Get reads
// and decompresses its block.
func BenchmarkGetUncached(b *testing.B) {
	r := benchReader(b, S2Compression, nil)
	defer r.Close()
	b.ReportAllocs()
	rng := rand.New(rand.NewPCG(5, 6))
	for b.Loop() {
		v, found, err := r.Get(benchKey(rng.IntN(benchKeys)), base.SeqNumMax)
		if !found || err != nil {
			b.Fatal(found, err)
		}
		v.Release()
	}
}

// BenchmarkGetMissing reads absent keys: the bloom filter answers.
func BenchmarkGetMissing(b *testing.B) {
	r := benchReader(b, S2Compression, NewCache(64<<20))
	defer r.Close()
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user%012d", i*7+3)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, found, err := r.Get(keys[i&4095], base.SeqNumMax); found || err != nil {
			b.Fatal(found, err)
		}
	}
}

// BenchmarkIterNext steps through the table, cached.
func BenchmarkIterNext(b *testing.B) {
	r := benchReader(b, S2Compression, NewCache(64<<20))
	defer r.Close()
	it := r.NewIter(nil, nil)
	defer it.Close()
	it.First()
	b.ReportAllocs()
	for b.Loop() {
		if !it.Next() {
			it.First()
		}
	}
}

// BenchmarkIterPrev steps backwards through the table, cached.
func BenchmarkIterPrev(b *testing.B) {
	r := benchReader(b, S2Compression, NewCache(64<<20))
	defer r.Close()
	it := r.NewIter(nil, nil)
	defer it.Close()
	it.Last()
	b.ReportAllocs()
	for b.Loop() {
		if !it.Prev() {
			it.Last()
		}
	}
}

// BenchmarkScan100 seeks to a random key and reads 100 entries with a new
// iterator each time, like a short range query.
func BenchmarkScan100(b *testing.B) {
	r := benchReader(b, S2Compression, NewCache(64<<20))
	defer r.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = benchKey(rng.IntN(benchKeys - 200))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		it := r.NewIter(nil, nil)
		n := 0
		for ok := it.SeekGE(keys[i&4095]); ok && n < 100; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil || n != 100 {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkWriter(b *testing.B) {
	for _, comp := range []Compression{NoCompression, S2Compression, ZstdCompression} {
		b.Run(comp.String(), func(b *testing.B) {
			keys := make([][]byte, 10000)
			for i := range keys {
				keys[i] = benchKey(i)
			}
			value := bytes.Repeat([]byte("0123456789abcdefghij"), 5)
			b.ReportAllocs()
			b.SetBytes(int64(len(keys) * (16 + 8 + 100)))
			for b.Loop() {
				w := NewWriter(io.Discard, WriterOptions{Compression: comp})
				for i, k := range keys {
					if err := w.Add(base.MakeInternalKey(k, base.SeqNum(i+1), base.KindSet), value); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
