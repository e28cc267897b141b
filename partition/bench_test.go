package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Benchmarks run on the OS filesystem (a temporary directory), so synced
// writes pay a real fsync.

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.CreateTable(context.Background(), acct, "bench"); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchFill writes parts partitions of rows entities with a few properties.
func benchFill(b *testing.B, s *Store, parts, rows int) {
	b.Helper()
	for p := range parts {
		for start := 0; start < rows; start += 100 {
			ops := make([]Op, 0, 100)
			for r := start; r < min(rows, start+100); r++ {
				ops = append(ops, Op{Kind: OpInsert, Entity: ent(fmt.Sprintf("p%04d", p), fmt.Sprintf("r%05d", r),
					"Name", fmt.Sprint("name-", r), "Age", r%100, "Score", float64(r)/3, "Active", r%2 == 0)})
			}
			if _, err := s.ExecuteBatch(context.Background(), acct, "bench", ops); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkGetEntity(b *testing.B) {
	s := benchStore(b)
	benchFill(b, s, 10, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.GetEntity(ctx, acct, "bench", fmt.Sprintf("p%04d", i%10), fmt.Sprintf("r%05d", i*7%1000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkInsertEntity(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := ent("p", fmt.Sprintf("r%09d", i), "Name", "name", "Age", 42, "Score", 1.5, "Active", true)
		if _, err := s.InsertEntity(ctx, acct, "bench", e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkBatch100(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	ops := make([]Op, 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for j := range ops {
			ops[j] = Op{Kind: OpInsert, Entity: ent(fmt.Sprint("p", i), fmt.Sprintf("r%03d", j), "Name", "name", "Age", j)}
		}
		if _, err := s.ExecuteBatch(ctx, acct, "bench", ops); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkQueryPartition reads one whole partition of 100 entities.
func BenchmarkQueryPartition(b *testing.B) {
	s := benchStore(b)
	benchFill(b, s, 100, 100)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := 0
		_, err := s.QueryEntities(ctx, acct, "bench", EntityQuery{Filter: fmt.Sprintf("PartitionKey eq 'p%04d'", i%100)},
			func(*StoredEntity) error { n++; return nil })
		if err != nil || n != 100 {
			b.Fatal(n, err)
		}
		i++
	}
}

// BenchmarkFilteredScan scans 10,000 entities with a residual filter that
// keeps 1% of them (one page).
func BenchmarkFilteredScan(b *testing.B) {
	s := benchStore(b)
	benchFill(b, s, 10, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		c, err := s.QueryEntities(ctx, acct, "bench", EntityQuery{Filter: "Age eq 7 and Active eq false"},
			func(*StoredEntity) error { n++; return nil })
		if err != nil || n != 100 || !c.IsZero() {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/entity")
}

// BenchmarkManyTables reads one entity of a random table of 5,000 in a
// store that keeps all of them open and in one that keeps 500: each read
// of the second opens a table more often than not, and closes others.
// open-heap-B/table is the heap the open tables take once every table
// has been read, divided by the number of tables: it is bounded by the
// cache, not by the tables.
func BenchmarkManyTables(b *testing.B) {
	const tables = 5000
	dir := b.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	name := func(i int) string { return fmt.Sprintf("many%05d", i) }
	for i := range tables {
		if _, err := s.CreateTable(ctx, acct, name(i)); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Apply(ctx, acct, name(i), Op{Kind: OpInsert, Entity: ent("p", "r", "N", i)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, cache := range []int{tables, tables / 10} {
		b.Run(fmt.Sprintf("cache=%d", cache), func(b *testing.B) {
			s, err := Open(dir, &Options{TableCacheSize: cache})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			before := liveHeap()
			for i := range tables {
				if _, err := s.GetEntity(ctx, acct, name(i), "p", "r"); err != nil {
					b.Fatal(err)
				}
			}
			opened := liveHeap() - before
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for range b.N {
				if _, err := s.GetEntity(ctx, acct, name(rng.IntN(tables)), "p", "r"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(opened)/tables, "open-heap-B/table")
		})
	}
}

// BenchmarkManySpans measures the span records' cache (span_cache.go):
// 20,000 range groups with a record each (a chain of splits), looked up
// once each after a reopen, then at random. It reports the heap the
// lookups left (cached-heap-B/group), with every record cached (as every
// store did before the cache was bounded) and with a tenth of them, and
// the time of a random lookup: a hit, or nine in ten a read of the store.
func BenchmarkManySpans(b *testing.B) {
	const groups = 20_000
	dir := b.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.CreateTableInGroup(ctx, acct, "Chain", RangeGroup{ID: 1, Voters: []uint64{1}}); err != nil {
		b.Fatal(err)
	}
	for i := 1; i < groups; i++ {
		sctx := WithStamp(ctx, Stamp{Group: uint64(i), Index: 10})
		if err := s.SplitGroupSpan(sctx, uint64(i), uint64(i+1), fmt.Sprintf("k%06d", i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, cache := range []int{groups, groups / 10} {
		b.Run(fmt.Sprintf("cache=%d", cache), func(b *testing.B) {
			s, err := Open(dir, &Options{SpanCacheSize: cache})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			before := liveHeap()
			for g := uint64(1); g <= groups; g++ {
				if _, ok, err := s.GroupSpan(g); err != nil || !ok {
					b.Fatalf("group %d: %v, %v", g, ok, err)
				}
			}
			cached := liveHeap() - before
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for range b.N {
				if _, _, err := s.GroupSpan(1 + rng.Uint64N(groups)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cached)/groups, "cached-heap-B/group")
		})
	}
}

// liveHeap returns the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkCatalogGroups compares listing every range group of 10,000
// tables (TableGroups, which a placement round used to hold for its
// length) with walking them (EachTableGroup): held-B is the heap the
// list keeps alive while its holder uses it, none for the walk, which
// keeps one catalog entry at a time.
func BenchmarkCatalogGroups(b *testing.B) {
	const tables = 10_000
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range tables {
		if _, err := s.CreateTableInGroup(ctx, acct, fmt.Sprintf("t%05d", i), RangeGroup{ID: uint64(i + 1), Voters: []uint64{1, 2, 3}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("list", func(b *testing.B) {
		before := liveHeap()
		groups := s.TableGroups()
		held := liveHeap() - before
		if len(groups) != tables {
			b.Fatalf("%d groups listed", len(groups))
		}
		for range b.N {
			groups = s.TableGroups()
		}
		b.ReportMetric(float64(held)/tables, "held-B/group")
		runtime.KeepAlive(groups)
	})
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			n := 0
			if err := s.EachTableGroup(func(TableGroup) bool { n++; return true }); err != nil || n != tables {
				b.Fatalf("%d groups walked, %v", n, err)
			}
		}
	})
}
