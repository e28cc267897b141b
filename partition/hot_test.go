package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// The writers of one partition enqueue their commits under its latch and
// wait for the fsync outside it (lsm.DB.Enqueue, GetApplied). These tests
// run many writers on one partition on a filesystem whose WAL fsyncs take
// a while, so that writes are often enqueued behind pending ones.

// openSyncFS opens a store on a MemFS whose WAL fsyncs take at least delay
// and can be held (vfs.SyncGate).
func openSyncFS(t *testing.T, opts *Options, delay time.Duration) (*Store, *vfs.SyncGate, *vfs.MemFS) {
	t.Helper()
	mem := vfs.NewMem()
	sfs := vfs.NewSyncGate(mem, ".log", delay)
	var o Options
	if opts != nil {
		o = *opts
	}
	o.LSM.FS = sfs
	o.LSM.MemTableSize = 64 << 10 // writes cross memtable rotations
	s, err := open("db", &o, tuning{persistEvery: 30, mergeMinAge: 2})
	if err != nil {
		t.Fatal(err)
	}
	return s, sfs, mem
}

func counterOf(t *testing.T, se StoredEntity) int {
	t.Helper()
	x, err := se.Entity()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := x.Get("Count")
	return int(v.Int32())
}

// Many writers increment one counter with If-Match merges of the ETag
// they read, retrying when another write got in first; some do it in a
// batch that also inserts a row. Every acknowledged increment counts
// once: a writer that checks its ETag while the previous write is still
// being synced must see that write.
func TestHotPartitionConditionalIncrements(t *testing.T) {
	s, _, _ := openSyncFS(t, nil, 200*time.Microsecond)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "hot"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "hot", Op{Kind: OpInsert, Entity: ent("p", "counter", "Count", 0)})
	const writers, perWriter = 12, 25
	var acked, conflicts atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; {
				cur, err := s.GetEntity(ctx, acct, "hot", "p", "counter")
				if err != nil {
					t.Error(err)
					return
				}
				next := ent("p", "counter", "Count", counterOf(t, cur)+1)
				if w%3 == 0 {
					_, err = s.ExecuteBatch(ctx, acct, "hot", []Op{
						{Kind: OpMerge, Entity: next, IfMatch: cur.ETag()},
						{Kind: OpInsert, Entity: ent("p", fmt.Sprintf("log-%02d-%03d", w, i))},
					})
					var be *BatchError
					if errors.As(err, &be) && be.Index == 0 {
						err = be.Err
					}
				} else {
					_, err = s.MergeEntity(ctx, acct, "hot", next, cur.ETag())
				}
				switch ErrorCode(err) {
				case "":
					if err != nil {
						t.Error(err)
						return
					}
					acked.Add(1)
					i++
				case CodeUpdateConditionNotSatisfied:
					conflicts.Add(1)
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cur, err := s.GetEntity(ctx, acct, "hot", "p", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if n := counterOf(t, cur); n != int(acked.Load()) || n != writers*perWriter {
		t.Fatalf("counter %d after %d acknowledged increments (%d expected)", n, acked.Load(), writers*perWriter)
	}
	logs, _, err := s.QueryEntitiesPage(ctx, acct, "hot", EntityQuery{Filter: "PartitionKey eq 'p' and RowKey ge 'log-' and RowKey lt 'log.'"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (writers + 2) / 3 * perWriter; len(logs) != want {
		t.Fatalf("%d rows inserted by batches, want %d", len(logs), want)
	}
	t.Logf("%d increments, %d conflicts", acked.Load(), conflicts.Load())
}

// Concurrent inserts to one partition, single and in batches, all land,
// each with its own ETag, and the range statistics count each once,
// also while splits and recounts run.
func TestHotPartitionConcurrentInserts(t *testing.T) {
	s, _, _ := openSyncFS(t, &Options{SplitBytes: 16 << 10, SplitOpsPerSecond: 1e9}, 100*time.Microsecond)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "hot"); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 16, 30
	var mu sync.Mutex
	etags := map[string]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				// Mostly the hot partition; a few others, so splits have
				// somewhere to cut.
				pk := "hot"
				if i%5 == 4 {
					pk = fmt.Sprintf("pk%02d", w)
				}
				var res []StoredEntity
				var err error
				if w%4 == 0 {
					res, err = s.ExecuteBatch(ctx, acct, "hot", []Op{
						{Kind: OpInsert, Entity: ent(pk, fmt.Sprintf("w%02d-%03d-a", w, i), "V", strings.Repeat("x", 200))},
						{Kind: OpInsert, Entity: ent(pk, fmt.Sprintf("w%02d-%03d-b", w, i), "V", strings.Repeat("x", 200))},
					})
				} else {
					var r StoredEntity
					r, err = s.InsertEntity(ctx, acct, "hot", ent(pk, fmt.Sprintf("w%02d-%03d", w, i), "V", strings.Repeat("x", 200)))
					res = []StoredEntity{r}
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range res {
					if etags[r.ETag()] {
						t.Errorf("ETag %s returned twice", r.ETag())
					}
					etags[r.ETag()] = true
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			s.maintain(time.Second)
		}
	}
	if t.Failed() {
		return
	}
	want := 0
	for w := range writers {
		n := perWriter
		if w%4 == 0 {
			n *= 2
		}
		want += n
	}
	if len(etags) != want {
		t.Fatalf("%d ETags for %d inserts", len(etags), want)
	}
	var n int64
	for _, r := range checkRanges(t, s, "hot") { // the counts are exact
		n += r.Entities
	}
	if n != int64(want) {
		t.Fatalf("the ranges count %d entities, want %d", n, want)
	}
}

// When the fsync of a write fails, a write to the same entity that
// checked its condition against it while it was pending (an update with
// If-Match "*", which needs the entity to exist) fails too: neither is
// acknowledged, neither becomes visible, and the store stops writing.
// Writes whose condition failed against it fail with the storage error
// too, rather than report a conflict with a write that never happened.
func TestHotPartitionSyncFailure(t *testing.T) {
	// A clock that stands still: no lease renewal (a synced write of its
	// own) gets in the way of the held fsync.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, sfs, mem := openSyncFS(t, &Options{Now: func() time.Time { return now }}, 0)
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "hot"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "hot", Op{Kind: OpInsert, Entity: ent("p", "before")})
	tb, err := s.lookupTable(acct, "hot")
	if err != nil {
		t.Fatal(err)
	}
	key := AppendEntityKey(nil, acct, tb.id, "p", "r")

	sfs.Hold()
	first := make(chan error, 1)
	go func() {
		_, err := s.InsertEntity(ctx, acct, "hot", ent("p", "r", "V", "first"))
		first <- err
	}()
	select { // the insert is enqueued and its fsync held
	case <-sfs.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("the insert never synced")
	}
	second := make(chan error, 1)
	go func() {
		_, err := s.UpdateEntity(ctx, acct, "hot", ent("p", "r", "V", "second"), "*")
		second <- err
	}()
	// The update found the pending insert and enqueued behind it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		v, err := s.db.GetApplied(key)
		if err == nil && strings.Contains(string(v), "second") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the update was not enqueued: %q, %v", v, err)
		}
	}
	if _, err := s.GetEntity(ctx, acct, "hot", "p", "r"); ErrorCode(err) != CodeResourceNotFound {
		t.Fatalf("a pending write is visible: %v", err)
	}
	// Writes whose condition fails against the pending insert (before or
	// after the failure: the failed insert stays applied in the engine)
	// must not answer EntityAlreadyExists: the insert is never
	// acknowledged, and may be lost.
	third := make(chan error, 1)
	go func() {
		_, err := s.InsertEntity(ctx, acct, "hot", ent("p", "r", "V", "third"))
		third <- err
	}()
	fourth := make(chan error, 1)
	go func() {
		_, err := s.ExecuteBatch(ctx, acct, "hot", []Op{
			{Kind: OpInsert, Entity: ent("p", "r2")},
			{Kind: OpInsert, Entity: ent("p", "r", "V", "fourth")},
		})
		fourth <- err
	}()
	select {
	case err := <-third:
		t.Fatalf("an insert answered (%v) while the write it conflicts with was pending", err)
	case err := <-fourth:
		t.Fatalf("a batch answered (%v) while the write it conflicts with was pending", err)
	case <-time.After(20 * time.Millisecond):
	}

	sfs.Release(syscall.EIO)
	for name, ch := range map[string]chan error{"insert": first, "update": second, "conflicting insert": third, "conflicting batch": fourth} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatalf("the %s was acknowledged after the fsync failed", name)
			}
			if ErrorCode(err) != "" || !errors.Is(err, syscall.EIO) {
				t.Fatalf("the %s failed with %v, want the fsync's failure", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s never returned", name)
		}
	}
	if _, err := s.GetEntity(ctx, acct, "hot", "p", "r"); ErrorCode(err) != CodeResourceNotFound {
		t.Fatalf("a failed write is visible: %v", err)
	}
	if _, err := s.InsertEntity(ctx, acct, "hot", ent("p", "after")); !errors.Is(err, lsm.ErrStopped) {
		t.Fatalf("a write after the failure: %v", err)
	}
	s.Close() // reports the failure

	// On a healthy disk the acknowledged insert is there.
	s, err = open("db", &Options{LSM: lsm.Options{FS: mem}}, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetEntity(ctx, acct, "hot", "p", "before"); err != nil {
		t.Fatalf("an acknowledged insert after reopening: %v", err)
	}
}

// TestRefusalWaitsOnlyForItsPartition: a write refused on one partition
// is answered while another partition's commit is still held in its
// fsync; it waits only for the writes of its own latch.
func TestRefusalWaitsOnlyForItsPartition(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) // no lease renewal
	s, sfs, _ := openSyncFS(t, &Options{Now: func() time.Time { return now }}, 0)
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "quiet"); err != nil {
		t.Fatal(err)
	}
	tb, err := s.lookupTable(acct, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	quiet := "q"
	for i := 0; s.latch.forPartition(acct, tb.id, quiet) == s.latch.forPartition(acct, tb.id, "busy"); i++ {
		quiet = fmt.Sprintf("q%d", i) // a partition on another latch stripe
	}
	mustApply(t, s, "quiet", Op{Kind: OpInsert, Entity: ent(quiet, "r")})

	sfs.Hold()
	held := make(chan error, 1)
	go func() {
		_, err := s.InsertEntity(ctx, acct, "quiet", ent("busy", "r"))
		held <- err
	}()
	select {
	case <-sfs.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("the insert never synced")
	}
	refused := make(chan error, 1)
	go func() {
		_, err := s.InsertEntity(ctx, acct, "quiet", ent(quiet, "r"))
		refused <- err
	}()
	select {
	case err := <-refused:
		if ErrorCode(err) != CodeEntityAlreadyExists {
			t.Errorf("insert of an existing entity: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a refusal on a quiet partition waited for another partition's fsync")
		defer func() { <-refused }() // answered once the fsync is released
	}
	sfs.Release(nil)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}
