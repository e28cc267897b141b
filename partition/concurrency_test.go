package partition

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

// Many writers updating one entity with the ETag they read: for every ETag
// tried, exactly one writer wins, and no update is lost.
func TestOptimisticConcurrency(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("occ")
	s := e.s
	ctx := context.Background()
	mustApply(t, s, "occ", Op{Kind: OpInsert, Entity: ent("p", "r", "Count", 0)})
	var mu sync.Mutex
	wins := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				cur, err := s.GetEntity(ctx, acct, "occ", "p", "r")
				if err != nil {
					t.Error(err)
					return
				}
				x, _ := cur.Entity()
				n, _ := x.Get("Count")
				_, err = s.UpdateEntity(ctx, acct, "occ", ent("p", "r", "Count", int(n.Int32())+1, "By", w), cur.ETag())
				mu.Lock()
				switch ErrorCode(err) {
				case "":
					wins[cur.ETag()]++
				case CodeUpdateConditionNotSatisfied:
					wins[cur.ETag()] += 0
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for etag, n := range wins {
		if n != 1 {
			t.Fatalf("ETag %s: %d winners", etag, n)
		}
		total += n
	}
	cur, _ := s.GetEntity(ctx, acct, "occ", "p", "r")
	x, _ := cur.Entity()
	if n, _ := x.Get("Count"); int(n.Int32()) != total {
		t.Fatalf("count %d after %d successful updates", n.Int32(), total)
	}
	t.Logf("%d of %d updates won", total, 8*40)
	if _, seen := wins[cur.ETag()]; seen {
		t.Fatal("the final ETag was also the condition of an update that won")
	}
}

// Queries racing batches never see part of a batch: every batch sets V to
// one value in all 50 entities of the partition.
func TestBatchIsolation(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("iso")
	s := e.s
	ctx := context.Background()
	const rows = 50
	batch := func(v int, kind OpKind) []Op {
		ops := make([]Op, rows)
		for i := range ops {
			ops[i] = Op{Kind: kind, Entity: ent("P", fmt.Sprintf("r%02d", i), "V", v)}
		}
		return ops
	}
	if _, err := s.ExecuteBatch(ctx, acct, "iso", batch(0, OpInsert)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		for v := 1; v <= 150; v++ {
			kind := OpInsertOrReplace
			if v%2 == 0 {
				kind = OpInsertOrMerge
			}
			if _, err := s.ExecuteBatch(ctx, acct, "iso", batch(v, kind)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	pointFilter := "PartitionKey eq 'P' and (RowKey eq 'r00' or RowKey eq 'r17' or RowKey eq 'r33' or RowKey eq 'r49')"
	var pages atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				filter, want := "PartitionKey eq 'P'", rows
				if i%2 == 1 {
					filter, want = pointFilter, 4
				}
				page, _, err := s.QueryEntitiesPage(ctx, acct, "iso", EntityQuery{Filter: filter})
				if err != nil {
					t.Error(err)
					return
				}
				if len(page) != want {
					t.Errorf("page of %d entities, want %d", len(page), want)
					return
				}
				var first odata.Value
				for j, se := range page {
					x, _ := se.Entity()
					v, _ := x.Get("V")
					if j == 0 {
						first = v
					} else if !v.Identical(first) {
						t.Errorf("page mixes batches: V=%v and V=%v", first, v)
						return
					}
				}
				pages.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d pages checked", pages.Load())
}
