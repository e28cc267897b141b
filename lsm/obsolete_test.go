package lsm

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestObsoleteTablesRemoved checks that once compactions have replaced
// tables, and the iterator that still read the old ones is closed, the
// directory holds the current version's tables and no other: a table is
// deleted after the last reader lets it go (which Windows requires: it
// does not delete a file a handle holds open), and not left behind.
func TestObsoleteTablesRemoved(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, smallOptions())
	defer db.Close()
	write := func(round int) {
		for i := range 1000 {
			if err := db.Set(fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "round %d value %0100d", round, i), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	it := db.NewIter(nil) // holds the tables of round 0
	for round := 1; round <= 3; round++ {
		write(round)
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	// The iterator still reads what it saw, from tables no longer live.
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := fmt.Sprintf("round 0 value %0100d", n); string(it.Value()) != want {
			t.Fatalf("entry %d read through the old iterator: %q", n, it.Value())
		}
		n++
	}
	if err := it.Close(); err != nil || n != 1000 {
		t.Fatalf("the old iterator read %d entries, err %v", n, err)
	}

	var stray []uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		db.mu.Lock()
		live := map[uint64]bool{}
		db.versions.addLiveFiles(live)
		db.mu.Unlock()
		stray = stray[:0]
		for _, name := range filesOfType(t, dir, fileTypeTable) {
			_, num := parseFilename(filepath.Base(name))
			if !live[num] {
				stray = append(stray, num)
			}
			delete(live, num)
		}
		if len(live) > 0 {
			t.Fatalf("live tables without a file: %v", live)
		}
		if len(stray) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(stray) > 0 {
		t.Fatalf("tables no version holds are still in the directory: %v", stray)
	}
	if got := mustGet(t, db, "k00042"); got != fmt.Sprintf("round 3 value %0100d", 42) {
		t.Fatalf("k00042 = %q after the compaction", got)
	}
}
