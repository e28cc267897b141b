package lsm

import (
	"fmt"
	"testing"
)

// TestMemTableReleasedOnlyOnceUnread checks that a flushed memtable's
// arena is released only after its last reader lets go: an iterator opened
// on it reads it intact while later memtables fill and flush (a released
// arena is unmapped: reading it would fault), and once the iterator is
// closed the memtable's last reference is gone, and so is its arena.
// Close releases the rest.
func TestMemTableReleasedOnlyOnceUnread(t *testing.T) {
	opts := smallOptions()
	db := openTestDB(t, t.TempDir(), opts)
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
	first := db.mem.mutable
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
		if n := first.refs.Load(); n != 1 {
			t.Fatalf("generation %d: the iterator's memtable has %d references, want the iterator's alone", gen, n)
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
	if n := first.refs.Load(); n != 0 {
		t.Fatalf("the memtable has %d references once the iterator closed, want 0", n)
	}
	for gen := 0; gen <= 6; gen++ {
		for _, i := range []int{0, perGen / 2, perGen - 1} {
			if got := mustGet(t, db, string(key(gen, i))); got != string(value(gen, i)) {
				t.Fatalf("%s = %q, want %q", key(gen, i), got, value(gen, i))
			}
		}
	}

	// An iterator left open across Close keeps its memtable until it is
	// closed; everything else is released by Close.
	put(7)
	db.mu.Lock()
	last := db.mem.mutable
	db.mu.Unlock()
	it = db.NewIter(nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := last.refs.Load(); n != 1 {
		t.Fatalf("after Close the open iterator's memtable has %d references, want 1", n)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n := last.refs.Load(); n != 0 {
		t.Fatalf("the memtable has %d references once the last iterator closed, want 0", n)
	}
}
