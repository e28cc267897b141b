package lsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/wal"
)

// verifyStore builds a closed DB in a new directory with tables in L0 and
// a lower level, a MANIFEST of several records and WAL records not yet in
// any table.
func verifyStore(t *testing.T) string {
	t.Helper()
	return verifyStoreWith(t, &Options{DisableBackgroundCompactions: true, BlockSize: 512})
}

// verifyStoreWith is verifyStore with opts.
func verifyStoreWith(t *testing.T, opts *Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db")
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	put := func(from, to int) {
		b := db.NewBatch()
		for i := from; i < to; i++ {
			k := fmt.Appendf(nil, "key%05d", i)
			if i%9 == 0 {
				b.Delete(k)
			} else {
				b.Set(k, fmt.Appendf(nil, "value-%d-%s", i, strings.Repeat("x", i%50)))
			}
			if b.count == 20 {
				if err := db.Apply(b, nil); err != nil {
					t.Fatal(err)
				}
				b = db.NewBatch()
			}
		}
		if err := db.Apply(b, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 400)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(200, 600)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	put(500, 700)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(650, 800) // stays in the WAL
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVerifyCleanStore(t *testing.T) {
	dir := verifyStore(t)
	rep, err := Verify(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tables < 2 || rep.LevelTableCounts[0] == 0 || rep.LevelTableCounts[0] == rep.Tables || rep.WALBatches == 0 || rep.ManifestRecords < 2 {
		t.Fatalf("the store does not have the intended shape: %+v", rep)
	}
	if len(rep.Notes) != 0 {
		t.Fatalf("notes on a clean store: %v", rep.Notes)
	}
	// Verify leaves the store as it was: it still opens with every write.
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Get([]byte("key00799")); err != nil || !strings.HasPrefix(string(v), "value-799") {
		t.Fatalf("Get after verify = %q, %v", v, err)
	}
	if _, err := Verify(dir, nil); err == nil || !strings.Contains(err.Error(), "held") {
		t.Fatalf("Verify of an open DB = %v, want a refusal naming the lock", err)
	}
}

// TestVerifyFlippedByte flips one byte in each kind of file and part of a
// file and checks that Verify fails naming that file.
func TestVerifyFlippedByte(t *testing.T) {
	type target struct {
		name string
		// at returns the file (in dir) and the offset to flip.
		at func(t *testing.T, dir string) (string, int64)
	}
	// table returns the first table of L0 (which has a filter) and the
	// handle of one of its parts, read from the footer.
	tablePart := func(part int) func(t *testing.T, dir string) (string, int64) {
		return func(t *testing.T, dir string) (string, int64) {
			d, err := Describe(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			name := makeFilename(dir, fileTypeTable, d.Levels[0][0].FileNum)
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			footer := data[len(data)-68:]
			switch part {
			case -1: // the footer's version field
				return name, int64(len(data) - 68 + 48)
			case 0: // the first data block
				return name, 3
			}
			off := binary.LittleEndian.Uint64(footer[16*(part-1):])
			length := binary.LittleEndian.Uint64(footer[16*(part-1)+8:])
			if length == 0 {
				t.Fatalf("table part %d is absent", part)
			}
			return name, int64(off + length/2)
		}
	}
	firstWAL := func(t *testing.T, dir string) string {
		d, err := Describe(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return makeFilename(dir, fileTypeLog, d.WALs[len(d.WALs)-1])
	}
	manifest := func(t *testing.T, dir string) string {
		d, err := Describe(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d.Manifest
	}
	lastRecord := func(t *testing.T, name string) int64 {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		info, _ := f.Stat()
		r := wal.NewReader(f, info.Size())
		if _, num := parseFilename(filepath.Base(name)); strings.HasSuffix(name, ".log") {
			r = wal.NewRecyclableReader(f, info.Size(), num)
		}
		var start int64
		for {
			s := r.Offset()
			if _, err := r.Next(); err != nil {
				break
			}
			start = s
		}
		return start
	}
	for _, tg := range []target{
		{"sstable data block", tablePart(0)},
		{"sstable index block", tablePart(1)},
		{"sstable filter block", tablePart(2)},
		{"sstable properties block", tablePart(3)},
		{"sstable footer", tablePart(-1)},
		{"WAL first record", func(t *testing.T, dir string) (string, int64) { return firstWAL(t, dir), wal.RecyclableHeaderSize + 4 }},
		{"WAL last record", func(t *testing.T, dir string) (string, int64) {
			name := firstWAL(t, dir)
			return name, lastRecord(t, name) + wal.RecyclableHeaderSize + 4
		}},
		{"MANIFEST first record", func(t *testing.T, dir string) (string, int64) { return manifest(t, dir), wal.HeaderSize + 2 }},
		{"MANIFEST last record", func(t *testing.T, dir string) (string, int64) {
			name := manifest(t, dir)
			return name, lastRecord(t, name) + wal.HeaderSize + 1
		}},
		{"MANIFEST chunk header", func(t *testing.T, dir string) (string, int64) { return manifest(t, dir), 9 }},
		{"CURRENT", func(t *testing.T, dir string) (string, int64) { return filepath.Join(dir, "CURRENT"), 12 }},
	} {
		t.Run(tg.name, func(t *testing.T) {
			// WAL segments in new files: in one written over a retired
			// segment's file, damage to the last chunk reads as a torn
			// write over the older segment's bytes (TestVerifyReusedSegment).
			dir := verifyStoreWith(t, &Options{DisableBackgroundCompactions: true, BlockSize: 512, RecycledWALSegments: -1})
			name, off := tg.at(t, dir)
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			data[off] ^= 0x10
			if err := os.WriteFile(name, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Verify(dir, nil)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify after flipping byte %d of %s = %v, want a VerifyError", off, name, err)
			}
			if ve.File != name {
				t.Fatalf("Verify names %s, the damaged file is %s: %v", ve.File, name, err)
			}
			if ve.Offset < 0 || ve.Offset > off {
				t.Fatalf("Verify names offset %d, the flipped byte is at %d: %v", ve.Offset, off, err)
			}
			t.Log(err)
		})
	}
}

// lastSegment reads the newest WAL segment of the store in dir: its
// path, its bytes, and where each of its records starts, then where the
// last one ends. The segment's file may be a retired one's, reused: the
// log may end before the file does.
func lastSegment(t *testing.T, dir string) (name string, data []byte, starts []int64) {
	t.Helper()
	d, err := Describe(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	num := d.WALs[len(d.WALs)-1]
	name = makeFilename(dir, fileTypeLog, num)
	if data, err = os.ReadFile(name); err != nil {
		t.Fatal(err)
	}
	r := wal.NewRecyclableReader(bytes.NewReader(data), int64(len(data)), num)
	for {
		starts = append(starts, r.Offset())
		if _, err := r.Next(); err != nil {
			return name, data, starts
		}
	}
}

// TestVerifyReusedSegment: a WAL segment written over a retired one's
// file may end in a chunk whose write stopped part way over the older
// segment's bytes, which fails its checksum: that is a torn tail, not
// damage, so a flipped byte in that last chunk reads as one too (the
// price of reusing files, docs/wal.md), while one in a chunk that a later
// one vouches for is corruption.
func TestVerifyReusedSegment(t *testing.T) {
	dir := verifyStore(t)
	name, data, starts := lastSegment(t, dir)
	if end := starts[len(starts)-1]; end >= int64(len(data)) || len(starts) < 3 {
		t.Fatalf("test setup: %s ends at %d of its %d bytes after %d records: not a reused file holding an older segment past its records", name, end, len(data), len(starts)-1)
	}
	flip := func(off int64) error {
		damaged := bytes.Clone(data)
		damaged[off] ^= 0x10
		if err := os.WriteFile(name, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(name, data, 0o600)
		rep, err := Verify(dir, nil)
		if err == nil && len(rep.Notes) == 0 {
			t.Fatalf("flip at %d: no error and no note", off)
		}
		return err
	}
	last := starts[len(starts)-2]
	if err := flip(last + wal.RecyclableHeaderSize + 2); err != nil {
		t.Fatalf("a flipped byte in the last chunk of a reused segment: %v, want a torn tail", err)
	}
	var ve *VerifyError
	if err := flip(starts[1] + wal.RecyclableHeaderSize + 2); !errors.As(err, &ve) {
		t.Fatalf("a flipped byte in a vouched-for chunk of a reused segment: %v, want a VerifyError", err)
	}
}

// TestVerifyTornTail: a WAL cut short by a crash is not damage.
func TestVerifyTornTail(t *testing.T) {
	dir := verifyStore(t)
	name, _, starts := lastSegment(t, dir)
	if err := os.Truncate(name, starts[len(starts)-1]-7); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, nil)
	if err != nil {
		t.Fatalf("Verify of a torn WAL tail: %v", err)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "torn tail") {
		t.Fatalf("notes %q, want one about the torn tail", rep.Notes)
	}
}

// TestVerifyStaleLastSeq: a manifest whose last sequence number is below
// a table's newest entry (what an edit that recorded the number before
// waiting for its turn wrote, stop 30) makes Open hide that table's newer
// entries; Verify calls it damage, though every record is intact.
func TestVerifyStaleLastSeq(t *testing.T) {
	dir := verifyStore(t)
	d, err := Describe(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	for _, tables := range d.Levels {
		for _, tbl := range tables {
			newest = max(newest, tbl.LargestSeq)
		}
	}
	stale := base.SeqNum(newest - 1)

	rewriteManifest(t, nil, dir, func(_ int, e *versionEdit) []byte {
		e.lastSeq = min(e.lastSeq, stale)
		return e.encode()
	})

	_, err = Verify(dir, nil)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.File != d.Manifest || !errors.Is(err, ErrCorruption) {
		t.Fatalf("Verify of a manifest whose last sequence number is %d, below a table's %d = %v, want corruption of %s", stale, newest, err, d.Manifest)
	}
	t.Log(err)
}
