package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// splitChain splits group 5 of table "Chain" (created in it) n times, each
// split's child split again at the next key: group 5 holds [, k01), group
// 101 [k01, k02), and so on, group 100+n [kn, ); it returns the spans by
// group.
func splitChain(t testing.TB, e *testEnv, n int) map[uint64]Span {
	t.Helper()
	e.createTableInGroup("Chain", 5)
	want := map[uint64]Span{}
	parent, low := uint64(5), ""
	for i := 1; i <= n; i++ {
		child, at := uint64(100+i), fmt.Sprintf("k%02d", i)
		if err := e.s.SplitGroupSpan(WithStamp(context.Background(), Stamp{Group: parent, Index: uint64(10 + i)}), parent, child, at); err != nil {
			t.Fatal(err)
		}
		want[parent] = Span{Account: acct, Table: "Chain", LowPartitionKey: low, HighPartitionKey: at}
		parent, low = child, at
	}
	want[parent] = Span{Account: acct, Table: "Chain", LowPartitionKey: low}
	return want
}

// checkSpans checks every group's span and freeze against want and
// frozen, that the cache holds no more than its limit and an eighth, and
// that every entry it holds is the store's record.
func checkSpans(t testing.TB, s *Store, want map[uint64]Span, frozen map[uint64]bool) {
	t.Helper()
	for g, sp := range want {
		got, ok, err := s.GroupSpan(g)
		if err != nil || !ok || got != sp {
			t.Fatalf("GroupSpan(%d) = %+v, %v, %v; want %+v", g, got, ok, err, sp)
		}
		if f, err := s.GroupFrozen(g); err != nil || f != frozen[g] {
			t.Fatalf("GroupFrozen(%d) = %v, %v; want %v", g, f, err, frozen[g])
		}
		if limit := s.opts.SpanCacheSize; s.spans.count.Load() > int64(limit+limit/8) {
			t.Fatalf("%d span records cached, past the limit of %d", s.spans.count.Load(), limit)
		}
	}
	if s.HasFrozen() != (len(frozen) > 0) || s.spans.frozen.Load() != int64(len(frozen)) {
		t.Fatalf("%d frozen spans counted; want %d", s.spans.frozen.Load(), len(frozen))
	}
	cached := 0
	s.spans.entries.Range(func(k, v any) bool {
		cached++
		e := v.(*spanEntry)
		s.spans.mu.Lock()
		s.spans.entries.Delete(k) // read the store, not the entry
		g, recorded, err := s.spanRecordLocked(k.(uint64))
		s.spans.entries.Store(k, e)
		s.spans.mu.Unlock()
		if err != nil || recorded != e.recorded || fmt.Sprint(g) != fmt.Sprint(e.g) {
			t.Fatalf("group %d cached as %+v (recorded %v); the store has %+v (recorded %v, %v)", k, e.g, e.recorded, g, recorded, err)
		}
		return true
	})
	if int64(cached) != s.spans.count.Load() {
		t.Fatalf("%d entries cached, counted %d", cached, s.spans.count.Load())
	}
}

// TestSpanCacheBounded: with four span records cached at most, forty
// split groups read back their spans from the store, freezes and a merge
// keep the frozen count without a walk of the records, and a reopen
// counts them again.
func TestSpanCacheBounded(t *testing.T) {
	e := newEnv(t, &Options{SpanCacheSize: 4})
	want := splitChain(t, e, 40)
	frozen := map[uint64]bool{}
	checkSpans(t, e.s, want, frozen)
	ctx := context.Background()
	for _, g := range []uint64{107, 120, 131} {
		if err := e.s.FreezeGroupSpan(WithStamp(ctx, Stamp{Group: g, Index: 100}), g); err != nil {
			t.Fatal(err)
		}
		frozen[g] = true
	}
	checkSpans(t, e.s, want, frozen)
	// Group 106 takes 107's span; 107's record goes.
	if err := e.s.MergeGroupSpan(WithStamp(ctx, Stamp{Group: 106, Index: 100}), 106, 107, "k07"); err != nil {
		t.Fatal(err)
	}
	want[106] = Span{Account: acct, Table: "Chain", LowPartitionKey: "k06", HighPartitionKey: "k08"}
	delete(want, 107)
	delete(frozen, 107)
	checkSpans(t, e.s, want, frozen)
	if recorded := mustRecorded(t, e.s, 107); recorded {
		t.Fatal("the merged group's record is still there")
	}
	if merged := mustMerged(t, e.s, 106); len(merged) != 1 || merged[0] != 107 {
		t.Fatalf("group 106 merged %v; want [107]", merged)
	}
	if err := e.s.ForgetGroups([]uint64{120, 121, 120}); err != nil { // a group named twice counts once
		t.Fatal(err)
	}
	delete(frozen, 120)
	delete(want, 120)
	delete(want, 121)
	checkSpans(t, e.s, want, frozen)
	e.reopen()
	checkSpans(t, e.s, want, frozen)
}

// TestSpanCacheUnderConcurrentReads (-race): readers looking up random
// groups of a chain while it is split never leave the cache holding a
// record older than the store's: a fill that read the store before a
// split would otherwise cache a child as having no record.
func TestSpanCacheUnderConcurrentReads(t *testing.T) {
	e := newEnv(t, &Options{SpanCacheSize: 3})
	const splits = 60
	var wg sync.WaitGroup
	done := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-done:
					return
				default:
				}
				g := uint64(5)
				if i := rng.IntN(splits + 1); i > 0 {
					g = uint64(100 + i)
				}
				if _, _, err := e.s.GroupSpan(g); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	want := splitChain(t, e, splits)
	close(done)
	wg.Wait()
	checkSpans(t, e.s, want, map[uint64]bool{})
}
