package partition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// syncCloneFS takes a crash clone of mem after every fsync, file or
// directory, while armed: a MemFS's durable state changes only at syncs,
// so the clones are every state a power loss could leave, in order.
// Some also keep a random prefix of the unsynced data (torn writes).
type syncCloneFS struct {
	vfs.FS
	mem *vfs.MemFS

	mu     sync.Mutex
	armed  bool
	rng    *rand.Rand
	clones []dropClone
	// acked is set once DeleteTable has returned: clones taken later must
	// hold the drop.
	acked atomic.Bool
}

type dropClone struct {
	fs    *vfs.MemFS
	acked bool
	tails bool
}

func (f *syncCloneFS) arm(on bool) {
	f.mu.Lock()
	f.armed = on
	f.mu.Unlock()
}

func (f *syncCloneFS) clone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		return
	}
	acked := f.acked.Load()
	f.clones = append(f.clones, dropClone{fs: f.mem.CrashClone(nil), acked: acked})
	if f.rng.IntN(3) == 0 {
		f.clones = append(f.clones, dropClone{fs: f.mem.CrashClone(f.rng), acked: acked, tails: true})
	}
}

func (f *syncCloneFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return cloneOnSync{file, f}, nil
}

func (f *syncCloneFS) Reuse(oldname, newname string) (vfs.File, error) {
	file, err := f.FS.Reuse(oldname, newname)
	if err != nil {
		return nil, err
	}
	return cloneOnSync{file, f}, nil
}

func (f *syncCloneFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return cloneOnSync{file, f}, nil
}

type cloneOnSync struct {
	vfs.File
	fs *syncCloneFS
}

func (c cloneOnSync) Sync() error {
	err := c.File.Sync()
	if err == nil {
		c.fs.clone()
	}
	return err
}

// TestDropTableCrash: a table drop interrupted by a crash resumes and
// completes after reopen. DeleteTable is one synced catalog edit that
// records the table's id as dropped (pending); a background compaction of
// the table's key range then discards its keys (DropKey) and records the
// drop as compacted. The test drops a table whose many entities lie in
// several levels, the memtable and the WAL, takes a crash clone after
// every fsync of the drop and its background work, and opens each: the
// drop, once acknowledged, has happened (the table is gone, a new table of
// the same name is empty, the old ACL gone), a pending drop is compacted
// after the reopen until no key of the old table is left and it is then
// recorded as done, and the other table is untouched.
func TestDropTableCrash(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	hook := &syncCloneFS{FS: mem, mem: mem, rng: rand.New(rand.NewPCG(7, 11))}
	opts := Options{LSM: lsm.Options{
		FS:                    hook,
		MemTableSize:          32 << 10,
		L0CompactionThreshold: 2,
		L0StopWritesThreshold: 8,
		LBaseMaxBytes:         64 << 10,
		LevelMultiplier:       4,
		TargetFileSize:        16 << 10,
		BlockSize:             512,
	}}
	s, err := open("db", &opts, tuning{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	for _, name := range []string{"big", "keep"} {
		if _, err := s.CreateTable(ctx, acct, name); err != nil {
			t.Fatal(err)
		}
	}
	const parts, rows, keepRows = 12, 100, 40
	fillPartitions(t, s, "big", parts, rows, 120)
	// Some of the table only in the memtable and the WAL.
	mustApply(t, s, "big", Op{Kind: OpInsert, Entity: ent("zz", "last", "V", 1)})
	const bigN = parts*rows + 1
	fillPartitions(t, s, "keep", 1, keepRows, 50)
	if err := s.SetTableACL(ctx, acct, "big", []SignedIdentifier{{ID: "old", Permission: "r"}}); err != nil {
		t.Fatal(err)
	}
	old, _ := s.lookupTable(acct, "big")
	lo, hi := old.bounds("", "")
	if n := rawKeys(t, s.db, lo, hi); n != bigN {
		t.Fatalf("%d keys before the drop, want %d", n, bigN)
	}
	if m := s.db.Metrics(); m.Levels[0].Files == 0 || m.Levels[1].Files+m.Levels[2].Files == 0 {
		t.Fatalf("the table is not in several levels: %+v", m.Levels)
	}

	hook.arm(true)
	hook.clone() // a crash just before the drop
	if err := s.DeleteTable(ctx, acct, "big"); err != nil {
		t.Fatal(err)
	}
	hook.acked.Store(true)
	hook.clone() // just after, before the background work has done much
	s.waitDrops()
	hook.clone()
	hook.arm(false)
	if n := rawKeys(t, s.db, lo, hi); n != 0 {
		t.Fatalf("%d keys of the dropped table left without a crash", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = nil

	var interrupted, notDurable, done int
	for i, c := range hook.clones {
		what := fmt.Sprintf("clone %d of %d (acked %v, tails %v)", i, len(hook.clones), c.acked, c.tails)
		switch checkDropClone(t, what, c, opts, old.id, lo, hi, bigN, keepRows) {
		case deletedPending:
			interrupted++
		case deletedCompacted:
			done++
		default:
			notDurable++
		}
	}
	t.Logf("%d crash clones: %d before the drop was durable, %d with the drop pending and keys left, %d after it was reclaimed",
		len(hook.clones), notDurable, interrupted, done)
	if interrupted < 3 {
		t.Fatalf("only %d clones caught the drop between its catalog edit and the end of its compaction", interrupted)
	}
}

// dropNotDurable is what checkDropClone returns for a clone that does not
// hold the drop.
const dropNotDurable = 0xff

// checkDropClone opens a clone and checks the drop of table oldID. It
// returns the drop's state as the crash left it: deletedPending with keys
// of the table left, deletedCompacted, or dropNotDurable.
func checkDropClone(t *testing.T, what string, c dropClone, opts Options, oldID uint64, lo, hi []byte, bigN, keepN int) byte {
	ctx := context.Background()

	// What the crash left, seen by the engine alone (on a copy, so that
	// the store below recovers from the crash itself).
	state := byte(dropNotDurable)
	lopts := opts.LSM
	lopts.FS = c.fs.CrashClone(nil)
	db, err := lsm.Open("db", &lopts)
	if err != nil {
		t.Fatalf("%s: engine open: %v", what, err)
	}
	v, err := db.Get(idKey(nsDeleted, oldID))
	switch {
	case err == nil:
		if state, _, err = decodeDeletedValue(v); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case !errors.Is(err, lsm.ErrNotFound):
		t.Fatalf("%s: %v", what, err)
	}
	left := rawKeys(t, db, lo, hi)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if state == deletedPending && left == 0 {
		state = deletedCompacted // reclaimed; only the record was not updated
	}
	if c.acked && state == dropNotDurable {
		t.Fatalf("%s: the acknowledged drop is lost", what)
	}

	opts.LSM.FS = c.fs
	s, err := open("db", &opts, tuning{})
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	if n := countEntities(t, what, s, "keep"); n != keepN {
		t.Fatalf("%s: the other table has %d entities, want %d", what, n, keepN)
	}
	if state == dropNotDurable {
		// No drop at all: the table is whole.
		if n := countEntities(t, what, s, "big"); n != bigN {
			t.Fatalf("%s: the table, not dropped, has %d entities, want %d", what, n, bigN)
		}
		return state
	}

	_, err = s.GetTable(ctx, acct, "big")
	wantCode(t, what+": get dropped table", err, CodeTableNotFound)
	s.waitDrops()
	if n := rawKeys(t, s.db, lo, hi); n != 0 {
		t.Fatalf("%s: %d keys of the dropped table left after the reopen's reclaim (the crash left %d)", what, n, left)
	}
	if v, err := s.db.Get(idKey(nsDeleted, oldID)); err != nil {
		t.Fatalf("%s: drop record: %v", what, err)
	} else if st, _, _ := decodeDeletedValue(v); st != deletedCompacted {
		t.Fatalf("%s: drop record still in state %d after the reclaim", what, st)
	}
	for _, k := range [][]byte{idKey(nsACL, oldID), idKey(nsRanges, oldID)} {
		if _, err := s.db.Get(k); !errors.Is(err, lsm.ErrNotFound) {
			t.Fatalf("%s: key %x of the dropped table: %v", what, k, err)
		}
	}
	if _, err := s.CreateTable(ctx, acct, "Big"); err != nil {
		t.Fatalf("%s: re-create: %v", what, err)
	}
	if n := countEntities(t, what, s, "big"); n != 0 {
		t.Fatalf("%s: the re-created table has %d entities", what, n)
	}
	_, err = s.GetEntity(ctx, acct, "big", "pk000", "r0000")
	wantCode(t, what+": old entity in the new table", err, CodeResourceNotFound)
	if ids, err := s.GetTableACL(ctx, acct, "big"); err != nil || len(ids) != 0 {
		t.Fatalf("%s: re-created table has ACL %v, %v", what, ids, err)
	}
	mustApply(t, s, "big", Op{Kind: OpInsert, Entity: ent("pk000", "r0000", "V", strings.Repeat("n", 10))})

	// Reclaimed is recorded: a clean restart has nothing left to do, and
	// still knows the id as dropped.
	if err := s.Close(); err != nil {
		t.Fatalf("%s: close: %v", what, err)
	}
	s = nil
	s2, err := open("db", &opts, tuning{})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer s2.Close()
	s2.dropMu.Lock()
	pending := s2.dropPending
	s2.dropMu.Unlock()
	if pending != 0 || !s2.isDeleted(oldID) {
		t.Fatalf("%s: after a clean restart: %d drops pending, id %d dropped %v", what, pending, oldID, s2.isDeleted(oldID))
	}
	if n := countEntities(t, what, s2, "big"); n != 1 {
		t.Fatalf("%s: the re-created table has %d entities after a restart, want 1", what, n)
	}
	return state
}

func countEntities(t *testing.T, what string, s *Store, table string) int {
	t.Helper()
	n := 0
	var q EntityQuery
	for {
		page, c, err := s.QueryEntitiesPage(context.Background(), acct, table, q)
		if err != nil {
			t.Fatalf("%s: query %s: %v", what, table, err)
		}
		n += len(page)
		if c.IsZero() {
			return n
		}
		q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
	}
}
