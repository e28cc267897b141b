package lsm

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// recvErr receives a Wait's result from a goroutine, failing the test
// instead of hanging if none comes.
func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

// wantValue checks what Get, GetApplied, an iterator and snap (if not nil)
// return for key; "" means not found.
func wantValue(t *testing.T, db *DB, snap *Snapshot, key, get, applied string) {
	t.Helper()
	value := func(v []byte, err error) string {
		t.Helper()
		if errors.Is(err, ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatalf("read %q: %v", key, err)
		}
		return string(v)
	}
	if v := value(db.Get([]byte(key))); v != get {
		t.Fatalf("Get(%q) = %q, want %q", key, v, get)
	}
	if v := scanAll(t, db)[key]; v != get {
		t.Fatalf("an iterator finds %q = %q, want %q", key, v, get)
	}
	if snap != nil {
		if v := value(snap.Get([]byte(key))); v != get {
			t.Fatalf("Snapshot.Get(%q) = %q, want %q", key, v, get)
		}
		it := snap.NewIter(nil)
		v := ""
		for ok := it.First(); ok; ok = it.Next() {
			if string(it.Key()) == key {
				v = string(it.Value())
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if v != get {
			t.Fatalf("a snapshot iterator finds %q = %q, want %q", key, v, get)
		}
	}
	if v := value(db.GetApplied([]byte(key))); v != applied {
		t.Fatalf("GetApplied(%q) = %q, want %q", key, v, applied)
	}
}

// TestPendingCommitVisibility: a batch Enqueue accepted is invisible to
// Get, iterators and snapshots until its Wait returns, while its fsync is
// held and while a later batch queues behind it, but GetApplied sees it at
// once; a later unsynced batch is not published before it; the batch may
// be reused right after Enqueue.
func TestPendingCommitVisibility(t *testing.T) {
	gate := vfs.NewSyncGate(vfs.NewMem(), ".log", 0)
	opts := smallOptions()
	opts.FS = gate
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	if err := db.Set([]byte("k"), []byte("v0"), nil); err != nil {
		t.Fatal(err)
	}

	gate.Hold()
	b := db.NewBatch()
	b.Set([]byte("k"), []byte("v1"))
	b.Set([]byte("a"), []byte("1"))
	p, err := db.Enqueue(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := db.NewSnapshot()
	defer snap.Close()
	wantValue(t, db, snap, "k", "v0", "v1")
	wantValue(t, db, snap, "a", "", "1")

	// The same batch, reused before p's Wait, and unsynced.
	b.Reset()
	b.Set([]byte("u"), []byte("unsynced"))
	u, err := db.Enqueue(b, &WriteOptions{Sync: false})
	if err != nil {
		t.Fatal(err)
	}
	uSeq := u.Seq()
	uDone := make(chan error, 1)
	go func() { uDone <- u.Wait() }()

	waDone := make(chan error, 1)
	go func() { waDone <- db.WaitVisible(uSeq) }()
	pDone := make(chan error, 1)
	go func() { pDone <- p.Wait() }()
	select { // p's fsync runs and is held
	case <-gate.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("p's Wait did not fsync")
	}
	wantValue(t, db, snap, "k", "v0", "v1")
	wantValue(t, db, snap, "u", "", "unsynced")

	// A synced batch queued behind p while p's fsync is held.
	b.Reset()
	b.Set([]byte("k"), []byte("v2"))
	q, err := db.Enqueue(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, snap, "k", "v0", "v2")
	select {
	case err := <-uDone:
		t.Fatalf("an unsynced batch behind a pending one was published (%v)", err)
	case err := <-pDone:
		t.Fatalf("Wait returned during its fsync (%v)", err)
	case err := <-waDone:
		t.Fatalf("WaitVisible returned while p was pending (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}

	gate.Release(nil)
	if err := recvErr(t, pDone); err != nil {
		t.Fatal(err)
	}
	if err := recvErr(t, uDone); err != nil {
		t.Fatal(err)
	}
	// p and u are published; q waits for its own Wait. The snapshot
	// still sees the state it was taken at.
	wantValue(t, db, nil, "k", "v1", "v2")
	wantValue(t, db, nil, "a", "1", "1")
	wantValue(t, db, nil, "u", "unsynced", "unsynced")
	if _, err := snap.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the snapshot taken before p was published finds p's write (%v)", err)
	}
	if err := q.Wait(); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, nil, "k", "v2", "v2")
	if err := q.Wait(); err != nil {
		t.Fatalf("a second Wait: %v", err)
	}
	if err := recvErr(t, waDone); err != nil {
		t.Fatalf("WaitVisible: %v", err)
	}
	if err := db.WaitVisible(q.Seq()); err != nil {
		t.Fatalf("WaitVisible of a committed batch: %v", err)
	}
	var zero PendingCommit
	if zero.Wait() == nil {
		t.Fatal("Wait on a PendingCommit Enqueue did not return succeeded")
	}

	// An empty batch, and an unsynced one with nothing pending, are
	// published by Enqueue itself.
	e, err := db.Enqueue(db.NewBatch(), nil)
	if err != nil || e.Wait() != nil {
		t.Fatalf("empty batch: %v", err)
	}
	b.Reset()
	b.Set([]byte("fast"), []byte("1"))
	f, err := db.Enqueue(b, &WriteOptions{Sync: false})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, nil, "fast", "1", "1")
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestPendingCommitAcrossFlush: GetApplied finds a pending write after its
// memtable was rotated out (the flush waits for it to be published) and,
// once flushed, in an L0 table, under a newer pending write in the new
// memtable.
func TestPendingCommitAcrossFlush(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	if err := db.Set([]byte("k"), []byte("v0"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil { // v0 in a table
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set([]byte("k"), []byte("v1"))
	p, err := db.Enqueue(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Unsynced filler until p's memtable is rotated out.
	filler := strings.Repeat("f", 2000)
	var fills []PendingCommit
	for i := 0; ; i++ {
		db.mu.Lock()
		rotated := len(db.mem.queue) > 0
		db.mu.Unlock()
		if rotated {
			break
		}
		b.Reset()
		b.Set(faultKey(i), []byte(filler))
		f, err := db.Enqueue(b, &WriteOptions{Sync: false})
		if err != nil {
			t.Fatal(err)
		}
		fills = append(fills, f)
	}
	// The flush of p's memtable is held up by p.
	signal(db.flushSignal)
	wantValue(t, db, nil, "k", "v0", "v1")
	db.mu.Lock()
	queued := len(db.mem.queue)
	db.mu.Unlock()
	if queued != 1 {
		t.Fatalf("%d memtables queued, want p's", queued)
	}

	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, f := range fills {
		if err := f.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, nil, "k", "v1", "v1")
	db.mu.Lock()
	queued, empty := len(db.mem.queue), db.mem.mutable.Empty()
	db.mu.Unlock()
	if queued != 0 || !empty {
		t.Fatal("Flush left memtables with data")
	}

	b.Reset()
	b.Set([]byte("k"), []byte("v2"))
	p2, err := db.Enqueue(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, nil, "k", "v1", "v2")
	if err := p2.Wait(); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, nil, "k", "v2", "v2")
}

// TestPendingCommitSyncFailure: when the WAL fsync of a pending batch
// fails, it and every batch enqueued after it (before the failure, synced
// or not) fail in Wait and are never published, every later write fails
// in Enqueue, and no acknowledged write is lost by a crash or a reopen.
// The batches that failed may survive a reopen, but only as a prefix in
// commit order.
func TestPendingCommitSyncFailure(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem, 1)
	opts := smallOptions()
	opts.FS = efs
	db := openTestDB(t, "/db", opts)
	const acked = 50
	for i := range acked {
		if err := db.Set(faultKey(i), faultValue(i), nil); err != nil {
			t.Fatal(err)
		}
	}

	// p, then u (unsynced) and s (synced) behind it: a successor that
	// checked p's write with GetApplied would be one of these.
	enqueue := func(key string, sync bool) PendingCommit {
		t.Helper()
		b := db.NewBatch()
		b.Set([]byte(key), []byte("pending"))
		pc, err := db.Enqueue(b, &WriteOptions{Sync: sync})
		if err != nil {
			t.Fatal(err)
		}
		return pc
	}
	p := enqueue("p", true)
	u := enqueue("u", false)
	s := enqueue("s", true)
	sSeq := s.Seq()
	uDone := make(chan error, 1)
	go func() { uDone <- u.Wait() }()
	waDone := make(chan error, 1)
	go func() { waDone <- db.WaitVisible(sSeq) }()

	efs.Inject(vfs.Fault{Op: vfs.OpSync, Match: ".log"})
	snap := db.NewSnapshot()
	pErr := p.Wait()
	if !errors.Is(pErr, syscall.EIO) {
		t.Fatalf("p's Wait: %v, want the fsync's EIO", pErr)
	}
	if err := recvErr(t, uDone); err == nil {
		t.Fatal("an unsynced batch after a failed one was acknowledged")
	}
	if err := recvErr(t, waDone); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitVisible over the failed batch: %v", err)
	}
	efs.Disarm() // a healthy disk now cannot bring s back
	if err := s.Wait(); err == nil {
		t.Fatal("a synced batch after a failed one was acknowledged")
	}
	if n, _ := efs.Injected(); n != 1 {
		t.Fatalf("%d faults fired", n)
	}
	for _, k := range []string{"p", "u", "s"} {
		wantValue(t, db, snap, k, "", "pending")
	}
	snap.Close()
	if err := db.Set([]byte("after"), []byte("x"), nil); !errors.Is(err, ErrStopped) {
		t.Fatalf("a write after the failure: %v", err)
	}
	if _, err := db.Enqueue(db.NewBatch(), nil); err != nil {
		t.Fatalf("an empty batch after the failure: %v", err) // nothing to write
	}
	b := db.NewBatch()
	b.Set([]byte("after"), []byte("x"))
	if _, err := db.Enqueue(b, nil); !errors.Is(err, ErrStopped) {
		t.Fatalf("Enqueue after the failure: %v", err)
	}

	checkFaultClone(t, mem.CrashClone(nil), acked)
	db.Close()
	db = openTestDB(t, "/db", opts)
	defer db.Close()
	for i := range acked {
		if v, err := db.Get(faultKey(i)); err != nil || string(v) != string(faultValue(i)) {
			t.Fatalf("acknowledged key %d after reopening: %q, %v", i, v, err)
		}
	}
	var survived []string
	for _, k := range []string{"p", "u", "s", "after"} {
		if _, err := db.Get([]byte(k)); err == nil {
			survived = append(survived, k)
		} else if !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	if got := strings.Join(survived, ""); !strings.HasPrefix("pus", got) {
		t.Fatalf("the failed batches that survived, %q, are not a prefix of p, u, s", survived)
	}
	t.Logf("failed batches found after reopening: %q", survived)
}

// TestApplyAllocs: Apply of a reused batch allocates nothing, synced or
// not (the pending commit of Enqueue/Wait stays on Apply's stack).
func TestApplyAllocs(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	defer db.Close()
	b := db.NewBatch()
	for _, wo := range []*WriteOptions{{Sync: false}, {Sync: true}} {
		n := testing.AllocsPerRun(200, func() {
			b.Reset()
			b.Set([]byte("k"), []byte("v"))
			if err := db.Apply(b, wo); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("Apply (sync %v) allocates %v times", wo.Sync, n)
		}
	}
}

// TestEnqueueReadModifyWrite is the use Enqueue and GetApplied are for:
// writers serialize on a lock per key, read the key with GetApplied, write
// the incremented value with Enqueue, and Wait only after releasing the
// lock. With tiny memtables, the pending writes keep crossing memtable
// rotations, flushes and compactions. No increment may be lost, and
// readers must never see a counter go back.
func TestEnqueueReadModifyWrite(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	opts.MemTableSize = 4 << 10
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	const keys, writers, rounds = 4, 8, 150
	var locks [keys]sync.Mutex
	pad := strings.Repeat("p", 100)
	parse := func(v []byte) int {
		n := 0
		for _, c := range v {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	read := func(get func([]byte) ([]byte, error), k int) int {
		v, err := get(faultKey(k))
		if errors.Is(err, ErrNotFound) {
			return 0
		}
		if err != nil {
			t.Error(err)
		}
		return parse(v)
	}

	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var last [keys]int
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				n := read(db.Get, k)
				if n < last[k] {
					t.Errorf("key %d went back from %d to %d", k, last[k], n)
					return
				}
				last[k] = n
			}
		}()
	}

	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := db.NewBatch()
			for i := range rounds {
				k := (w + i) % keys
				locks[k].Lock()
				n := read(db.GetApplied, k)
				b.Reset()
				b.Set(faultKey(k), fmt.Appendf(nil, "%d-%s", n+1, pad))
				p, err := db.Enqueue(b, &WriteOptions{Sync: i%3 != 0})
				locks[k].Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := p.Wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	total := 0
	for k := range keys {
		total += read(db.Get, k)
	}
	if total != writers*rounds {
		t.Fatalf("the counters sum to %d after %d increments", total, writers*rounds)
	}
	if m := db.Metrics(); m.Flush.Count == 0 {
		t.Fatal("no flush ran while commits were pending")
	}
}
