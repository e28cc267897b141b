package lsm

import (
	"fmt"
	"testing"
	"time"
)

// TestMemTablesGrow checks that memtables start at InitialMemTableSize and
// double at each rotation up to MemTableSize, that a negative
// InitialMemTableSize starts at MemTableSize, and that the stall threshold
// counts queued bytes, not memtables: two small memtables waiting for flush
// stall no writer, two full ones do, and an empty queue never does, even
// behind a memtable larger than the threshold (a large batch's).
func TestMemTablesGrow(t *testing.T) {
	opts := smallOptions()
	opts.MemTableSize = 1 << 20
	opts.InitialMemTableSize = 64 << 10
	opts.MemTableStopWritesThreshold = 2
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	capacity := func() int {
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.mem.mutable.Capacity()
	}
	var sizes []int
	for i := range 7 {
		sizes = append(sizes, capacity())
		if err := db.Set(fmt.Appendf(nil, "k%d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if want := fmt.Sprint([]int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 1 << 20, 1 << 20}); fmt.Sprint(sizes) != want {
		t.Fatalf("memtable sizes %v, want %s", sizes, want)
	}

	db.mu.Lock()
	saved, savedMutable := db.mem.queue, db.mem.mutable
	small := []*memTable{db.newMemTable(64<<10, 0), db.newMemTable(128<<10, 0)}
	full := []*memTable{db.newMemTable(1<<20, 0), db.newMemTable(1<<20, 0)}
	huge := db.newMemTable(3<<20, 0) // a batch's own, larger than the threshold
	db.mem.queue = small
	smallStalls := db.memTableStallLocked()
	db.mem.queue = full
	fullStalls := db.memTableStallLocked()
	db.mem.queue, db.mem.mutable = nil, huge
	hugeStalls := db.memTableStallLocked()
	db.mem.queue, db.mem.mutable = saved, savedMutable
	db.mu.Unlock()
	for _, m := range append(small, append(full, huge)...) {
		m.unref()
	}
	if smallStalls || !fullStalls || hugeStalls {
		t.Fatalf("stall with two small memtables queued: %v, with two full ones: %v, with none queued and a huge mutable one: %v; want false, true, false", smallStalls, fullStalls, hugeStalls)
	}

	opts.InitialMemTableSize = -1
	full2 := openTestDB(t, t.TempDir(), opts)
	defer full2.Close()
	full2.mu.Lock()
	got := full2.mem.mutable.Capacity()
	full2.mu.Unlock()
	if got != 1<<20 {
		t.Fatalf("with a negative InitialMemTableSize the first memtable has %d bytes, want %d", got, 1<<20)
	}
}

// TestSmallMemTablesFlushTogether checks that a young DB's small memtables
// wait for flush until they add up to minFlushBytes (half a memtable
// here), and are then written to one table by one flush; that Flush
// writes out a smaller queue at once; and that a writer stalled behind a
// small queue (behind a batch's own large memtable, with a stop threshold
// of one memtable) gets it flushed rather than waiting for ever.
func TestSmallMemTablesFlushTogether(t *testing.T) {
	opts := smallOptions()
	opts.MemTableSize = 1 << 20
	opts.InitialMemTableSize = 64 << 10
	opts.DisableBackgroundCompactions = true
	value := make([]byte, 1000)
	noSync := &WriteOptions{}

	type dbState struct {
		mutable, queued, l0 int
		flushes             int64
	}
	stateOf := func(db *DB) dbState {
		db.mu.Lock()
		defer db.mu.Unlock()
		return dbState{db.mem.mutable.Capacity(), len(db.mem.queue), len(db.versions.current.levels[0]), db.metrics.flushCount.Load()}
	}
	// within fails the test if fn has not returned after a while: each
	// case below hangs if its flush is not forced.
	within := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: still waiting after 20s", what)
		}
	}

	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	i := 0
	fillUntil := func(mutable int) {
		for stateOf(db).mutable < mutable {
			if err := db.Set(fmt.Appendf(nil, "k%06d", i), value, noSync); err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	fillUntil(512 << 10) // three rotations: 64 + 128 + 256 KiB queued
	db.mu.Lock()
	count := db.flushCountLocked()
	db.mu.Unlock()
	if s := stateOf(db); s.queued != 3 || count != 0 {
		t.Fatalf("with 448 KiB of memtables queued: %d queued, a flush would take %d; want 3 and 0", s.queued, count)
	}
	fillUntil(1 << 20) // the 512 KiB one rotates too: 960 KiB queued
	within("flush of four small memtables", func() error {
		for s := stateOf(db); s.queued != 0; s = stateOf(db) {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if s := stateOf(db); s.l0 != 1 || s.flushes != 1 {
		t.Fatalf("after four small memtables: %d L0 tables from %d flushes, want 1 and 1", s.l0, s.flushes)
	}
	for k := range i {
		if _, err := db.Get(fmt.Appendf(nil, "k%06d", k)); err != nil {
			t.Fatalf("k%06d after the flush: %v", k, err)
		}
	}

	db2 := openTestDB(t, t.TempDir(), opts)
	defer db2.Close()
	for k := range 100 { // into the second, 128 KiB memtable
		if err := db2.Set(fmt.Appendf(nil, "k%06d", k), value, noSync); err != nil {
			t.Fatal(err)
		}
	}
	within("Flush of 192 KiB of memtables", db2.Flush)
	if s := stateOf(db2); s.queued != 0 || s.l0 != 1 {
		t.Fatalf("after Flush: %d queued, %d L0 tables; want 0 and 1", s.queued, s.l0)
	}

	opts.MemTableStopWritesThreshold = 1
	db3 := openTestDB(t, t.TempDir(), opts)
	defer db3.Close()
	if err := db3.Set([]byte("a"), value, noSync); err != nil {
		t.Fatal(err)
	}
	// A batch larger than a memtable rotates the 64 KiB one out and gets
	// a memtable of its own: 64 KiB queued, under the flush's half.
	if err := db3.Set([]byte("b"), make([]byte, 1500<<10), noSync); err != nil {
		t.Fatal(err)
	}
	// Filling the large one up would stall writes (its size and the
	// queue's are over one memtable) for ever if the small one were left
	// queued. Its flush starts as soon as the flush loop sees the large
	// memtable, or when a writer stalls and wakes it: which one comes
	// first is a race.
	within("writes past a large batch's memtable", func() error {
		for k := range 400 {
			if err := db3.Set(fmt.Appendf(nil, "c%06d", k), value, noSync); err != nil {
				return err
			}
		}
		return nil
	})
	if s := stateOf(db3); s.flushes == 0 {
		t.Fatalf("no flush ran for the stalled writes: %+v", s)
	}
}
