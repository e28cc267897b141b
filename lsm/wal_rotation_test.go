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

// segmentLayout is how handSegment writes a segment: in version 1
// chunks (as an engine before recycling did) or in recyclable ones, the
// engine's now; over is the older content of a reused file, which the
// segment is written over (recyclable chunks only).
type segmentLayout struct {
	recyclable bool
	over       []byte
}

// handSegment writes WAL segment num of the DB in dir as the engine does,
// in layout lay: a header naming first, then one batch per key, with
// sequence numbers from first on; without header, only the batches. It
// returns the offset past each record.
func handSegment(t *testing.T, fs vfs.FS, dir string, lay segmentLayout, num uint64, first base.SeqNum, header bool, keys ...string) []int64 {
	t.Helper()
	name := makeFilename(dir, fileTypeLog, num)
	writeFile(t, fs, name, lay.over)
	f, err := fs.Reuse(name, name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var opts wal.WriterOptions
	if lay.recyclable {
		opts.LogNum = num
	}
	w := wal.NewWriter(f, opts)
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

// olderSegment returns the bytes of a retired segment's file, of a
// number none the cases write has: many batches, so that a segment
// written over it ends inside them.
func olderSegment(t *testing.T) []byte {
	mem := vfs.NewMem()
	mem.MkdirAll("/old", 0o700)
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("old%03d", i)
	}
	const num = 999
	handSegment(t, mem, "/old", segmentLayout{recyclable: true}, num, 1, true, keys...)
	return readAll(t, mem, makeFilename("/old", fileTypeLog, num))
}

// TestSegmentAfterALoss: recovery replays WAL segments while each starts
// where the one before it ends (its first record's sequence number), and
// leaves out the first that does not, and every newer one: it starts
// after batches a crash lost. A torn tail that the next segment continues
// without a gap is corruption. The cases run on segments in version 1
// chunks (an older engine's), in recyclable chunks, and in recyclable
// chunks over a reused file's older segment.
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
	// truncate cuts segment num's records at size; over a reused file,
	// the older segment's bytes stay past them, as a crash leaves them.
	truncate := func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, size int64) {
		name := makeFilename("/db", fileTypeLog, num)
		data := readAll(t, fs, name)[:size]
		if int64(len(lay.over)) > size {
			data = append(data, lay.over[size:]...)
		}
		writeFile(t, fs, name, data)
	}
	// seg writes segment num in the case's layout.
	type seg func(num uint64, first base.SeqNum, header bool, keys ...string) []int64
	order := []string{"a", "b", "c", "d", "e"}
	for _, c := range []struct {
		name string
		// build writes the segments from num on.
		build func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg)
		want  []string // the keys recovered; nil: Open fails with corruption
		// overWant, when set, replaces want for segments over a reused
		// file, whose older bytes a recyclable segment ends at.
		overWant []string
	}{
		{"contiguous", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			seg(num, 1, true, "a", "b", "c")
			seg(num+1, 4, true, "d", "e")
		}, []string{"a", "b", "c", "d", "e"}, nil},
		{"contiguous, the newer segment without header", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			seg(num, 1, true, "a", "b", "c")
			seg(num+1, 4, false, "d", "e")
		}, []string{"a", "b", "c", "d", "e"}, nil},
		{"cut at a record boundary", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			ends := seg(num, 1, true, "a", "b", "c")
			truncate(t, fs, lay, num, ends[2]) // header, a, b
			seg(num+1, 4, true, "d", "e")
		}, []string{"a", "b"}, nil},
		{"torn", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			ends := seg(num, 1, true, "a", "b", "c")
			truncate(t, fs, lay, num, ends[3]-3) // c torn
			seg(num+1, 4, true, "d", "e")
		}, []string{"a", "b"}, nil},
		{"the newer segment's batches lost, its header kept", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			ends := seg(num, 1, true, "a", "b", "c")
			truncate(t, fs, lay, num, ends[2])
			ends = seg(num+1, 4, true, "d")
			truncate(t, fs, lay, num+1, ends[0])
			seg(num+2, 5, true, "e")
		}, []string{"a", "b"}, nil},
		{"a blank segment between", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			seg(num, 1, true, "a", "b")
			writeFile(t, fs, makeFilename("/db", fileTypeLog, num+1), lay.over)
			seg(num+2, 3, true, "c")
		}, []string{"a", "b"}, nil},
		{"an empty segment with its header between", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			seg(num, 1, true, "a", "b")
			seg(num+1, 3, true)
			seg(num+2, 3, true, "c")
		}, []string{"a", "b", "c"}, nil},
		// Bytes that are no chunk of the segment's, after its records:
		// damage after they were durable, in a new file; in a reused
		// file, what an older segment left there, and the end of the
		// segment's records.
		{"torn, yet continued", func(t *testing.T, fs vfs.FS, lay segmentLayout, num uint64, seg seg) {
			ends := seg(num, 1, true, "a", "b")
			name := makeFilename("/db", fileTypeLog, num)
			junk := append(readAll(t, fs, name)[:ends[len(ends)-1]], 0x55, 0x55, 0x55, 0x55, 0x55)
			writeFile(t, fs, name, junk)
			seg(num+1, 3, true, "c")
		}, nil, []string{"a", "b", "c"}},
	} {
		for _, mode := range []struct {
			name string
			lay  segmentLayout
		}{
			{"version 1", segmentLayout{}},
			{"recyclable", segmentLayout{recyclable: true}},
			{"over a reused file", segmentLayout{recyclable: true, over: olderSegment(t)}},
		} {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				mem, num := fresh(t)
				c.build(t, mem, mode.lay, num, func(num uint64, first base.SeqNum, header bool, keys ...string) []int64 {
					return handSegment(t, mem, "/db", mode.lay, num, first, header, keys...)
				})
				want := c.want
				if mode.lay.recyclable && c.overWant != nil {
					want = c.overWant
				}
				// Verify reads the segments as recovery does.
				rep, verr := Verify("/db", mem)
				db, err := Open("/db", &Options{FS: mem})
				if want == nil {
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
				if rep.WALBatches != len(want) {
					t.Fatalf("Verify counts %d batches it would replay, want %d (notes %q)", rep.WALBatches, len(want), rep.Notes)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				for _, k := range order {
					_, err := db.Get([]byte(k))
					if want := slices.Contains(want, k); want != (err == nil) {
						t.Fatalf("%s: %v, want present %v (recovered should be %v)", k, err, want, c.want)
					}
				}
				// The sequence numbers go on above everything written,
				// kept or not.
				if err := db.Set([]byte("later"), []byte("v"), nil); err != nil {
					t.Fatal(err)
				}
			})
		}
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
