package memtable

import (
	"errors"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// The benchmarks use the engine's fillrandom/readrandom shape: 30-byte keys
// and 256-byte values, in a table already holding benchEntries entries, and
// also, as sub-benchmarks, in one holding a default-sized (64 MiB) arena's
// worth, which is what the engine actually reads and writes.
const (
	benchEntries  = 1 << 20
	benchKeyLen   = 30
	benchValueLen = 256
)

// benchSizes are the table sizes each benchmark runs at.
var benchSizes = []struct {
	name    string
	entries int
}{
	{"entries=1M", benchEntries},
	{"entries=64MiB", 64 << 20 / 320}, // 320 bytes: a typical node of this shape
}

// benchKey writes the key numbered id into buf (benchKeyLen bytes):
// "usertable:" and 20 decimal digits, like db_bench keys, without allocating.
func benchKey(buf []byte, id uint64) []byte {
	buf = append(buf[:0], "usertable:"...)
	var digits [20]byte
	for i := len(digits) - 1; i >= 0; i-- {
		digits[i] = byte('0' + id%10)
		id /= 10
	}
	return append(buf, digits[:]...)
}

// benchRand is a splitmix64 stream: deterministic and allocation-free.
type benchRand uint64

func (r *benchRand) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// benchFill returns a memtable holding n random entries with room for extra
// more, and the ids of the keys it holds (seqnum i+1 is ids[i]).
func benchFill(tb testing.TB, n, extra int) (*MemTable, []uint64) {
	m := New((n + extra) * EntrySize(benchKeyLen, benchValueLen))
	value := make([]byte, benchValueLen)
	ids := make([]uint64, n)
	rng := benchRand(1)
	var key []byte
	for i := range ids {
		ids[i] = rng.next()
		key = benchKey(key, ids[i])
		if err := m.Add(base.MakeInternalKey(key, base.SeqNum(i+1), base.KindSet), value); err != nil {
			tb.Fatal(err)
		}
	}
	return m, ids
}

type benchFixture struct {
	m   *MemTable
	ids []uint64
}

// benchTables caches the read benchmarks' fixtures, which they never modify,
// by size.
var benchTables = struct {
	sync.Mutex
	byEntries map[int]benchFixture
}{byEntries: map[int]benchFixture{}}

func benchTable(b *testing.B, entries int) (*MemTable, []uint64) {
	benchTables.Lock()
	defer benchTables.Unlock()
	f, ok := benchTables.byEntries[entries]
	if !ok {
		f.m, f.ids = benchFill(b, entries, 0)
		benchTables.byEntries[entries] = f
	}
	return f.m, f.ids
}

// benchReads runs read benchmark fn at every size.
func benchReads(b *testing.B, fn func(b *testing.B, m *MemTable, ids []uint64)) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			m, ids := benchTable(b, size.entries)
			b.ReportAllocs()
			b.ResetTimer()
			fn(b, m, ids)
		})
	}
}

// BenchmarkAdd measures random inserts into a table that already holds the
// sub-benchmark's number of entries (a new prefilled table replaces it,
// untimed, each time that many more have been added).
func BenchmarkAdd(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			m, _ := benchFill(b, size.entries, size.entries)
			value := make([]byte, benchValueLen)
			key := make([]byte, 0, benchKeyLen)
			rng := benchRand(2)
			seq := base.SeqNum(size.entries)
			b.ReportAllocs()
			b.SetBytes(benchKeyLen + benchValueLen)
			b.ResetTimer()
			for range b.N {
				seq++
				key = benchKey(key, rng.next())
				err := m.Add(base.MakeInternalKey(key, seq, base.KindSet), value)
				if errors.Is(err, ErrArenaFull) {
					b.StopTimer()
					m, _ = benchFill(b, size.entries, size.entries)
					b.StartTimer()
					err = m.Add(base.MakeInternalKey(key, seq, base.KindSet), value)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAddSequential measures ascending inserts (a sequential load, or
// one sorted batch), which skip the search thanks to the cached splice.
func BenchmarkAddSequential(b *testing.B) {
	const capacity = benchEntries
	newTable := func() *MemTable { return New(capacity * EntrySize(benchKeyLen, benchValueLen)) }
	m := newTable()
	value := make([]byte, benchValueLen)
	key := make([]byte, 0, benchKeyLen)
	b.ReportAllocs()
	b.SetBytes(benchKeyLen + benchValueLen)
	b.ResetTimer()
	for i := range b.N {
		key = benchKey(key, uint64(i))
		ikey := base.MakeInternalKey(key, base.SeqNum(i+1), base.KindSet)
		err := m.Add(ikey, value)
		if errors.Is(err, ErrArenaFull) {
			b.StopTimer()
			m = newTable()
			b.StartTimer()
			err = m.Add(ikey, value)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet measures point reads of random present keys.
func BenchmarkGet(b *testing.B) {
	benchReads(b, func(b *testing.B, m *MemTable, ids []uint64) {
		key := make([]byte, 0, benchKeyLen)
		rng := benchRand(3)
		for range b.N {
			key = benchKey(key, ids[rng.next()%uint64(len(ids))])
			if _, _, ok := m.Get(key, base.SeqNumMax); !ok {
				b.Fatalf("Get(%q) found nothing", key)
			}
		}
	})
}

// BenchmarkGetMissing measures point reads of absent keys.
func BenchmarkGetMissing(b *testing.B) {
	benchReads(b, func(b *testing.B, m *MemTable, ids []uint64) {
		key := make([]byte, 0, benchKeyLen)
		rng := benchRand(4)
		for range b.N {
			key = benchKey(key, rng.next())
			if _, _, ok := m.Get(key, base.SeqNumMax); ok {
				b.Fatalf("Get(%q) found an absent key", key)
			}
		}
	})
}

// BenchmarkSeekGE measures iterator seeks to random present keys.
func BenchmarkSeekGE(b *testing.B) {
	benchReads(b, func(b *testing.B, m *MemTable, ids []uint64) {
		it := m.NewIter(nil, nil)
		key := make([]byte, 0, benchKeyLen)
		rng := benchRand(5)
		for range b.N {
			key = benchKey(key, ids[rng.next()%uint64(len(ids))])
			if !it.SeekGE(key) {
				b.Fatalf("SeekGE(%q) found nothing", key)
			}
		}
	})
}

// BenchmarkIterNext measures forward steps.
func BenchmarkIterNext(b *testing.B) {
	benchReads(b, func(b *testing.B, m *MemTable, _ []uint64) {
		it := m.NewIter(nil, nil)
		it.First()
		for range b.N {
			if !it.Next() {
				it.First()
			}
			_ = it.Key()
		}
	})
}

// BenchmarkIterPrev measures backward steps.
func BenchmarkIterPrev(b *testing.B) {
	benchReads(b, func(b *testing.B, m *MemTable, _ []uint64) {
		it := m.NewIter(nil, nil)
		it.Last()
		for range b.N {
			if !it.Prev() {
				it.Last()
			}
			_ = it.Key()
		}
	})
}

// BenchmarkGetParallel measures point reads from all CPUs at once, as
// concurrent readers of one memtable.
func BenchmarkGetParallel(b *testing.B) {
	m, ids := benchTable(b, benchEntries)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := make([]byte, 0, benchKeyLen)
		rng := benchRand(6)
		for pb.Next() {
			key = benchKey(key, ids[rng.next()%uint64(len(ids))])
			if _, _, ok := m.Get(key, base.SeqNumMax); !ok {
				b.Errorf("Get(%q) found nothing", key)
				return
			}
		}
	})
}
