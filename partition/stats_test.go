package partition

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// TestStatsCountsSplitsAndMerges: a table that grows splits, one that
// empties merges back, and Stats counts both: the ranges are always one
// more than the splits less the merges.
func TestStatsCountsSplitsAndMerges(t *testing.T) {
	e := newEnv(t, &Options{SplitBytes: 32 << 10, SplitOpsPerSecond: 1e9})
	s := e.s
	if st := s.Stats(); st != (Stats{}) {
		t.Fatalf("stats of an empty store: %+v", st)
	}
	e.createTable("grow")
	e.createTable("other")
	fillPartitions(t, s, "grow", 20, 30, 200)
	n := settle(t, s, "grow")
	st := s.Stats()
	if st.Tables != 2 || st.Ranges != n+1 || st.Splits < 3 || int64(n) != 1+st.Splits-st.Merges {
		t.Fatalf("after growing to %d ranges (and a table of one): %+v", n, st)
	}
	ctx := context.Background()
	for p := range 20 {
		for r := range 30 {
			if err := s.DeleteEntity(ctx, acct, "grow", fmt.Sprintf("pk%03d", p), fmt.Sprintf("r%04d", r), "*"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := settle(t, s, "grow"); n != 1 {
		t.Fatalf("%d ranges after emptying the table", n)
	}
	after := s.Stats()
	if after.Ranges != 2 || after.Splits != after.Merges || after.Merges < st.Splits {
		t.Fatalf("after merging back: %+v (before %+v)", after, st)
	}
	if err := s.DeleteTable(ctx, acct, "other"); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats(); got.Tables != 1 || got.Ranges != 1 {
		t.Fatalf("after deleting a table: %+v", got)
	}
}

// TestStatsCountsLatchWaits: a write that finds its partition's latch
// held waits, and is counted with its wait; uncontended writes are not.
func TestStatsCountsLatchWaits(t *testing.T) {
	e := newEnv(t, nil)
	s := e.s
	e.createTable("hot")
	for i := range 5 {
		mustApply(t, s, "hot", Op{Kind: OpInsert, Entity: ent("p", fmt.Sprint(i))})
	}
	if st := s.Stats(); st.LatchWaits != 0 || st.LatchWaitTime != 0 {
		t.Fatalf("uncontended writes counted as waits: %+v", st)
	}
	tb, _ := s.lookupTable(acct, "hot")
	l := s.latch.forPartition(acct, tb.id, "p")
	l.Lock()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.Apply(context.Background(), acct, "hot", Op{Kind: OpInsert, Entity: ent("p", "waiting")})
		done <- err
	}()
	const held = 30 * time.Millisecond
	time.Sleep(held)
	select {
	case err := <-done:
		t.Fatalf("the write finished under a held latch: %v", err)
	default:
	}
	l.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The wait began after the goroutine started, and ended before the
	// write returned: it is counted, and no longer than that.
	if st := s.Stats(); st.LatchWaits != 1 || st.LatchWaitTime <= 0 || st.LatchWaitTime > time.Since(start) {
		t.Fatalf("one write waited for the latch, about %v: %+v", held, st)
	}
}

// TestReady: an open store is ready; one whose WAL fsync failed is not
// (the engine's sticky error), nor a closed one.
func TestReady(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem(), 1)
	s, err := open("db", &Options{LSM: lsm.Options{FS: efs}}, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "ready"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("a healthy store: %v", err)
	}
	efs.Inject(vfs.Fault{Op: vfs.OpSync, Match: ".log", Sticky: true})
	if _, err := s.Apply(ctx, acct, "ready", Op{Kind: OpInsert, Entity: ent("p", "r")}); err == nil {
		t.Fatal("a write succeeded on a failed disk")
	}
	err = s.Ready()
	if err == nil || !errors.Is(err, s.db.Err()) {
		t.Fatalf("Ready after a failed fsync: %v (the engine's error: %v)", err, s.db.Err())
	}
	s.Close() // fails: the disk is gone
	if err := s.Ready(); !errors.Is(err, lsm.ErrClosed) {
		t.Fatalf("Ready after Close: %v", err)
	}
}
