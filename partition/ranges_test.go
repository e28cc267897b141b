package partition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// checkRanges verifies a table's range map: contiguous, split at
// PartitionKeys that exist, and with counts equal to a scan.
func checkRanges(t *testing.T, s *Store, table string) []RangeInfo {
	t.Helper()
	ri, err := s.Ranges(context.Background(), acct, table)
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := s.lookupTable(acct, table)
	if ri[0].StartPartitionKey != "" || ri[len(ri)-1].EndPartitionKey != "" {
		t.Fatalf("ranges do not cover the key space: %+v", ri)
	}
	for i, r := range ri {
		if i > 0 && r.StartPartitionKey != ri[i-1].EndPartitionKey {
			t.Fatalf("ranges %d and %d not contiguous", i-1, i)
		}
		lo, hi := tb.bounds(r.StartPartitionKey, r.EndPartitionKey)
		it := s.db.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
		var n, size int64
		for ok := it.First(); ok; ok = it.Next() {
			if n == 0 && i > 0 {
				k, _ := DecodeEntityKey(it.Key())
				if k.PartitionKey != r.StartPartitionKey {
					t.Fatalf("range %d starts at %q, its first entity is in %q", i, r.StartPartitionKey, k.PartitionKey)
				}
			}
			n++
			size += int64(len(it.Key()) + len(it.Value()))
		}
		it.Close()
		if n != r.Entities || size != r.Bytes {
			t.Fatalf("range %d [%q, %q) counts %d entities %d bytes, scan %d %d", i, r.StartPartitionKey, r.EndPartitionKey, r.Entities, r.Bytes, n, size)
		}
	}
	return ri
}

func fillPartitions(t *testing.T, s *Store, table string, parts, rows, valueSize int) {
	t.Helper()
	for p := range parts {
		for start := 0; start < rows; start += 100 {
			var ops []Op
			for r := start; r < min(rows, start+100); r++ {
				ops = append(ops, Op{Kind: OpInsertOrReplace, Entity: ent(fmt.Sprintf("pk%03d", p), fmt.Sprintf("r%04d", r), "V", strings.Repeat("v", valueSize))})
			}
			if _, err := s.ExecuteBatch(context.Background(), acct, table, ops); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// settle runs maintenance ticks until the range map has not changed for
// longer than the split cooldown.
func settle(t *testing.T, s *Store, table string) int {
	t.Helper()
	prev, same := -1, 0
	for range 500 {
		s.maintain(time.Second)
		ri, _ := s.Ranges(context.Background(), acct, table)
		if len(ri) != prev {
			prev, same = len(ri), 0
		} else if same++; same > 2*splitCooldown {
			return prev
		}
	}
	t.Fatal("ranges never settle")
	return 0
}

func TestRangeSplitAndMerge(t *testing.T) {
	e := newEnv(t, &Options{SplitBytes: 32 << 10, SplitOpsPerSecond: 1e9})
	e.createTable("split")
	s := e.s
	ctx := context.Background()
	fillPartitions(t, s, "split", 20, 30, 200) // ~20 × 7 KiB
	n := settle(t, s, "split")
	ri := checkRanges(t, s, "split")
	if n < 4 {
		t.Fatalf("only %d ranges for ~140 KiB at 32 KiB", n)
	}
	for _, r := range ri {
		if r.Bytes > 32<<10 {
			t.Fatalf("range %+v above SplitBytes", r)
		}
	}
	// Scans cross range boundaries.
	var keys []string
	q := EntityQuery{Top: 37}
	for {
		page, c, err := s.QueryEntitiesPage(ctx, acct, "split", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range page {
			keys = append(keys, x.PartitionKey+"/"+x.RowKey)
		}
		if c.IsZero() {
			break
		}
		q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
	}
	if len(keys) != 600 || !slices.IsSorted(keys) {
		t.Fatalf("scan across ranges: %d keys, sorted %v", len(keys), slices.IsSorted(keys))
	}
	page, _, _ := s.QueryEntitiesPage(ctx, acct, "split", EntityQuery{Filter: "PartitionKey ge 'pk005' and PartitionKey lt 'pk015' and RowKey eq 'r0003'"})
	if len(page) != 10 {
		t.Fatalf("range query across ranges: %d", len(page))
	}

	// The map and its counts survive a restart.
	e.reopen()
	s = e.s
	if after := checkRanges(t, s, "split"); !slices.EqualFunc(after, ri, func(a, b RangeInfo) bool {
		return a.StartPartitionKey == b.StartPartitionKey && a.Entities == b.Entities && a.Bytes == b.Bytes
	}) {
		t.Fatalf("ranges after reopen %+v, before %+v", after, ri)
	}

	// Emptied ranges merge back.
	for p := range 20 {
		for r := range 30 {
			if p < 19 || r > 0 {
				if err := s.DeleteEntity(ctx, acct, "split", fmt.Sprintf("pk%03d", p), fmt.Sprintf("r%04d", r), "*"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if n := settle(t, s, "split"); n != 1 {
		t.Fatalf("%d ranges after emptying the table", n)
	}
	if ri := checkRanges(t, s, "split"); ri[0].Entities != 1 {
		t.Fatalf("merged range %+v", ri[0])
	}
}

// A range busier than SplitOpsPerSecond splits; Ranges reports the load,
// and a range of one partition stays whole however hot.
func TestHotRange(t *testing.T) {
	e := newEnv(t, &Options{SplitOpsPerSecond: 500})
	e.createTable("hot")
	s := e.s
	ctx := context.Background()
	fillPartitions(t, s, "hot", 4, 10, 10)
	for tick := 0; tick < 30; tick++ {
		for range 2000 {
			if _, err := s.GetEntity(ctx, acct, "hot", "pk002", "r0001"); err != nil {
				t.Fatal(err)
			}
		}
		s.maintain(time.Second)
	}
	ri := checkRanges(t, s, "hot")
	var hot *RangeInfo
	for i := range ri {
		if ri[i].StartPartitionKey <= "pk002" && (ri[i].EndPartitionKey == "" || "pk002" < ri[i].EndPartitionKey) {
			hot = &ri[i]
		} else if ri[i].ReadsPerSecond > 100 {
			t.Fatalf("cold range reports load: %+v", ri[i])
		}
	}
	if len(ri) < 2 || hot.ReadsPerSecond < 1000 {
		t.Fatalf("hot partition not reported or not split off: %+v", ri)
	}
	if hot.StartPartitionKey != "pk002" || (hot.EndPartitionKey != "pk003") {
		t.Fatalf("hot partition not isolated: %+v", ri)
	}
}

// Writes racing splits keep the counts exact (they are logged while a
// split scans and credited to the right half).
func TestSplitRacingWrites(t *testing.T) {
	e := newEnv(t, &Options{SplitBytes: 16 << 10, SplitOpsPerSecond: 1e9})
	e.createTable("race")
	s := e.s
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				pk := fmt.Sprintf("pk%02d", (i*7+w)%30)
				var err error
				if i%5 == 4 {
					err = s.DeleteEntity(ctx, acct, "race", pk, fmt.Sprint("w", w, "-", i-1), "*")
					if ErrorCode(err) == CodeResourceNotFound {
						err = nil
					}
				} else {
					_, err = s.InsertOrReplaceEntity(ctx, acct, "race", ent(pk, fmt.Sprint("w", w, "-", i), "V", strings.Repeat("x", 300)))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	ticks := 0
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			s.maintain(time.Second)
			ticks++
		}
	}
	during, _ := s.Ranges(ctx, acct, "race")
	t.Logf("%d ticks and %d ranges while writing", ticks, len(during))
	settle(t, s, "race")
	if ri := checkRanges(t, s, "race"); len(ri) < 2 {
		t.Fatalf("no split: %+v", ri)
	}
}

// After a crash the persisted counts are stale; the next Open finds the
// run marker and the maintenance goroutine recounts.
func TestRecountAfterCrash(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("crash")
	fillPartitions(t, e.s, "crash", 3, 50, 20)
	id := func() uint64 { tb, _ := e.s.lookupTable(acct, "crash"); return tb.id }()
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	// Simulate what a crash leaves: the marker, and counts from long ago.
	db, err := lsm.Open("db", &lsm.Options{FS: e.fs})
	if err != nil {
		t.Fatal(err)
	}
	stale := []*rangeState{{}}
	stale[0].entities.Store(7)
	stale[0].bytes.Store(1)
	if err := db.Set(idKey(nsRanges, id), encodeRangeMap(stale), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(metaKey(metaRunning), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	if !e.s.needRecount {
		t.Fatal("crash not detected")
	}
	e.s.maintain(time.Second)
	if ri := checkRanges(t, e.s, "crash"); ri[0].Entities != 150 {
		t.Fatalf("recount: %+v", ri)
	}
	e.reopen()
	if e.s.needRecount {
		t.Fatal("clean close still asks for a recount")
	}
}

// The split point is the PartitionKey boundary nearest the byte midpoint,
// never r's first partition.
func TestFindSplit(t *testing.T) {
	for _, c := range []struct {
		sizes []int // entities per partition pk000, pk001, ...
		want  string
	}{
		{[]int{10, 10, 80}, "pk002"},
		{[]int{80, 10, 10}, "pk001"},
		{[]int{30, 30, 40}, "pk002"},
		{[]int{40, 30, 30}, "pk001"},
		{[]int{45, 10, 45}, "pk001"}, // ties go left
		{[]int{100}, ""},
	} {
		e := newEnv(t, nil)
		e.createTable("fsp")
		for p, n := range c.sizes {
			for r := range n {
				mustApply(t, e.s, "fsp", Op{Kind: OpInsert, Entity: ent(fmt.Sprintf("pk%03d", p), fmt.Sprintf("r%04d", r))})
			}
		}
		tb, _ := e.s.lookupTable(acct, "fsp")
		r := tb.rangeList()[0]
		snap := e.s.db.NewSnapshot()
		_, total, _, err := e.s.countRange(snap, tb, r)
		if err != nil {
			t.Fatal(err)
		}
		at, n, size, err := e.s.findSplit(snap, tb, r, total)
		snap.Close()
		if err != nil || at != c.want {
			t.Fatalf("%v: split at %q, want %q (%v)", c.sizes, at, c.want, err)
		}
		if at != "" && (n <= 0 || size <= 0 || size >= total) {
			t.Fatalf("%v: left half %d entities %d bytes of %d", c.sizes, n, size, total)
		}
	}
}

// The maintenance goroutine splits on its own.
func TestBackgroundMaintenance(t *testing.T) {
	env := newEnvTuned(t, &Options{SplitBytes: 16 << 10}, tuning{tick: 5 * time.Millisecond, persistEvery: 3, mergeMinAge: 1000})
	env.createTable("bgm")
	fillPartitions(t, env.s, "bgm", 10, 20, 200)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ri, _ := env.s.Ranges(context.Background(), acct, "bgm")
		if len(ri) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no background splits: %+v", ri)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
