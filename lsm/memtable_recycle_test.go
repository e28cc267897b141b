package lsm

import (
	"fmt"
	"testing"
)

// TestMemTableRecycledOnlyOnceUnread checks that a flushed memtable's arena
// is reused only after its last reader lets go: an iterator opened on it
// reads it intact while later memtables fill and flush (under -race, a
// reused arena would show as a race between the iterator and the writer),
// and once the iterator is closed the next memtable takes that arena
// instead of a zeroed one.
func TestMemTableRecycledOnlyOnceUnread(t *testing.T) {
	opts := smallOptions()
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	key := func(gen, i int) []byte { return fmt.Appendf(nil, "g%d-%04d", gen, i) }
	value := func(gen, i int) []byte {
		return fmt.Appendf(nil, "value of generation %d, key %d, padded to some length", gen, i)
	}
	const perGen = 200 // about 20 KiB: under one 32 KiB memtable
	put := func(gen int) {
		t.Helper()
		for i := range perGen {
			if err := db.Set(key(gen, i), value(gen, i), nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	put(0)
	db.mu.Lock()
	first := db.mem.mutable.MemTable
	db.mu.Unlock()
	it := db.NewIter(nil)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	// Generations that fill, rotate and flush memtables while the
	// iterator holds the first one.
	for gen := 1; gen <= 6; gen++ {
		put(gen)
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		if db.spareMem.Load() == first {
			t.Fatalf("generation %d: the iterator's memtable was offered for reuse while it reads it", gen)
		}
		db.mu.Lock()
		reused := db.mem.mutable.MemTable == first
		db.mu.Unlock()
		if reused {
			t.Fatalf("generation %d: a new memtable took the arena the iterator reads", gen)
		}
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n < perGen && (string(it.Key()) != string(key(0, n)) || string(it.Value()) != string(value(0, n))) {
			t.Fatalf("entry %d: %q = %q, want %q = %q", n, it.Key(), it.Value(), key(0, n), value(0, n))
		}
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != perGen {
		t.Fatalf("the iterator saw %d entries, want the %d of its state", n, perGen)
	}

	// Unread now: the next memtable of the configured size takes the
	// arena kept for reuse, not a new one. Which arena is kept depends on
	// the order readers let go, so any of the flushed memtables' will do.
	spare := db.spareMem.Load()
	if spare == nil {
		t.Fatal("no arena kept for reuse after every reader let go")
	}
	put(7)
	if err := db.Flush(); err != nil { // rotates: the new memtable takes the spare
		t.Fatal(err)
	}
	db.mu.Lock()
	took := db.mem.mutable.MemTable == spare
	db.mu.Unlock()
	if !took {
		t.Fatal("the new memtable did not take the spare arena")
	}
	for gen := 0; gen <= 7; gen++ {
		for _, i := range []int{0, perGen / 2, perGen - 1} {
			if got := mustGet(t, db, string(key(gen, i))); got != string(value(gen, i)) {
				t.Fatalf("%s = %q, want %q", key(gen, i), got, value(gen, i))
			}
		}
	}
}
