package lsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// filesOfType lists a DB directory's files of one type, by number.
func filesOfType(t *testing.T, dir string, ft fileType) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range names {
		if got, _ := parseFilename(e.Name()); got == ft {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

func flipByte(t *testing.T, name string, offset int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, offset); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, offset); err != nil {
		t.Fatal(err)
	}
}

func writeKeys(t *testing.T, db *DB, n int) {
	t.Helper()
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "key%05d", i), fmt.Appendf(nil, "value%05d-%0100d", i, i), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCorruptTableBlockIsReported(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{CacheSize: -1}
	db := openTestDB(t, dir, opts)
	writeKeys(t, db, 500)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	tables := filesOfType(t, dir, fileTypeTable)
	if len(tables) != 1 {
		t.Fatalf("want one table, have %v", tables)
	}
	flipByte(t, tables[0], 100) // inside the first data block
	db = openTestDB(t, dir, opts)
	defer db.Close()
	_, getErr := db.Get([]byte("key00000"))
	it := db.NewIter(nil)
	for ok := it.First(); ok; ok = it.Next() {
	}
	iterErr := it.Close()
	for _, err := range []error{getErr, iterErr} {
		if !errors.Is(err, ErrCorruption) {
			t.Fatalf("reading a corrupt block: %v, want ErrCorruption", err)
		}
	}
	t.Logf("reported as: %v", getErr)
}

func TestCorruptManifestFailsOpen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, nil)
	writeKeys(t, db, 100)
	db.Flush()
	writeKeys(t, db, 50)
	db.Flush()
	db.Close()
	manifests := filesOfType(t, dir, fileTypeManifest)
	if len(manifests) != 1 {
		t.Fatalf("manifests: %v", manifests)
	}
	flipByte(t, manifests[0], 30) // inside the first record, followed by synced ones
	_, err := Open(dir, nil)
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("Open with a corrupt manifest: %v, want ErrCorruption", err)
	}
	t.Logf("reported as: %v", err)
}

func TestManifestWithoutIntactRecordFailsOpen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, nil)
	db.Close()
	manifests := filesOfType(t, dir, fileTypeManifest)
	flipByte(t, manifests[0], 5)
	if _, err := Open(dir, nil); !errors.Is(err, ErrCorruption) {
		t.Fatalf("Open with a manifest whose only record is corrupt: %v, want ErrCorruption", err)
	}
}

func TestCorruptWALMiddleFailsOpen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, nil)
	writeKeys(t, db, 200) // synced one by one: later records vouch for earlier ones
	db.Close()
	logs := filesOfType(t, dir, fileTypeLog)
	if len(logs) != 1 {
		t.Fatalf("logs: %v", logs)
	}
	flipByte(t, logs[0], 1000)
	_, err := Open(dir, nil)
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("Open with corruption in the middle of the WAL: %v, want ErrCorruption", err)
	}
	t.Logf("reported as: %v", err)
}

func TestTruncatedWALTailOpensWithPrefix(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, nil)
	writeKeys(t, db, 200)
	db.Close()
	logs := filesOfType(t, dir, fileTypeLog)
	// The log ends before the file does: zeros follow it (walZeroAhead).
	f, err := vfs.Default().Open(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	_, num := parseFilename(filepath.Base(logs[0]))
	end, err := logEndOf(f, num)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(logs[0], end-20); err != nil {
		t.Fatal(err)
	}
	db = openTestDB(t, dir, nil)
	defer db.Close()
	for i := range 199 {
		if _, err := db.Get(fmt.Appendf(nil, "key%05d", i)); err != nil {
			t.Fatalf("key %d of the intact prefix: %v", i, err)
		}
	}
	if _, err := db.Get([]byte("key00199")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the torn last record was recovered: %v", err)
	}
}
