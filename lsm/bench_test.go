package lsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/rusage"
	"github.com/tabuladb/tabula/wal"
)

// benchKey returns a key shaped like a clustered-index key.
func benchKey(buf []byte, i uint64) []byte {
	return fmt.Appendf(buf[:0], "devstoreaccount1/t0001/pk%06d/rk%08d", i%10000, i)
}

// benchValue is 256 bytes that compress about 2:1: half random, half pattern.
func benchValue(rng *rand.Rand) []byte {
	v := make([]byte, 256)
	for i := 0; i < 128; i += 8 {
		binary.LittleEndian.PutUint64(v[i:], rng.Uint64())
	}
	for i := 128; i < 256; i++ {
		v[i] = byte('a' + i%8)
	}
	return v
}

func benchOptions() *Options {
	return &Options{MemTableSize: 64 << 20, CacheSize: 64 << 20}
}

func BenchmarkFillRandom(b *testing.B) {
	db := openTestDB(b, b.TempDir(), benchOptions())
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := benchValue(rng)
	var key []byte
	wo := &WriteOptions{}
	b.SetBytes(int64(len(benchKey(nil, 0)) + len(val)))
	b.ResetTimer()
	for range b.N {
		key = benchKey(key, rng.Uint64N(1<<40))
		if err := db.Set(key, val, wo); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFillRandomLatency is BenchmarkFillRandom with each set timed:
// it reports their median and p99, and the median of the sets whose WAL
// record filled a block (about one in a hundred, so where the p99 sits
// if they pay for waking the WAL's background goroutine: see
// wal.handOffBlocks).
func BenchmarkFillRandomLatency(b *testing.B) {
	db := openTestDB(b, b.TempDir(), benchOptions())
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := benchValue(rng)
	var key []byte
	wo := &WriteOptions{}
	all := make([]time.Duration, 0, b.N)
	var filling []time.Duration
	b.SetBytes(int64(len(benchKey(nil, 0)) + len(val)))
	b.ResetTimer()
	for range b.N {
		key = benchKey(key, rng.Uint64N(1<<40))
		log := db.log.writer
		before := log.Size()
		start := time.Now()
		if err := db.Set(key, val, wo); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		all = append(all, d)
		if db.log.writer == log && before/wal.BlockSize != log.Size()/wal.BlockSize {
			filling = append(filling, d)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(quantile(all, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(quantile(all, 0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(quantile(filling, 0.5).Nanoseconds()), "filling-p50-ns")
}

// quantile sorts d and returns its q-quantile, 0 if it is empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

func BenchmarkBatch100(b *testing.B) {
	db := openTestDB(b, b.TempDir(), benchOptions())
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := benchValue(rng)
	var key []byte
	batch := db.NewBatch()
	wo := &WriteOptions{}
	b.ResetTimer()
	for range b.N {
		batch.Reset()
		for range 100 {
			key = benchKey(key, rng.Uint64N(1<<40))
			batch.Set(key, val)
		}
		if err := db.Apply(batch, wo); err != nil {
			b.Fatal(err)
		}
	}
}

// filledDB returns a DB holding n keys benchKey(0..n-1), flushed and compacted.
func filledDB(b *testing.B, n int) *DB {
	b.Helper()
	db := openTestDB(b, b.TempDir(), benchOptions())
	rng := rand.New(rand.NewPCG(3, 4))
	val := benchValue(rng)
	batch := db.NewBatch()
	var key []byte
	for i := range n {
		key = benchKey(key, uint64(i))
		batch.Set(key, val)
		if batch.Len() == 1000 {
			if err := db.Apply(batch, &WriteOptions{}); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if err := db.Apply(batch, &WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := db.Compact(nil, nil); err != nil {
		b.Fatal(err)
	}
	return db
}

const benchKeys = 200_000

func BenchmarkReadRandom(b *testing.B) {
	db := filledDB(b, benchKeys)
	defer db.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	var key []byte
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		key = benchKey(key, rng.Uint64N(benchKeys))
		if _, err := db.Get(key); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadMissing(b *testing.B) {
	db := filledDB(b, benchKeys)
	defer db.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	var key []byte
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		key = benchKey(key, benchKeys+rng.Uint64N(benchKeys))
		if _, err := db.Get(key); err != ErrNotFound {
			b.Fatal(err)
		}
	}
}

func BenchmarkScan100(b *testing.B) {
	db := filledDB(b, benchKeys)
	defer db.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	var key []byte
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		key = benchKey(key, rng.Uint64N(benchKeys))
		it := db.NewIter(nil)
		n := 0
		for ok := it.SeekGE(key); ok && n < 100; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFillSync measures synced single-key writes from 1 and 8
// goroutines: with group commit, 8 writers share fsyncs.
func BenchmarkFillSync(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db := openTestDB(b, b.TempDir(), benchOptions())
			defer db.Close()
			val := benchValue(rand.New(rand.NewPCG(1, 1)))
			var next sync.Mutex
			i := uint64(0)
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + writers - 1) / writers
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var key []byte
					for range per {
						next.Lock()
						i++
						k := i
						next.Unlock()
						key = benchKey(key, k)
						if err := db.Set(key, val, nil); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkYCSBA is YCSB workload A on a filled DB: half gets, half
// unsynced sets of existing keys, Zipf-distributed, from four goroutines
// per core (as the engine suite's ycsba runs four on two cores).
func BenchmarkYCSBA(b *testing.B) {
	db := filledDB(b, benchKeys)
	defer db.Close()
	var seed atomic.Uint64
	b.SetParallelism(2)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(7, seed.Add(1)))
		zipf := rand.NewZipf(rng, 1.1, 1, benchKeys-1)
		val := benchValue(rng)
		wo := &WriteOptions{}
		var key []byte
		for pb.Next() {
			key = benchKey(key, zipf.Uint64())
			if rng.IntN(2) == 0 {
				if _, err := db.Get(key); err != nil {
					b.Fatal(err)
				}
			} else if err := db.Set(key, val, wo); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSyncedWritesOverRecycledSegments measures synced single-key
// writes with memtables small enough (1 MiB) that WAL segments rotate
// every few thousand writes: their files reused (the default) or new
// ones. It reports the process's CPU time per write beside the time.
func BenchmarkSyncedWritesOverRecycledSegments(b *testing.B) {
	for _, tc := range []struct {
		name     string
		recycled int
	}{{"recycled", 0}, {"new-files", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			opts := &Options{MemTableSize: 1 << 20, InitialMemTableSize: -1, RecycledWALSegments: tc.recycled}
			db := openTestDB(b, b.TempDir(), opts)
			defer db.Close()
			val := benchValue(rand.New(rand.NewPCG(1, 1)))
			var key []byte
			// Past the first rotations, whose segments have no retired
			// file to reuse yet.
			for i := range uint64(20000) {
				key = benchKey(key, i)
				if err := db.Set(key, val, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			cpu := rusage.CPU()
			for i := range uint64(b.N) {
				key = benchKey(key, i)
				if err := db.Set(key, val, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rusage.CPU()-cpu)/float64(b.N), "cpu-ns/op")
			if tc.recycled == 0 && db.Metrics().WAL.Reused == 0 {
				b.Fatal("no segment reused a retired one's file")
			}
		})
	}
}
