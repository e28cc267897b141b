package lsm

import (
	"fmt"
	"testing"
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
