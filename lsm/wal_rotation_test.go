package lsm

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// TestRotationDoesNotWaitForTheOldSegment holds the fsync that closes the
// old WAL segment at a rotation: writers go on meanwhile, into a new
// segment whose file gets no byte until that fsync is done; a synced
// write waits for it; and a crash while it is held (the old segment's
// unsynced tail torn, the new one empty) recovers every write synced
// before it, with no corruption reported.
func TestRotationDoesNotWaitForTheOldSegment(t *testing.T) {
	mem := vfs.NewMem()
	gate := vfs.NewSyncGate(mem, ".log", 0)
	opts := smallOptions()
	opts.FS = gate
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	if err := db.Set([]byte("synced"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := db.Set(fmt.Appendf(nil, "unsynced%02d", i), []byte("2"), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gate.Hold()
	released := false
	defer func() {
		if !released {
			gate.Release(nil) // so that Close, deferred above, can finish
		}
	}()
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }() // rotates, then waits for the close
	<-gate.Entered()

	// Writes are taken while the old segment's fsync is held.
	took := make(chan error, 1)
	go func() { took <- db.Set([]byte("after"), []byte("3"), &WriteOptions{}) }()
	select {
	case err := <-took:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an unsynced write after the rotation waited for the old segment's fsync")
	}
	if got := mustGet(t, db, "after"); got != "3" {
		t.Fatalf("after = %q", got)
	}
	// (The old segment may be gone already: its memtable's flush made it
	// obsolete.)
	if logs := walSizes(t, mem, "/db"); logs[len(logs)-1] != 0 {
		t.Fatalf("WAL segment sizes %v: the new segment got bytes before the old one was durable", logs)
	}
	synced := make(chan error, 1)
	go func() { synced <- db.Set([]byte("synced2"), []byte("4"), nil) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-synced:
		t.Fatalf("a synced write was acknowledged (%v) before the older segment was durable", err)
	default:
	}

	// A crash now: the old segment torn after its synced part, the new one
	// empty. Recovery takes the torn segment as the end of the log.
	for seed := range uint64(8) {
		clone := mem.CrashClone(rand.New(rand.NewPCG(seed, 1)))
		cdb, err := Open("/db", &Options{FS: clone})
		if err != nil {
			t.Fatalf("seed %d: a crash during the old segment's close: %v", seed, err)
		}
		if v, err := cdb.Get([]byte("synced")); err != nil || string(v) != "1" {
			t.Fatalf("seed %d: synced = %q, %v", seed, v, err)
		}
		if _, err := cdb.Get([]byte("synced2")); err == nil {
			t.Fatalf("seed %d: a write not yet acknowledged survived while an older one may not have", seed)
		}
		cdb.Close()
	}

	gate.Release(nil)
	released = true
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if logs := walSizes(t, mem, "/db"); logs[len(logs)-1] == 0 {
		t.Fatalf("WAL segment sizes %v: the new segment is still empty after a synced write", logs)
	}
}

// TestTornSegmentBeforeOneWithBytes: a torn record in a WAL segment that a
// newer segment holding bytes follows is corruption (that segment was
// durable before the newer one got a byte), as before.
func TestTornSegmentBeforeOneWithBytes(t *testing.T) {
	mem := vfs.NewMem()
	opts := smallOptions()
	opts.FS = mem
	db := openTestDB(t, "/db", opts)
	if err := db.Set([]byte("a"), make([]byte, 1000), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := mem.List("/db")
	var logs []string
	for _, n := range names {
		if ft, _ := parseFilename(n); ft == fileTypeLog {
			logs = append(logs, n)
		}
	}
	slices.Sort(logs)
	// Cut the record in half, and start a newer segment holding a byte.
	old := "/db/" + logs[len(logs)-1]
	data := readAll(t, mem, old)
	writeFile(t, mem, old, data[:len(data)/2])
	_, num := parseFilename(logs[len(logs)-1])
	writeFile(t, mem, makeFilename("/db", fileTypeLog, num+1), []byte{0})
	if _, err := Open("/db", &Options{FS: mem}); err == nil {
		t.Fatal("a torn segment followed by one holding bytes opened")
	}
	// With the newer segment empty, the torn record ends the log.
	writeFile(t, mem, makeFilename("/db", fileTypeLog, num+1), nil)
	db2, err := Open("/db", &Options{FS: mem})
	if err != nil {
		t.Fatalf("a torn segment followed by an empty one: %v", err)
	}
	db2.Close()
}

// walSizes returns the sizes of dir's WAL segments, oldest first.
func walSizes(t *testing.T, fs vfs.FS, dir string) []int64 {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var nums []uint64
	for _, n := range names {
		if ft, num := parseFilename(n); ft == fileTypeLog {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	var sizes []int64
	for _, num := range nums {
		info, err := fs.Stat(makeFilename(dir, fileTypeLog, num))
		if errors.Is(err, iofs.ErrNotExist) {
			continue // a flush deleted it since the listing
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, info.Size())
	}
	return sizes
}
