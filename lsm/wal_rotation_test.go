package lsm

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// TestRotationDoesNotWaitForTheOldSegment holds the fsync that closes the
// old WAL segment at a rotation: writers go on meanwhile, into a new
// segment whose file gets their batches at once; a synced write waits for
// the old segment's fsync; and a crash while it is held recovers every
// write synced before it, and a prefix of the unsynced ones, with no
// corruption reported.
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
	const before = 20
	for i := range before {
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

	// Writes are taken, and handed to the new segment's file, while the
	// old segment's fsync is held.
	const after = 20
	for i := range after {
		took := make(chan error, 1)
		go func() { took <- db.Set(fmt.Appendf(nil, "after%02d", i), []byte("3"), &WriteOptions{}) }()
		select {
		case err := <-took:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an unsynced write after the rotation waited for the old segment's fsync")
		}
	}
	if got := mustGet(t, db, "after00"); got != "3" {
		t.Fatalf("after00 = %q", got)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if logs := walSizes(t, mem, "/db"); logs[len(logs)-1] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAL segment sizes %v: the new segment got no byte while the old one's fsync was held", walSizes(t, mem, "/db"))
		}
	}
	synced := make(chan error, 1)
	go func() { synced <- db.Set([]byte("synced2"), []byte("4"), nil) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-synced:
		t.Fatalf("a synced write was acknowledged (%v) before the older segment was durable", err)
	default:
	}

	// A crash now, keeping random parts of what was not synced: whatever
	// survives is a prefix of the writes, the synced one among them.
	order := []string{}
	for i := range before {
		order = append(order, fmt.Sprintf("unsynced%02d", i))
	}
	for i := range after {
		order = append(order, fmt.Sprintf("after%02d", i))
	}
	for seed := range uint64(32) {
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
		checkPrefix(t, cdb, order, fmt.Sprintf("seed %d", seed))
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
}

// checkPrefix fails unless the keys of db among order (written in that
// order) are a prefix of it.
func checkPrefix(t *testing.T, db *DB, order []string, what string) {
	t.Helper()
	missing := ""
	for _, k := range order {
		_, err := db.Get([]byte(k))
		switch {
		case err == nil && missing != "":
			t.Fatalf("%s: %s survived, but %s, written before it, did not", what, k, missing)
		case errors.Is(err, ErrNotFound):
			if missing == "" {
				missing = k
			}
		case err != nil:
			t.Fatalf("%s: %s: %v", what, k, err)
		}
	}
}

// handSegment writes WAL segment num of the DB in dir as the engine does:
// a header naming first, then one batch per key, with sequence numbers
// from first on; without header, only the batches. It returns the offset
// past each record.
func handSegment(t *testing.T, fs vfs.FS, dir string, num uint64, first base.SeqNum, header bool, keys ...string) []int64 {
	t.Helper()
	f, err := fs.Create(makeFilename(dir, fileTypeLog, num))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := wal.NewWriter(f, wal.WriterOptions{})
	var ends []int64
	if header {
		end, err := w.WriteRecord(segmentHeader(first))
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	for i, k := range keys {
		var b Batch
		b.Set([]byte(k), []byte("v"))
		b.setSeqNum(first + base.SeqNum(i))
		end, err := w.WriteRecord(b.repr)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return ends
}

// TestSegmentAfterALoss: recovery replays WAL segments while each starts
// where the one before it ends (its first record's sequence number), and
// leaves out the first that does not, and every newer one: it starts
// after batches a crash lost. A torn tail that the next segment continues
// without a gap is corruption.
func TestSegmentAfterALoss(t *testing.T) {
	// An empty DB whose WAL segments the cases write by hand, from
	// sequence number 1 (nothing was written through the DB).
	fresh := func(t *testing.T) (*vfs.MemFS, uint64) {
		mem := vfs.NewMem()
		db, err := Open("/db", &Options{FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		var last uint64
		names, _ := mem.List("/db")
		for _, n := range names {
			if ft, num := parseFilename(n); ft == fileTypeLog {
				last = max(last, num)
			}
		}
		if err := mem.Remove(makeFilename("/db", fileTypeLog, last)); err != nil {
			t.Fatal(err)
		}
		return mem, last
	}
	truncate := func(t *testing.T, fs vfs.FS, num uint64, size int64) {
		name := makeFilename("/db", fileTypeLog, num)
		writeFile(t, fs, name, readAll(t, fs, name)[:size])
	}
	order := []string{"a", "b", "c", "d", "e"}
	for _, c := range []struct {
		name string
		// build writes the segments from num on.
		build func(t *testing.T, fs vfs.FS, num uint64)
		want  []string // the keys recovered; nil: Open fails with corruption
	}{
		{"contiguous", func(t *testing.T, fs vfs.FS, num uint64) {
			handSegment(t, fs, "/db", num, 1, true, "a", "b", "c")
			handSegment(t, fs, "/db", num+1, 4, true, "d", "e")
		}, []string{"a", "b", "c", "d", "e"}},
		{"contiguous, the newer segment without header", func(t *testing.T, fs vfs.FS, num uint64) {
			handSegment(t, fs, "/db", num, 1, true, "a", "b", "c")
			handSegment(t, fs, "/db", num+1, 4, false, "d", "e")
		}, []string{"a", "b", "c", "d", "e"}},
		{"cut at a record boundary", func(t *testing.T, fs vfs.FS, num uint64) {
			ends := handSegment(t, fs, "/db", num, 1, true, "a", "b", "c")
			truncate(t, fs, num, ends[2]) // header, a, b
			handSegment(t, fs, "/db", num+1, 4, true, "d", "e")
		}, []string{"a", "b"}},
		{"torn", func(t *testing.T, fs vfs.FS, num uint64) {
			ends := handSegment(t, fs, "/db", num, 1, true, "a", "b", "c")
			truncate(t, fs, num, ends[3]-3) // c torn
			handSegment(t, fs, "/db", num+1, 4, true, "d", "e")
		}, []string{"a", "b"}},
		{"the newer segment's batches lost, its header kept", func(t *testing.T, fs vfs.FS, num uint64) {
			ends := handSegment(t, fs, "/db", num, 1, true, "a", "b", "c")
			truncate(t, fs, num, ends[2])
			ends = handSegment(t, fs, "/db", num+1, 4, true, "d")
			truncate(t, fs, num+1, ends[0])
			handSegment(t, fs, "/db", num+2, 5, true, "e")
		}, []string{"a", "b"}},
		{"a blank segment between", func(t *testing.T, fs vfs.FS, num uint64) {
			handSegment(t, fs, "/db", num, 1, true, "a", "b")
			writeFile(t, fs, makeFilename("/db", fileTypeLog, num+1), nil)
			handSegment(t, fs, "/db", num+2, 3, true, "c")
		}, []string{"a", "b"}},
		{"an empty segment with its header between", func(t *testing.T, fs vfs.FS, num uint64) {
			handSegment(t, fs, "/db", num, 1, true, "a", "b")
			handSegment(t, fs, "/db", num+1, 3, true)
			handSegment(t, fs, "/db", num+2, 3, true, "c")
		}, []string{"a", "b", "c"}},
		{"torn, yet continued", func(t *testing.T, fs vfs.FS, num uint64) {
			handSegment(t, fs, "/db", num, 1, true, "a", "b")
			name := makeFilename("/db", fileTypeLog, num)
			writeFile(t, fs, name, append(readAll(t, fs, name), 0x55, 0x55, 0x55, 0x55, 0x55))
			handSegment(t, fs, "/db", num+1, 3, true, "c")
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, num := fresh(t)
			c.build(t, mem, num)
			// Verify reads the segments as recovery does.
			rep, verr := Verify("/db", mem)
			db, err := Open("/db", &Options{FS: mem})
			if c.want == nil {
				if !errors.Is(err, ErrCorruption) {
					t.Fatalf("Open: %v, want corruption", err)
				}
				if !errors.Is(verr, ErrCorruption) {
					t.Fatalf("Verify: %v, want corruption", verr)
				}
				return
			}
			if verr != nil {
				t.Fatalf("Verify: %v", verr)
			}
			if rep.WALBatches != len(c.want) {
				t.Fatalf("Verify counts %d batches it would replay, want %d (notes %q)", rep.WALBatches, len(c.want), rep.Notes)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, k := range order {
				_, err := db.Get([]byte(k))
				if want := slices.Contains(c.want, k); want != (err == nil) {
					t.Fatalf("%s: %v, want present %v (recovered should be %v)", k, err, want, c.want)
				}
			}
			// The sequence numbers go on above everything written, kept
			// or not.
			if err := db.Set([]byte("later"), []byte("v"), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
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
