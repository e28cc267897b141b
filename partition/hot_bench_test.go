package partition

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// hotWriters is the number of concurrent clients of the hot-partition
// benchmarks: enough for group commit to matter.
const hotWriters = 16

// runWriters runs b.N calls of op spread over hotWriters goroutines; op
// gets the call's number, unique in the run. It reports the rate as
// writes/s (operations, not entities).
func runWriters(b *testing.B, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	b.ResetTimer()
	for range hotWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					once.Do(func() { failed = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// benchHotPartition runs write, from hotWriters concurrent writers, synced,
// on the OS filesystem, with two key layouts. "one-partition" puts every
// write in one PartitionKey, so every write contends for one partition
// latch; "scattered" gives each write its own PartitionKey, the control:
// the writers then share only the engine's group commit. The ratio of the
// two is what serializing a partition costs. write gets the store, the
// PartitionKey and a number unique in the run.
func benchHotPartition(b *testing.B, write func(s *Store, pk string, i int) error) {
	for _, c := range []struct {
		name string
		pk   func(i int) string
	}{
		{"one-partition", func(int) string { return "hot" }},
		{"scattered", func(i int) string { return fmt.Sprintf("p%09d", i) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b)
			runWriters(b, func(i int) error { return write(s, c.pk(i), i) })
		})
	}
}

// BenchmarkHotPartitionInsert inserts distinct RowKeys (see
// benchHotPartition).
func BenchmarkHotPartitionInsert(b *testing.B) {
	ctx := context.Background()
	benchHotPartition(b, func(s *Store, pk string, i int) error {
		e := ent(pk, fmt.Sprintf("r%09d", i), "Name", "name", "Age", 42, "Score", 1.5, "Active", true)
		_, err := s.InsertEntity(ctx, acct, "bench", e)
		return err
	})
}

// BenchmarkHotPartitionBatch is BenchmarkHotPartitionInsert for entity
// group transactions of 10 inserts each (the metric counts batches).
func BenchmarkHotPartitionBatch(b *testing.B) {
	ctx := context.Background()
	benchHotPartition(b, func(s *Store, pk string, i int) error {
		ops := make([]Op, 10)
		for j := range ops {
			ops[j] = Op{Kind: OpInsert, Entity: ent(pk, fmt.Sprintf("r%09d-%02d", i, j), "Name", "name", "Age", j)}
		}
		_, err := s.ExecuteBatch(ctx, acct, "bench", ops)
		return err
	})
}
